"""Processes that run a reward function on one sample at a time, with a per-sample time limit.

A sample that runs past the limit gets its worker killed and replaced, so one hung reward call costs one timeout, not
the run. Kept free of torch and of the rest of the app so a worker starts in a fraction of a second.

Workers are fresh interpreters that import only this module and the reward function, not multiprocessing's children:
a spawned or forkserver child first runs the parent's main module again, which in a Ray worker is Ray's worker script
(Ray imported in every reward process, about 30 MiB each and most of a second to start; docs/performance.md).
"""

from __future__ import annotations

import multiprocessing
import os
import select
import subprocess
import sys
import threading
import time
import traceback
from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any, Callable, Sequence


@dataclass
class TaskOutcome:
    """What happened to one sample: a value, an error (a phrase such as "raised ValueError: x", and the worker's
    traceback) or a timeout."""

    value: Any = None
    error: str | None = None
    traceback: str = ""
    timed_out: bool = False


def resolve_reward_fn(target: Any) -> Callable[..., Any]:
    """A RewardFnSpec is loaded; a plain callable is used as is."""
    from app.rewards.custom import RewardFnSpec, load_reward_fn

    return load_reward_fn(target) if isinstance(target, RewardFnSpec) else target


def _worker_main(conn: Any) -> None:
    """The worker's loop: receive the target (first message), load it, then answer ``(task_id, kwargs)`` messages
    until ``None`` or the parent's end closes."""
    try:
        fn = resolve_reward_fn(conn.recv())
    except BaseException as err:  # report why this worker is useless, then stop
        conn.send(("load_error", f"{type(err).__name__}: {err}"))
        return
    conn.send(("ready", None))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        task_id, kwargs = message
        try:
            reply = (task_id, fn(**kwargs), None, "")
        except BaseException as err:  # SystemExit from user code is an error too, not a reason to die
            reply = (task_id, None, f"raised {type(err).__name__}: {err}", traceback.format_exc())
        try:
            conn.send(reply)
        except Exception as err:  # the result could not be pickled
            conn.send((task_id, None, f"returned a value that cannot be sent back ({type(err).__name__}: {err})", ""))


def exit_with_parent(parent_pid: int) -> None:
    """End this process when ``parent_pid``, its parent, ends, however it ends (killed too). An idle worker ends on
    its closed pipe, but one inside a hung reward call would outlive the run, spinning or holding memory. Where the
    system has no pidfd (Linux before 5.3, other systems) only the closed pipe ends a worker."""
    try:
        pidfd = os.pidfd_open(parent_pid)
    except ProcessLookupError:
        os._exit(1)
    except (AttributeError, OSError):
        return
    if os.getppid() != parent_pid:  # it ended before the pidfd was open: this process was handed to another parent
        os._exit(1)

    def wait_for_parent() -> None:
        select.select([pidfd], [], [])  # readable once the process has ended
        os._exit(1)

    threading.Thread(target=wait_for_parent, name="exit-with-parent", daemon=True).start()


def serve_connection(fd: int, parent_pid: int) -> None:
    """A worker process's entry point: the pipe end it inherited as file descriptor ``fd``, and its parent's pid."""
    exit_with_parent(parent_pid)
    _worker_main(Connection(fd))


# the parent's sys.path goes to the child as PYTHONPATH, so it imports this module and the target as the parent does
_CHILD_COMMAND = (
    f"import sys; from {__name__} import serve_connection; serve_connection(int(sys.argv[1]), int(sys.argv[2]))"
)


class _Worker:
    def __init__(self, target: Any):
        self.conn, child_conn = multiprocessing.Pipe()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-c", _CHILD_COMMAND, str(child_conn.fileno()), str(os.getpid())],
                pass_fds=(child_conn.fileno(),),
                stdin=subprocess.DEVNULL,
                env=env,
            )
        finally:
            child_conn.close()
        self.ready = False
        self.task: int | None = None  # index of the sample in flight
        self.deadline = 0.0  # for the sample in flight, or for start-up while not ready
        self.started_at = time.monotonic()
        try:
            self.conn.send(target)  # pickled here: a lambda or a local function fails in this process
        except BaseException:
            self.kill()
            raise

    def is_alive(self) -> bool:
        return self.process.poll() is None

    def join(self, timeout: float) -> int | None:
        """The exit code (negative: killed by that signal), None if still running after ``timeout`` seconds."""
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        if self.is_alive():
            self.process.kill()  # SIGKILL: a hung reward may ignore SIGTERM
        self.join(timeout=10)
        self.conn.close()

    def stop(self) -> None:
        try:
            if self.is_alive() and self.task is None:
                self.conn.send(None)
                self.join(timeout=2)
        except (OSError, BrokenPipeError):
            pass
        self.kill()


