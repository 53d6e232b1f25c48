"""When a rollout call whose replica died is sent again, and when the run gives up: the retry policy of the client.

A call is resent only when its replica died under it (Ray says the actor died or is unreachable, Serve says the
replica is gone, or the replica's engine died and Serve will replace the replica). Anything the replica answered on
purpose is final: a `PolicyVersionMismatch` (a resend would sample another policy, or the same refusal), a bad
request, a failure in the engine's own code. The resend names the same policy version, and a replica refuses
any other, so a retried sample is as on-policy as the first try.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

import ray.exceptions
from ray.serve.exceptions import ReplicaUnavailableError

from serve.engine_thread import EngineDead
from serve.types import PolicyVersionMismatch

logger = logging.getLogger(__name__)

RETRY_KEYS = "actor_rollout_ref.rollout.replica_retry_max / replica_retry_timeout_s"


class ReplicaRetryExhausted(RuntimeError):
    """A call whose replica died could not be completed within the retry bounds. Its message is one line: the
    call, the replica, the cause Ray gave, and the keys that bound the retries."""


def replica_death(err: BaseException) -> Optional[str]:
    """The cause, as one line, when `err` says the replica died under the call; None for any other error."""
    if isinstance(err, PolicyVersionMismatch):
        return None
    if isinstance(err, (ray.exceptions.RayActorError, ReplicaUnavailableError)):
        return _first_line(err)
    cause = getattr(err, "cause", None)
    if isinstance(err, ray.exceptions.RayTaskError) and isinstance(cause, EngineDead):
        return f"the replica's engine died: {_first_line(cause)}"
    return None


def replica_name(err: BaseException) -> str:
    """The replica an error names (Serve's actor name `SERVE_REPLICA::<app>#<deployment>#<tag>` ends in the tag),
    else Ray's actor id, else 'unknown'."""
    text = str(err)
    match = (
        re.search(r"SERVE_REPLICA::(\S+)", text)
        or re.search(r"Replica\(id='([^']+)'", text)
        or re.search(r"Replica (\S+) is no longer available", text)
    )
    if match:
        return match.group(1).rsplit("#", 1)[-1]
    actor_id = getattr(err, "actor_id", None)
    return f"actor {actor_id}" if actor_id else "unknown"


def _first_line(err: BaseException) -> str:
    """Ray's message on one line: its sentences, without the indented `key: value` lines (class, pid, ip...)."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip() and not line.startswith((" ", "\t"))]
    text = " ".join(lines) if lines else type(err).__name__
    return text.split(" Some common causes include:")[0]  # Ray's generic advice after a worker's death


def _advice(died_under_it: list[str]) -> str:
    """What to do once resends ran out. A call whose every try killed its replica may be what kills them (an engine
    crash such as an illegal instruction, or memory), and more resends would only kill more."""
    if len(died_under_it) < 2:
        return f"raise {RETRY_KEYS}"
    replicas = ", ".join(dict.fromkeys(died_under_it))
    return (
        f"every try died with its replica ({replicas}), so the call may be what kills them: the replica's log says "
        f"how (a 'Fatal Python error' line in the console, or an OOM kill); if something else killed them, raise "
        f"{RETRY_KEYS}"
    )


class FaultCounts:
    """What replica deaths cost since the last `take()`: the replicas seen dying and the calls resent. Chunks
    report from their own threads."""

    def __init__(self):
        self._lock = threading.Lock()
        self._dead: set[str] = set()
        self._resent = 0

    def died(self, replica: str) -> None:
        with self._lock:
            self._dead.add(replica)

    def resent(self) -> None:
        with self._lock:
            self._resent += 1

    def take(self) -> tuple[set[str], int]:
        with self._lock:
            out = (self._dead, self._resent)
            self._dead, self._resent = set(), 0
        return out


@dataclass(frozen=True)
class RetryPolicy:
    """`max_retries` resends of one call at most, none started later than `timeout_s` after its first failure.
    `backoff_s(attempt)` spaces them: the first at once (Serve routes it to a live replica, or queues it until the
    replacement has started and replayed the policy), later ones after the health check has had time to act."""

    max_retries: int
    timeout_s: float
    clock: Callable[[], float] = time.monotonic
    wait: Callable[[float], None] = time.sleep

    def __post_init__(self):
        if self.max_retries < 0:
            raise ValueError(
                f"actor_rollout_ref.rollout.replica_retry_max={self.max_retries}: must be >= 0 "
                "(0: a replica death stops the run)"
            )
        if not self.timeout_s > 0:
            raise ValueError(f"actor_rollout_ref.rollout.replica_retry_timeout_s={self.timeout_s}: must be > 0")

    @classmethod
    def from_rollout_config(cls, rollout: Any) -> "RetryPolicy":
        return cls(int(rollout.replica_retry_max), float(rollout.replica_retry_timeout_s))

    @staticmethod
    def backoff_s(attempt: int) -> float:
        return 0.0 if attempt <= 1 else min(8.0, 0.5 * 2 ** (attempt - 2))

    def run(self, call: Callable[[Optional[float]], Any], what: str, counts: FaultCounts) -> Any:
        """`call(timeout_s)` until it returns; resent after a replica death, within the bounds. `timeout_s` is
        None on the first try (a generation takes what it takes) and the time left on a resend."""
        deadline, died_under_it = None, []
        while True:
            remaining = None if deadline is None else deadline - self.clock()
            try:
                return call(remaining)
            except TimeoutError as err:
                if deadline is None:
                    raise
                raise ReplicaRetryExhausted(
                    f"{what}: a resend after a replica died did not finish within replica_retry_timeout_s="
                    f"{self.timeout_s:g} ({_first_line(err)}); raise {RETRY_KEYS}"
                ) from None
            except Exception as err:
                cause = replica_death(err)
                if cause is None:
                    raise
                replica = replica_name(err)
                counts.died(replica)
                died_under_it.append(replica)
                attempt = len(died_under_it)  # every try so far died with its replica
                if deadline is None:
                    deadline = self.clock() + self.timeout_s
                if attempt > self.max_retries or self.clock() + self.backoff_s(attempt) >= deadline:
                    raise ReplicaRetryExhausted(
                        f"{what}: rollout replica {replica} died ({cause}) and {attempt - 1} resends within "
                        f"replica_retry_max={self.max_retries}, replica_retry_timeout_s={self.timeout_s:g} did not "
                        f"complete it; {_advice(died_under_it)}"
                    ) from None
                logger.warning(
                    "%s: rollout replica %s died (%s); resending it (retry %d of %d)",
                    what,
                    replica,
                    cause,
                    attempt,
                    self.max_retries,
                )
                counts.resent()
                self.wait(self.backoff_s(attempt))
