"""Starting Serve itself (controller and HTTP proxy) the one way every entry point does: the rollout config's HTTP
address, the quiet logging of `serve.log_config`, and a controller that gives a slow proxy time to come up."""

from __future__ import annotations

import os
from typing import Any

# Serve's controller kills a proxy that does not answer its first readiness check within this many seconds (5 by
# default) and the `serve.start` waiting on it then fails with ActorDiedError. A 2-core machine busy with vLLM and a
# trainer starting beside it misses 5 s; a value the user exports wins.
PROXY_READY_TIMEOUT_ENV = "RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S"
PROXY_READY_TIMEOUT_S = "60"


def controller_options() -> dict[str, Any]:
    """`serve.start(controller_options=...)`: the proxy readiness timeout, the user's exported value if any. Passed
    explicitly because the controller of a joined cluster does not see the driver's environment."""
    timeout = os.environ.get(PROXY_READY_TIMEOUT_ENV, PROXY_READY_TIMEOUT_S)
    return {"runtime_env": {"env_vars": {PROXY_READY_TIMEOUT_ENV: timeout}}}


def start_serve(rollout: Any) -> None:
    """Start Serve for `rollout` (a `RolloutConfig`): its proxy binds to `rollout.http_host:rollout.http_port`. A Serve
    already running in the cluster is joined as it is (Serve ignores new options then)."""
    from ray import serve

    from serve.log_config import serve_logging_config

    serve.start(
        http_options={"host": rollout.http_host, "port": int(rollout.http_port)},
        logging_config=serve_logging_config(),
        controller_options=controller_options(),
    )
