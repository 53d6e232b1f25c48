"""The retry policy for calls whose rollout replica died, and the client's use of it, against a fake Serve handle:
no Ray cluster, no engine. The end-to-end kills are in test_replica_faults.py."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest
import ray.exceptions

from serve.engine_thread import EngineDead
from serve.replica_retry import FaultCounts, ReplicaRetryExhausted, RetryPolicy, replica_death, replica_name
from serve.types import PolicyVersionMismatch, RolloutSample, SamplingOptions

# What Ray raises when a Serve replica is SIGKILLed under a call (ActorDiedError built from the death context, as
# str() renders it): one sentence, indented fields, then the cause.
DEATH_TEXT = (
    "The actor died unexpectedly before finishing this task.\n\tclass_name: ServeReplica:app:rollout\n"
    "\tactor_id: 9f8e\n\tpid: 4242\n\tname: SERVE_REPLICA::app#rollout#k3xq9w\n"
    "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit "
    "detail: Worker unexpectedly exits with a connection error code 2. End of file. Some common causes "
    "include: (1) the process was killed by the OOM killer due to high memory usage, (2) ..."
)


class ReplicaDied(ray.exceptions.ActorDiedError):
    def __init__(self, text: str = DEATH_TEXT):
        super().__init__()
        self.text = text

    def __str__(self):
        return self.text


class FakeClock:
    def __init__(self):
        self.now = 0.0
        self.waits: list[float] = []

    def __call__(self) -> float:
        return self.now

    def wait(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.now += seconds


def scripted(outcomes, clock=None, took_s=0.0):
    """A call that raises or returns `outcomes` in turn, advancing `clock` by `took_s`; records its timeouts."""
    seen = []

    def call(timeout_s):
        seen.append(timeout_s)
        if clock is not None:
            clock.now += took_s
        outcome = outcomes[len(seen) - 1]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    return call, seen


def test_a_death_is_resent_at_once_logged_and_counted(caplog):
    clock = FakeClock()
    policy = RetryPolicy(3, 60.0, clock=clock, wait=clock.wait)
    counts = FaultCounts()
    call, seen = scripted([ReplicaDied(), "samples"])

    with caplog.at_level(logging.WARNING, logger="serve.replica_retry"):
        assert policy.run(call, "generate", counts) == "samples"

    assert seen == [None, 60.0]  # the first try unbounded; the resend gets what is left of replica_retry_timeout_s
    assert clock.waits == [0.0]  # at once: Serve routes it to a live replica or holds it for the replacement
    assert counts.take() == ({"k3xq9w"}, 1)
    assert counts.take() == (set(), 0)  # taken: the next step starts from zero
    assert "rollout replica k3xq9w died" in caplog.text and "retry 1 of 3" in caplog.text


def test_resends_stop_after_replica_retry_max_with_one_line_naming_replica_cause_and_keys():
    clock = FakeClock()
    policy = RetryPolicy(2, 600.0, clock=clock, wait=clock.wait)
    call, seen = scripted([ReplicaDied()] * 5)

    with pytest.raises(ReplicaRetryExhausted) as err:
        policy.run(call, "generate of prompts [0, 4) at policy version 3", FaultCounts())

    assert len(seen) == 3  # the try and 2 resends
    assert clock.waits == [0.0, 0.5]  # the second resend leaves the health check time to replace a dead engine
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("generate of prompts [0, 4) at policy version 3: rollout replica k3xq9w died (")
    assert (
        "(The actor died unexpectedly before finishing this task. The actor is dead because its worker process "
        "has died. Worker exit type: SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a connection "
        "error code 2. End of file.) and 2 resends"
    ) in message
    assert "pid: 4242" not in message and "common causes" not in message  # Ray's fields and advice stay out
    assert "actor_rollout_ref.rollout.replica_retry_max / replica_retry_timeout_s" in message


def test_when_every_try_killed_its_replica_the_error_points_at_the_call_and_the_replicas_log():
    # a request that crashes the engine (here: an illegal instruction) kills each replacement that takes it
    deaths = [ReplicaDied(DEATH_TEXT.replace("k3xq9w", tag)) for tag in ("r1", "r2", "r3")]
    call, _ = scripted(deaths)
    clock = FakeClock()
    with pytest.raises(ReplicaRetryExhausted) as err:
        RetryPolicy(2, 600.0, clock=clock, wait=clock.wait).run(call, "generate", FaultCounts())
    message = str(err.value)
    assert "rollout replica r3 died" in message
    assert "every try died with its replica (r1, r2, r3), so the call may be what kills them" in message
    assert "'Fatal Python error'" in message and message.endswith("replica_retry_max / replica_retry_timeout_s")

    # one death and no resend allowed: nothing says the call kills replicas, so the advice is the bounds alone
    call, _ = scripted([ReplicaDied()])
    with pytest.raises(ReplicaRetryExhausted) as err:
        RetryPolicy(0, 600.0, clock=clock, wait=clock.wait).run(call, "generate", FaultCounts())
    assert "every try" not in str(err.value)
    assert str(err.value).endswith(
        "did not complete it; raise actor_rollout_ref.rollout.replica_retry_max / replica_retry_timeout_s"
    )


def test_resends_stop_at_replica_retry_timeout_s_counted_from_the_first_death():
    clock = FakeClock()
    policy = RetryPolicy(10, 150.0, clock=clock, wait=clock.wait)
    call, seen = scripted([ReplicaDied()] * 5, clock, took_s=100.0)

    with pytest.raises(ReplicaRetryExhausted, match="replica_retry_timeout_s=150"):
        policy.run(call, "generate", FaultCounts())

    # first death at t=100: deadline 250. Resend at 100 (150 s left) dies at 200; resend at 200.5 (49.5 s left)
    # dies at 300.5; a third would start after the deadline.
    assert seen == [None, 150.0, 49.5]


def test_a_resend_that_outlasts_the_timeout_stops_the_run_but_a_first_try_timeout_is_the_callers():
    clock = FakeClock()
    policy = RetryPolicy(3, 30.0, clock=clock, wait=clock.wait)
    call, _ = scripted([ReplicaDied(), TimeoutError("Timed out after 30s.")])
    with pytest.raises(ReplicaRetryExhausted, match=r"did not finish within replica_retry_timeout_s=30 "):
        policy.run(call, "generate", FaultCounts())

    call, seen = scripted([TimeoutError("caller's own limit")])
    with pytest.raises(TimeoutError, match="caller's own limit"):
        policy.run(call, "generate", FaultCounts())
    assert seen == [None]


@pytest.mark.parametrize(
    "error",
    [
        PolicyVersionMismatch(4, 0, "k3xq9w"),  # a replacement that could not replay the policy: resending samples v0
        ray.exceptions.RayTaskError("generate", "Traceback ...", ValueError("prompt 2 is longer than max_model_len")),
        ValueError("bad request"),
    ],
    ids=["version-mismatch", "replica-raised", "local"],
)
def test_answers_a_replica_gave_on_purpose_are_not_resent(error):
    policy = RetryPolicy(3, 60.0, clock=FakeClock(), wait=lambda s: None)
    counts = FaultCounts()
    call, seen = scripted([error, "never"])

    with pytest.raises(type(error)):
        policy.run(call, "generate", counts)

    assert seen == [None] and counts.take() == (set(), 0)
    assert replica_death(error) is None


def test_what_counts_as_a_replica_death():
    unavailable = ray.exceptions.ActorUnavailableError("connection reset", None)
    engine = ray.exceptions.RayTaskError("generate", "Traceback ...", EngineDead("EngineCore exited (exit code -9)"))
    from ray.serve.exceptions import ReplicaUnavailableError

    gone = ReplicaUnavailableError("Replica(id='ab12', deployment='rollout', app='app')")
    assert replica_death(ReplicaDied()).startswith("The actor died unexpectedly before finishing this task.")
    assert "is unavailable: connection reset" in replica_death(unavailable)
    assert replica_death(engine) == "the replica's engine died: EngineCore exited (exit code -9)"
    assert replica_death(gone) is not None
    assert replica_name(ReplicaDied()) == "k3xq9w"
    assert replica_name(ReplicaDied("The actor died unexpectedly before finishing this task.")) == "unknown"


def test_bounds_are_checked_naming_the_key():
    with pytest.raises(ValueError, match=r"replica_retry_max=-1: must be >= 0"):
        RetryPolicy(-1, 60.0)
    with pytest.raises(ValueError, match=r"replica_retry_timeout_s=0.0: must be > 0"):
        RetryPolicy(3, 0.0)


# ---------------------------------------------------------------------- the client over a fake handle
class FakeResponse:
    def __init__(self, outcome):
        self.outcome = outcome
        self.cancelled = False

    def result(self, timeout_s=None):
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome


class FakeBroadcast:
    def __init__(self, results):
        self._results = results

    def results(self, timeout_s=None, return_exceptions=False):
        if isinstance(self._results, BaseException):
            raise self._results
        if not return_exceptions:
            for r in self._results:
                if isinstance(r, BaseException):
                    raise r
        return list(self._results)


class FakeHandle:
    """Answers generate per chunk (by its index offset) and broadcasts per method from scripts; records calls."""

    def __init__(self, die_once_at_offset=(), broadcasts=None):
        self.die_once = set(die_once_at_offset)
        self.generate_calls: list[int] = []
        self.broadcast_calls: list[str] = []
        self.broadcasts = broadcasts or {}
        handle = self

        class Generate:
            @staticmethod
            def remote(prompts, sampling, expect_version, offset):
                handle.generate_calls.append(offset)
                if offset in handle.die_once:
                    handle.die_once.discard(offset)
                    return FakeResponse(ReplicaDied())
                return FakeResponse(
                    [
                        RolloutSample(offset + i, j, [7, 8], [-0.5, -0.25], "length", expect_version)
                        for i in range(len(prompts))
                        for j in range(sampling.n)
                    ]
                )

        self.generate = Generate

    def broadcast(self, method, *args):
        self.broadcast_calls.append(method)
        return FakeBroadcast(self.broadcasts[method].pop(0))


def make_client(handle, **rollout):
    from app.config.schema import RolloutConfig
    from serve.client import RolloutClient

    cfg = replace(RolloutConfig(), **{"response_length": 2, "max_num_seqs": 64, "replicas": 2, **rollout})
    client = RolloutClient("app", cfg)
    client._handle = handle
    return client


def test_generate_resends_only_the_dead_replicas_chunk_and_returns_every_sample_at_the_version():
    handle = FakeHandle(die_once_at_offset=[2])
    client = make_client(handle)
    sampling = SamplingOptions(max_tokens=2, n=3)

    samples = client.generate([[1, 2]] * 4, expect_version=5, sampling=sampling)

    # 2 replicas: chunks [0, 2) and [2, 4); the one at offset 2 died once and alone was sent again
    assert sorted(handle.generate_calls) == [0, 2, 2]
    assert [(s.prompt_index, s.sample_index) for s in samples] == [(p, j) for p in range(4) for j in range(3)]
    assert {s.policy_version for s in samples} == {5}
    assert client.take_faults() == ({"k3xq9w"}, 1)


def test_generate_past_the_bound_raises_the_one_line_error():
    handle = FakeHandle(die_once_at_offset=[0])
    client = make_client(handle, replicas=1, replica_retry_max=0)

    with pytest.raises(
        ReplicaRetryExhausted,
        match=r"^generate of prompts \[0, 2\) at policy version 1: rollout "
        r"replica k3xq9w died \(.*replica_retry_max=0",
    ):
        client.generate([[1]] * 2, expect_version=1, sampling=SamplingOptions(max_tokens=2))
    assert handle.generate_calls == [0]


def test_update_weights_resends_to_the_replacement_until_every_replica_serves_the_version(monkeypatch):
    import serve.client
    from serve.types import LoraAdapter

    monkeypatch.setattr(serve.client, "to_wire", lambda payload, chunk_bytes: "wire")  # no object store here
    handle = FakeHandle(
        broadcasts={
            "update_weights": [[2, ReplicaDied()]],  # replica a loaded version 2; the other died during the sync
            # the resend reaches a alone (the replacement c is starting), then a and c
            "ensure_version": [[2], [2, 2]],
            # c replayed the store before a had published version 2, so it came back on version 1
            "policy_version": [
                [{"replica": "a", "version": 2}, {"replica": "c", "version": 1}],
                [{"replica": "a", "version": 2}, {"replica": "c", "version": 2}],
            ],
        }
    )
    client = make_client(handle)

    assert client.update_weights(2, LoraAdapter({"r": 8}, {})) == {"a": 2, "c": 2}
    assert handle.broadcast_calls == [
        "update_weights",
        "ensure_version",
        "policy_version",
        "ensure_version",
        "policy_version",
    ]
    assert client.take_faults() == ({"k3xq9w"}, 1)


def test_update_weights_failing_on_a_live_replica_is_not_resent(monkeypatch):
    import serve.client
    from serve.types import LoraAdapter

    monkeypatch.setattr(serve.client, "to_wire", lambda payload, chunk_bytes: "wire")
    failure = ray.exceptions.RayTaskError("update_weights", "Traceback ...", ValueError("adapter rank 64 > 8"))
    handle = FakeHandle(broadcasts={"update_weights": [[2, failure]]})
    client = make_client(handle)

    with pytest.raises(RuntimeError, match=r"update_weights\(version=2\) failed on a replica: .*adapter rank 64"):
        client.update_weights(2, LoraAdapter({"r": 64}, {}))
    assert handle.broadcast_calls == ["update_weights"]


def test_a_sync_without_a_death_checks_the_replicas_it_reached_and_waits_for_no_other(monkeypatch):
    import serve.client
    from serve.types import LoraAdapter

    monkeypatch.setattr(serve.client, "to_wire", lambda payload, chunk_bytes: "wire")
    # the client's config says 2 replicas, the application runs 1 (deployed with another config): nothing to wait for
    handle = FakeHandle(broadcasts={"update_weights": [[3]], "policy_version": [[{"replica": "a", "version": 3}]]})
    client = make_client(handle, replicas=2)

    assert client.update_weights(3, LoraAdapter({"r": 8}, {})) == {"a": 3}
    assert handle.broadcast_calls == ["update_weights", "policy_version"]
    assert client.take_faults() == (set(), 0)
