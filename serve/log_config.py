"""Serve's logging for the rollout application: per-call access lines and INFO messages only when RAYRL_VERBOSE is
set (app/logs.py reads the same variable for the trainer's side), warnings and errors always."""

from __future__ import annotations

import os

VERBOSE_ENV = "RAYRL_VERBOSE"


def verbose() -> bool:
    return os.environ.get(VERBOSE_ENV, "").strip().lower() not in ("", "0", "false", "no", "off")


def serve_logging_config():
    """A `ray.serve.schema.LoggingConfig` for `serve.start` (controller, proxy) and the rollout deployment."""
    from ray.serve.schema import LoggingConfig

    loud = verbose()
    return LoggingConfig(enable_access_log=loud, log_level="INFO" if loud else "WARNING")
