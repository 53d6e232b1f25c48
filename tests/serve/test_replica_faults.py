"""Rollout replicas SIGKILLed in the middle of a call, end to end on vLLM: two replicas of the tiny fp32 Llama shared
by the module. Each test starts with both replicas up on the module's policy version and kills one of them once its
call has reached it (the replica reports the generation running, or the sync waiting for it), never after a sleep.

What the client must do (serve.replica_retry): resend only the dead replica's share, at the same policy version;
bring every replica to the new version after a sync that lost one; past its bound, stop with one line.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import replace
from pathlib import Path

import psutil
import pytest
from background_call import in_background
from support import assert_replicas_loaded

pytestmark = pytest.mark.slow

APP = "test-replica-faults"
PROMPTS = [[1, 17, 923, 88], [1, 3300, 12, 7], [1, 42, 42, 900], [1, 5, 9, 31]]
# long enough that the kill, sent as soon as the replica reports the generation running, lands before it ends
LONG = dict(n=4, max_tokens=192, ignore_eos=True)


@pytest.fixture(scope="module")
def config(rollout_config):
    return replace(
        rollout_config,
        replicas=2,
        response_length=LONG["max_tokens"],
        cpu_kv_cache_gib=0.25,
        replica_retry_max=2,
        replica_retry_timeout_s=300.0,
    )


@pytest.fixture(scope="module")
def deployed(ray_cluster, vllm_tiny_model_dir, config):
    from ray import serve

    from serve import deploy_rollout

    client = deploy_rollout(config, vllm_tiny_model_dir, APP, trust_remote_code=False, seed=0)
    try:
        yield client
    finally:
        serve.delete(APP)


@pytest.fixture
def rollout(deployed, config):
    """The module's client with its fault counts at zero, once both replicas serve one policy version."""
    from serve import wait_for_replicas

    wait_for_replicas(APP, 2, timeout_s=300)
    wait_for(deployed, lambda now: len(now) == 2, "the client's handle reaches both replicas")
    deployed.take_faults()
    return deployed


class CountingHandle:
    """The real handle, counting generate calls per chunk (by the chunk's first prompt index)."""

    def __init__(self, handle):
        self._handle = handle
        self.calls: dict[int, int] = {}
        outer = self

        class Generate:
            @staticmethod
            def remote(prompts, sampling, expect_version, offset):
                outer.calls[offset] = outer.calls.get(offset, 0) + 1
                return handle.generate.remote(prompts, sampling, expect_version, offset)

        self.generate = Generate

    def __getattr__(self, name):
        return getattr(self._handle, name)


def activity(client) -> dict[str, dict]:
    return {a["replica"]: a for a in client.handle.broadcast("activity").results()}


def replica_pid(replica: str) -> int:
    """The replica's process id, from its scratch folder `rayrl-rollout-<app>-<replica>-<pid>` in /dev/shm."""
    (scratch,) = Path("/dev/shm").glob(f"rayrl-rollout-{APP}-{replica}-*")
    return int(scratch.name.rsplit("-", 1)[1])


def wait_for(client, ready, what: str, call=None, timeout_s: float = 180.0) -> dict[str, dict]:
    """The replicas' activity once `ready(activity)` holds, while the background `call` still runs. Each probe is a
    round trip to the replicas: the loop waits on them, not on a clock; the deadline only turns a test that can no
    longer pass into a failure."""
    deadline = time.monotonic() + timeout_s
    now: dict[str, dict] = {}
    while time.monotonic() < deadline:
        if call is not None and call.done():
            outcome = call()  # raises what the call raised
            pytest.fail(f"{what}: the call ended first, with {outcome!r:.200}")
        now = activity(client)
        if ready(now):
            return now
    pytest.fail(f"{what}: not reached in {timeout_s:g} s; the replicas report {now}")


def kill_when(client, ready, what: str, call=None, pick=lambda now: sorted(now)[0]) -> tuple[str, int, int]:
    """SIGKILL the replica `pick(activity)` as soon as `ready(activity of every replica)` holds; returns its tag,
    process id and the generations it was running."""
    now = wait_for(client, ready, what, call)
    victim = pick(now)
    pid = replica_pid(victim)
    os.kill(pid, signal.SIGKILL)
    return victim, pid, now[victim]["generating"]


def version_of(client) -> int:
    (version,) = set(client.replica_versions().values())
    return version


