"""Who may call the rollout's OpenAI routes: the API-key rule that the deployment enforces and the config check
(app.config.validate) applies before a run starts. Stdlib only, so the config imports neither Ray nor the routes."""

from __future__ import annotations

import os
from typing import Any, Optional

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def http_api_key(rollout: Any) -> Optional[str]:
    """The key the OpenAI routes require: `rollout.http_api_key`, else $RAYRL_API_KEY, else none, which only a
    loopback `rollout.http_host` may go without (anyone who reaches the port could use the policy)."""
    key = rollout.http_api_key or os.environ.get("RAYRL_API_KEY") or None
    if key is None and rollout.http_host not in LOOPBACK_HOSTS:
        raise ValueError(
            f"actor_rollout_ref.rollout.http_host={rollout.http_host!r} exposes the OpenAI routes "
            "beyond this machine: set actor_rollout_ref.rollout.http_api_key or the RAYRL_API_KEY "
            "environment variable, which requests must then send as 'Authorization: Bearer <key>'"
        )
    return key
