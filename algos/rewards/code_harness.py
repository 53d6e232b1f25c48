"""Runs one program against its tests, in a process of its own (started by ``algos.rewards.code_tests``).

``python -I code_harness.py SPEC RESULTS``: SPEC holds ``{"code", "fn_name", "inputs", "timeout_s", "memory_bytes",
"cpu_s"}`` as JSON (the limits apply to this process before any of the code runs); one JSON line per test goes to
RESULTS as it finishes: ``{"out": <stdout text>}`` for a program reading stdin
(``fn_name`` null), ``{"out": <the return value>}`` for a function called with the test's arguments, ``{"error":
"..."}`` when the test raised or ran out of time. A program reads its test's input as standard input (``input()``,
``sys.stdin.buffer``, ``open(0)`` alike: file descriptor 0 is the input). After a test that runs out of time no other
test runs. Stdlib only; the caller bounds the whole process (time, memory) and reads what it wrote before it ended.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import resource
import signal
import sys
import tempfile


class _TestTimeout(Exception):
    pass


def _alarm(_signum, _frame):
    raise _TestTimeout()


def _as_stdin(text: str) -> None:
    """File descriptor 0 and sys.stdin read `text` from its start."""
    try:
        os.fstat(0)
    except OSError:  # the last test's program closed it (`open(0)` closes on collection): the file below must not get 0
        os.open(os.devnull, os.O_RDONLY)
    with tempfile.TemporaryFile() as f:
        f.write(text.encode())
        f.flush()
        f.seek(0)
        os.dup2(f.fileno(), 0)  # the duplicate keeps the file after it is closed here
    sys.stdin = open(0, closefd=False)  # noqa: SIM115  (fd 0 stays open for the next test)


def _run_program(code: str, stdin_text: str, timeout_s: float) -> dict:
    """The whole program once, as `python program.py < input` would run it; its stdout."""
    out = io.StringIO()
    _as_stdin(stdin_text)
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(code, "<solution>", "exec"), {"__name__": "__main__"})
    except SystemExit:  # exit() ends a program normally
        pass
    except _TestTimeout:
        return {"error": "timeout"}
    except BaseException as err:  # the program's own error: this test fails, the next runs
        return {"error": f"{type(err).__name__}: {err}"}
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    return {"out": out.getvalue()}


def _call(function, args: list, timeout_s: float) -> dict:
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # prints are not the answer
            result = function(*args)
        return {"out": json.loads(json.dumps(result, default=list))}  # tuples and sets as lists, as JSON holds them
    except _TestTimeout:
        return {"error": "timeout"}
    except BaseException as err:
        return {"error": f"{type(err).__name__}: {err}"}
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def _function(code: str, name: str, timeout_s: float):
    """`Solution().<name>` where the code defines a class Solution (LeetCode's form), else the function `<name>`."""
    namespace: dict = {"__name__": "solution"}
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        exec(compile(code, "<solution>", "exec"), namespace)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    holder = namespace["Solution"]() if "Solution" in namespace else None
    return getattr(holder, name) if holder is not None else namespace[name]


def main(spec_path: str, results_path: str) -> None:
    with open(spec_path) as f:
        spec = json.load(f)
    # set here, not by the parent between fork and exec (unsafe in a threaded parent such as a reward worker)
    resource.setrlimit(resource.RLIMIT_AS, (spec["memory_bytes"], spec["memory_bytes"]))
    resource.setrlimit(resource.RLIMIT_CPU, (spec["cpu_s"], spec["cpu_s"] + 1))
    signal.signal(signal.SIGALRM, _alarm)
    with open(results_path, "w") as emit:
        if spec["fn_name"] is None:
            for stdin_text in spec["inputs"]:
                if not _emit(emit, _run_program(spec["code"], stdin_text, spec["timeout_s"])):
                    return
            return
        try:
            function = _function(spec["code"], spec["fn_name"], spec["timeout_s"])
        except BaseException as err:  # does not compile, or defines no such function: every test fails
            failed = json.dumps({"error": f"{type(err).__name__}: {err}"})
            emit.write("".join(failed + "\n" for _ in spec["inputs"]))
            return
        for args in spec["inputs"]:
            if not _emit(emit, _call(function, args, spec["timeout_s"])):
                return


def _emit(results, result: dict) -> bool:
    """Write one test's result; False after a timeout: a program that hangs once is not run on the other tests, so
    one sample costs one timeout at most (they count as failed)."""
    results.write(json.dumps(result) + "\n")
    results.flush()
    return result.get("error") != "timeout"


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