def test_a_generate_whose_replica_dies_in_flight_returns_every_sample_resending_only_its_chunk(rollout):
    version = version_of(rollout)
    rollout._handle = counting = CountingHandle(rollout.handle)
    try:
        sampling = rollout.sampling(seed=11, **LONG)
        result = in_background(lambda: rollout.generate(PROMPTS, expect_version=version, sampling=sampling))
        # two chunks ([0, 2) and [2, 4)), which Serve spreads over the two replicas (usually one each): once both
        # run, kill a replica that runs `lost` of them
        victim, _, lost = kill_when(rollout, chunks_running(2), "both chunks run", result, pick=busiest)
        samples = result()
    finally:
        rollout._handle = None

    assert [(s.prompt_index, s.sample_index) for s in samples] == [(p, j) for p in range(4) for j in range(4)]
    assert all(len(s.response_token_ids) == LONG["max_tokens"] for s in samples)
    assert {s.policy_version for s in samples} == {version}
    # the victim's chunks were sent twice, the survivor's once
    assert sorted(counting.calls) == [0, 2] and sorted(counting.calls.values()) == [1] * (2 - lost) + [2] * lost
    assert rollout.take_faults() == ({victim}, lost)


def chunks_running(count: int):
    return lambda now: len(now) == 2 and sum(a["generating"] for a in now.values()) == count


def busiest(now: dict[str, dict]) -> str:
    return max(sorted(now), key=lambda r: now[r]["generating"])


def test_a_replica_killed_during_a_sync_is_replaced_and_every_replica_ends_on_the_new_version(
    rollout, vllm_tiny_model_dir
):
    import torch
    from transformers import AutoModelForCausalLM

    from serve import FullWeights

    version = version_of(rollout)
    model = AutoModelForCausalLM.from_pretrained(vllm_tiny_model_dir, dtype=torch.float32)
    torch.manual_seed(5)
    state = {
        k: v + 0.01 * torch.randn_like(v) for k, v in model.state_dict().items() if k != "lm_head.weight"
    }  # tied to embed_tokens
    # a generation on every replica holds the sync at each replica's gate, where the kill finds it
    # (a broadcast is sent when its results are asked for: a thread asks)
    hold = rollout.sampling(**{**LONG, "n": 16})
    held = in_background(
        lambda: rollout.handle.broadcast("generate", PROMPTS[:1], hold, version, 0).results(return_exceptions=True)
    )
    wait_for(
        rollout,
        lambda now: len(now) == 2 and all(a["generating"] for a in now.values()),
        "both replicas run the generation that holds the sync",
        held,
    )
    sync = in_background(lambda: rollout.update_weights(version + 1, FullWeights(state)))
    victim, _, _ = kill_when(
        rollout,
        lambda now: len(now) == 2 and all(a["updating"] for a in now.values()),
        "both replicas hold the sync at their gate",
        sync,
    )

    versions = sync()

    assert len(versions) == 2 and victim not in versions and set(versions.values()) == {version + 1}
    assert set(rollout.replica_versions().values()) == {version + 1}
    assert rollout.take_faults() == ({victim}, 1)
    outcomes = held()
    assert sum(isinstance(o, BaseException) for o in outcomes) == 1  # the victim's generation died with it
    assert_replicas_loaded(rollout, state.values())  # the replacement replayed the very weights the sync sent


def test_past_the_retry_bound_the_call_stops_with_one_line_and_leaves_nothing_running(rollout, config):
    from serve import RolloutClient
    from serve.replica_retry import ReplicaRetryExhausted

    version = version_of(rollout)
    strict = RolloutClient(APP, replace(config, replica_retry_max=0))
    result = in_background(lambda: strict.generate(PROMPTS, expect_version=version, sampling=strict.sampling(**LONG)))
    victim, pid, _ = kill_when(strict, chunks_running(2), "both chunks run", result, pick=busiest)

    with pytest.raises(ReplicaRetryExhausted) as err:
        result()

    message = str(err.value)
    assert "\n" not in message
    assert f"rollout replica {victim} died (The actor died unexpectedly before finishing this task." in message
    assert "actor_rollout_ref.rollout.replica_retry_max / replica_retry_timeout_s" in message
    # the error came after the survivor's chunk had finished: nothing of the call is left generating
    assert all(a["generating"] == 0 for a in activity(strict).values())
    with contextlib.suppress(psutil.NoSuchProcess):
        psutil.Process(pid).wait(timeout=60)  # the victim's process is gone (TimeoutExpired if it lives on)


def test_an_http_completion_whose_replica_dies_is_answered_through_the_openai_clients_retry(rollout, config):
    """Serve's proxy answers a request whose replica died under it with a 500 at once (no hang); an OpenAI client
    retries a 500 (max_retries, 2 by default), and Serve routes the retry to a live replica."""
    from openai import OpenAI

    version = version_of(rollout)
    client = OpenAI(base_url=f"http://127.0.0.1:{config.http_port}/v1", api_key="unused", max_retries=2, timeout=300)
    result = in_background(
        lambda: client.completions.create(
            model=APP, prompt=PROMPTS[0], n=4, temperature=1.0, max_tokens=LONG["max_tokens"]
        )
    )
    victim, _, _ = kill_when(rollout, chunks_running(1), "a replica generates the completion", result, pick=busiest)

    answer = result()

    assert len(answer.choices) == 4 and answer.system_fingerprint == f"policy-v{version}"