class RewardWorkerPool:
    """``num_workers`` processes calling ``target(**kwargs)``; ``target`` is a RewardFnSpec or a function importable
    by module and name (a function of the main script is not: the workers do not run it)."""

    def __init__(self, target: Any, num_workers: int, timeout_s: float, start_timeout_s: float = 120.0):
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}")
        self.target = target
        self.num_workers = num_workers
        self.timeout_s = float(timeout_s)
        self.start_timeout_s = float(start_timeout_s)
        self._workers: list[_Worker] = []
        self.workers_replaced = 0

    def _start_worker(self) -> _Worker:
        try:
            return _Worker(self.target)
        except Exception as err:  # typically: a lambda or local function cannot be pickled for a spawned worker
            raise ValueError(
                f"cannot start a reward worker process with {self.target!r}: {type(err).__name__}: {err}. "
                "Use custom_reward_function.path or a function importable by module and name"
            ) from err

    def _fill(self) -> None:
        self._workers = [w for w in self._workers if w.is_alive() or w.task is not None]
        while len(self._workers) < self.num_workers:
            self._workers.append(self._start_worker())

    def run(self, tasks: Sequence[dict[str, Any]], stop_on_failure: bool = False) -> list[TaskOutcome | None]:
        """Outcomes in task order. With ``stop_on_failure`` it returns at the first error or timeout (other samples
        are left None and busy workers are killed so that nothing stale is left running)."""
        outcomes: list[TaskOutcome | None] = [None] * len(tasks)
        queue = deque(range(len(tasks)))
        self._fill()
        try:
            while queue or any(w.task is not None for w in self._workers):
                self._dispatch(queue, tasks)
                failed = self._collect(outcomes)
                if failed and stop_on_failure:
                    self._abort_busy()
                    return outcomes
        except BaseException:
            self._abort_busy()
            raise
        return outcomes

    def _dispatch(self, queue: deque, tasks: Sequence[dict[str, Any]]) -> None:
        for worker in self._workers:
            if queue and worker.ready and worker.task is None:
                index = queue.popleft()
                try:
                    worker.conn.send((index, tasks[index]))
                except (BrokenPipeError, ConnectionResetError, EOFError):  # it died while idle: retry on a new one
                    queue.appendleft(index)
                    self._replace(worker)
                    continue
                worker.task = index
                worker.deadline = time.monotonic() + self.timeout_s

    def _collect(self, outcomes: list[TaskOutcome | None]) -> bool:
        """Wait for the next message or deadline; record outcomes; returns whether a sample failed."""
        busy = [w for w in self._workers if w.task is not None]
        waiting = [w for w in self._workers if w.task is not None or not w.ready]
        now = time.monotonic()
        deadlines = [w.deadline for w in busy] + [w.started_at + self.start_timeout_s for w in waiting if not w.ready]
        timeout = max(0.0, min(deadlines, default=now) - now)
        ready_conns = wait([w.conn for w in waiting], timeout=timeout)
        failed = False
        for worker in waiting:
            if worker.conn not in ready_conns:
                continue
            try:
                message = worker.conn.recv()
            except (EOFError, OSError):
                failed |= self._lost(worker, outcomes)
                continue
            if message[0] == "ready":
                worker.ready = True
            elif message[0] == "load_error":
                raise RuntimeError(f"reward worker could not load its function: {message[1]}")
            else:
                task_id, value, error, trace = message
                outcomes[task_id] = TaskOutcome(value=value, error=error, traceback=trace)
                failed |= error is not None
                worker.task = None
        now = time.monotonic()
        for worker in list(self._workers):
            if worker.task is not None and now >= worker.deadline:
                outcomes[worker.task] = TaskOutcome(timed_out=True)
                failed = True
                self._replace(worker)
            elif not worker.ready and now >= worker.started_at + self.start_timeout_s:
                raise RuntimeError(f"reward worker did not start within {self.start_timeout_s:.0f}s")
        return failed

    def _lost(self, worker: _Worker, outcomes: list[TaskOutcome | None]) -> bool:
        """A worker died (os._exit, segfault, out of memory): its sample fails, a new worker takes its place."""
        code = worker.join(timeout=10)
        task = worker.task
        self._replace(worker)
        if task is None:
            raise RuntimeError(f"reward worker exited during start-up (exit code {code})")
        outcomes[task] = TaskOutcome(error=f"killed its worker process (exit code {code}); a new worker replaced it")
        return True

    def _replace(self, worker: _Worker) -> None:
        worker.kill()
        self._workers[self._workers.index(worker)] = self._start_worker()
        self.workers_replaced += 1

    def _abort_busy(self) -> None:
        for worker in list(self._workers):
            if worker.task is not None:
                self._replace(worker)

    def close(self) -> None:
        for worker in self._workers:
            worker.stop()
        self._workers = []
