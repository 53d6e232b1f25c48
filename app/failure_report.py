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
        elif _is_ray_task_error(exc) and isinstance(getattr(exc, "cause", None), BaseException):
            exc = exc.cause
        else:
            break
    return exc


def _is_ray_task_error(exc: BaseException) -> bool:
    return any(cls.__name__ == "RayTaskError" and cls.__module__ == "ray.exceptions" for cls in type(exc).__mro__)


def report_run_failure(exc: BaseException) -> int:
    """The root cause as the last line on stderr; returns the exit code of a failed run. Re-raises (the whole
    traceback) when RAYRL_TRACEBACK=1."""
    if os.environ.get(TRACEBACK_ENV, "") not in ("", "0"):
        raise exc
    cause = root_cause(exc)
    message = one_line(str(cause))
    name = type(cause).__name__
    if message.startswith(name + ":"):
        text = message
    else:
        text = f"{name}: {message}" if message else name
    print(f"error: {text} (the run failed in a Ray worker; {TRACEBACK_ENV}=1 shows the whole traceback)",
          file=sys.stderr, flush=True)
    return RUN_FAILED


class OneLineArgumentParser(argparse.ArgumentParser):
    """argparse, whose usage errors (a missing or unknown option) end with one line and exit 2 like the others."""

    def error(self, message: str):  # type: ignore[override]
        sys.exit(print_error(f"{self.prog}: {message} (--help lists the options)"))
