"""Serve's logging for the rollout application: per-call access lines and INFO messages only when RAYRL_VERBOSE is
set (app/logs.py reads the same variable for the trainer's side), warnings and errors always."""

from __future__ import annotations

import logging
import os

VERBOSE_ENV = "RAYRL_VERBOSE"
# vLLM's notices while it is first imported, before its own logging (VLLM_LOGGING_LEVEL) is set up, so they reach
# whatever handler the process has: "Triton is installed, but doesn't include CPU backend" on every CPU replica
VLLM_IMPORT_NOTICE_LOGGERS = ("vllm.triton_utils.importing",)


def verbose() -> bool:
    return os.environ.get(VERBOSE_ENV, "").strip().lower() not in ("", "0", "false", "no", "off")


def serve_logging_config():
    """A `ray.serve.schema.LoggingConfig` for `serve.start` (controller, proxy) and the rollout deployment."""
    from ray.serve.schema import LoggingConfig

    loud = verbose()
    return LoggingConfig(enable_access_log=loud, log_level="INFO" if loud else "WARNING")


def hold_vllm_import_notices() -> None:
    """VLLM_IMPORT_NOTICE_LOGGERS at ERROR unless verbose; call before the process first imports vLLM."""
    if not verbose():
        for name in VLLM_IMPORT_NOTICE_LOGGERS:
            logging.getLogger(name).setLevel(logging.ERROR)
