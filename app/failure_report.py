"""How an entry point ends on an error: one line on stderr.

Bad input found on the driver (a ConfigError, DataError, ...) prints `error: <message>` and exits 2. A run that fails
later, in a Ray worker, prints the worker's own exception as the last line (exit 1), not Ray's wrappers around it
(Ray Train's WorkerGroupError / ControllerError, RayTaskError); RAYRL_TRACEBACK=1 shows the whole traceback instead.
"""

from __future__ import annotations

import argparse
import os
import sys

TRACEBACK_ENV = "RAYRL_TRACEBACK"
BAD_INPUT = 2
RUN_FAILED = 1


def one_line(text: str) -> str:
    """The message on one line: a multi-line message that holds a traceback keeps its last line (the exception),
    any other is joined."""
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    if not lines:
        return ""
    if any(line.startswith("Traceback (most recent call last)") for line in lines):
        return lines[-1]
    return " ".join(lines)


def print_error(exc: BaseException | str) -> int:
    """`error: <message>` on stderr; returns the exit code for bad input."""
    print(f"error: {one_line(str(exc))}", file=sys.stderr, flush=True)
    return BAD_INPUT


def root_cause(exc: BaseException) -> BaseException:
    """The exception a worker raised, out of the wrappers Ray puts around it on its way to the driver."""
    seen = set()
    while id(exc) not in seen:
        seen.add(id(exc))
        failures = getattr(exc, "worker_failures", None)  # ray.train.WorkerGroupError: rank -> exception
        if isinstance(failures, dict) and failures:
            exc = failures[min(failures)]
        elif isinstance(getattr(exc, "controller_failure", None), BaseException):  # ray.train.ControllerError
            exc = exc.controller_failure
        elif isinstance(getattr(exc, "_base_exc", None), BaseException):  # Ray Train's UserExceptionWithTraceback
            exc = exc._base_exc
        elif isinstance(getattr(exc, "health_check_failure", None), BaseException):  # a worker that died
            exc = exc.health_check_failure
        elif _is_ray_task_error(exc) and isinstance(getattr(exc, "cause", None), BaseException):
            exc = exc.cause
        else:
            break
    return exc


def _is_ray_task_error(exc: BaseException) -> bool:
    return any(cls.__name__ == "RayTaskError" and cls.__module__ == "ray.exceptions" for cls in type(exc).__mro__)


def failed_rank(exc: BaseException) -> int | None:
    """The lowest rank among the failed train workers Ray Train names, if it names any."""
    seen = set()
    while id(exc) not in seen:
        seen.add(id(exc))
        failures = getattr(exc, "worker_failures", None)
        if isinstance(failures, dict) and failures:
            return min(failures)
        inner = getattr(exc, "controller_failure", None) or getattr(exc, "cause", None)
        if not isinstance(inner, BaseException):
            return None
        exc = inner
    return None


def failure_line(exc: BaseException, max_failures: int) -> str:
    """What stopped the run, on one line: the worker and its own exception; where trainer.max_failures is 0, the
    keys that let a run resume. A rollout replica that could not be replaced in time (serve.ReplicaRetryExhausted)
    and replicas that could not start (serve.RolloutStartFailed) say so in their own words: no restart of the train
    workers mends them."""
    cause = root_cause(exc)
    # their messages name the application or replica and Serve's or Ray's cause
    if type(cause).__name__ in ("ReplicaRetryExhausted", "RolloutStartFailed"):
        return one_line(str(cause))
    message = one_line(str(cause)).removeprefix(type(cause).__name__ + ":").strip()
    what = f"{type(cause).__name__}: {message}" if message else type(cause).__name__
    rank = failed_rank(exc)
    who = f"train worker rank {rank}" if rank is not None else "the training run"
    if max_failures == 0:
        return (
            f"{who} failed ({what}) and trainer.max_failures=0 stops the run at a worker's first failure; set "
            "trainer.max_failures (worker-group restarts) and trainer.save_freq (the checkpoints a restart resumes "
            "from) to let the run resume"
        )
    return f"{who} failed ({what}) after trainer.max_failures={max_failures} restarts of the worker group"


def report_run_failure(exc: BaseException, max_failures: int = 0) -> int:
    """`failure_line` as the last line on stderr; returns the exit code of a failed run. Re-raises (the whole
    traceback) when RAYRL_TRACEBACK=1."""
    if os.environ.get(TRACEBACK_ENV, "") not in ("", "0"):
        raise exc
    print(
        f"error: {failure_line(exc, max_failures)} ({TRACEBACK_ENV}=1 shows the whole traceback)",
        file=sys.stderr,
        flush=True,
    )
    return RUN_FAILED


class OneLineArgumentParser(argparse.ArgumentParser):
    """argparse, whose usage errors (a missing or unknown option) end with one line and exit 2 like the others."""

    def error(self, message: str):  # type: ignore[override]
        sys.exit(print_error(f"{self.prog}: {message} (--help lists the options)"))
