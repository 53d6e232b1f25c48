"""How loud a run is: this package's messages through `logging`, and the chatter of Ray, Ray Serve and vLLM off
unless asked for.

`RAYRL_VERBOSE=1` turns everything back on: Ray Train's per-report dumps, Serve's access lines, vLLM's INFO lines and
this package's DEBUG messages. Without it the console holds the driver's one line per step (app.trainer.progress),
warnings and errors from every library, and this package's INFO notices (such as a verl key that has no effect).
"""

from __future__ import annotations

import importlib
import logging
import os
import sys

from serve.log_config import VERBOSE_ENV, verbose  # one reading of RAYRL_VERBOSE for both sides

__all__ = [
    "VERBOSE_ENV",
    "verbose",
    "setup_logging",
    "quiet_env",
    "quiet_loggers",
    "train_log_level",
    "quiet_train_reports",
    "quiet_dashboardless_worker",
]

# Environment of every Ray process of a quiet run (set in the runtime env, so workers on other nodes get it too). A
# value the user exported wins.
QUIET_ENV = {
    # vLLM's engine arguments, model loading and per-request INFO lines, and its start-up warnings about the build
    # (Triton, tcmalloc, eager mode) that a user of the run cannot act on
    "VLLM_LOGGING_LEVEL": "ERROR",
    "TORCH_CPP_LOG_LEVEL": "ERROR",  # c10's start-up notices in each replica (NUMA binding)
    "TQDM_DISABLE": "1",  # loading bars inside Ray processes, which Ray's line-based log streaming breaks up
    # libraries' deprecation notices about their own internals, printed by every replica and worker
    "PYTHONWARNINGS": "ignore::FutureWarning,ignore::DeprecationWarning",
}
# Every run, verbose or not: Ray Train hands a train worker's print() to the root logger and, since Ray wraps a
# worker's stdout, to stdout as well, so each line reached the console twice ("resumed from ..."); unpatched, once
CONSOLE_ENV = {"RAY_TRAIN_ENABLE_PRINT_PATCH": "0"}
# loggers that print INFO lines about the machinery on the driver and in the workers (Serve's app start, handles)
CHATTY_LOGGERS = ("ray.serve", "huggingface_hub")
# modules whose logger is named after their file (`get_logger(__file__)`), outside their package's hierarchy, so
# CHATTY_LOGGERS' levels do not reach them: huggingface_hub's "Model weights successfully saved to <temporary
# folder>" when the train worker writes the final model
CHATTY_FILE_LOGGERS = ("huggingface_hub.serialization._torch",)
# loggers whose warnings are notices, not problems: Ray's "token authentication is enabled" at every local start
NOTICE_LOGGERS = ("ray._private.authentication.authentication_token_setup",)
# Ray Train's placement-group cleaner asks the dashboard's state API every second whether the run's controller lives;
# on a cluster started without the dashboard (ray_kwargs.ray_init.include_dashboard=false) each ask fails with a
# WARNING line and it goes on watching: hundreds of lines a run, about nothing the user can act on
DASHBOARDLESS_LOGGERS = ("ray.train.v2._internal.execution.controller.placement_group_cleaner",)
# the Ray worker process setup hook (runtime_env `worker_process_setup_hook`) of a cluster started without the dashboard
DASHBOARDLESS_WORKER_HOOK = "app.logs.quiet_dashboardless_worker"


def setup_logging() -> None:
    """On the driver: `app.*` messages at INFO (DEBUG when verbose) to stderr, other libraries' at WARNING."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    app_logger = logging.getLogger("app")
    app_logger.handlers[:] = [handler]
    app_logger.setLevel(logging.DEBUG if verbose() else logging.INFO)
    app_logger.propagate = False
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")


def quiet_loggers() -> None:
    """CHATTY_LOGGERS and CHATTY_FILE_LOGGERS at WARNING and NOTICE_LOGGERS at ERROR unless verbose (on the driver,
    and in each train worker). Ray Serve sets its logger to INFO when it is imported, so this imports it first (the
    callers use it anyway)."""
    if verbose():
        return
    import ray.serve  # noqa: F401

    for name in CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    for module in CHATTY_FILE_LOGGERS:
        _file_named_logger(module).setLevel(logging.WARNING)
    for name in NOTICE_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)


def quiet_dashboardless_worker() -> None:
    """Run by Ray in every worker process of a cluster the run starts without the dashboard (DASHBOARDLESS_WORKER_HOOK):
    DASHBOARDLESS_LOGGERS at ERROR unless verbose."""
    if verbose():
        return
    for name in DASHBOARDLESS_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)


def quiet_env() -> dict[str, str]:
    """Environment variables for the run's Ray processes: CONSOLE_ENV, and QUIET_ENV unless verbose, without those the
    user set; when verbose, RAYRL_VERBOSE itself, so that processes on other nodes see it too."""
    wanted = {**CONSOLE_ENV, **({VERBOSE_ENV: "1"} if verbose() else QUIET_ENV)}
    return {name: value for name, value in wanted.items() if name not in os.environ or name == VERBOSE_ENV}


def train_log_level() -> str:
    """Ray Train's `LoggingConfig(log_level=...)`: its controller's and workers' `ray.train` INFO lines (worker group
    started, ...) only when verbose."""
    return "INFO" if verbose() else "WARNING"


def quiet_train_reports() -> None:
    """In a Ray Train worker: drop the INFO line Ray Train logs for every `ray.train.report` call, which prints the
    whole metrics dict ("Reporting training result N: TrainingReport(...)"). Its logger is named after the file that
    logs it, not `ray.train`, so LoggingConfig(log_level=...) does not reach it. Also CHATTY_LOGGERS."""
    if verbose():
        return
    _file_named_logger("ray.train.v2._internal.execution.context").setLevel(logging.WARNING)
    quiet_loggers()


def _file_named_logger(module: str) -> logging.Logger:
    """The logger a module names after its file (`getLogger(__file__)`), which no package logger's level reaches."""
    return logging.getLogger(importlib.import_module(module).__file__)
