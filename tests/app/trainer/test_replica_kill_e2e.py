"""A training run on real Ray Train + Serve + vLLM whose rollout replica is SIGKILLed while a generate is in flight
(issue 45): the run finishes every step, counts one restart, and the steps from the kill on sample the policy the
trainer synced, from the replacement replica. One replica of the tiny fp32 Llama, deployed by this module: the kill
costs a restart that no other module should pay.

The kill is sent once the replica itself reports that step 2's generate has reached it (`wait_for_generation`), never
after a sleep.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from background_call import in_background

APP = "trainer-replica-kill"
# tokens per sample: the generation still runs when the kill, sent as soon as it has reached the replica, lands
RESPONSE = 128
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def rollout(ray_cluster, tiny_model_dir, serve_http_port):
    """fp32 vLLM, so the actor's log-probs of the samples (fp32 too) match the rollout's to rounding."""
    from ray import serve
    from support import cpu_rollout_config

    from serve import deploy_rollout

    config = cpu_rollout_config(
        dtype="float32",
        max_num_seqs=64,
        max_num_batched_tokens=4096,
        cpu_kv_cache_gib=0.25,
        prompt_length=256,
        response_length=RESPONSE,
        http_port=serve_http_port,
    )
    client = deploy_rollout(config, tiny_model_dir, APP, trust_remote_code=False, route_prefix=None)
    try:
        yield client
    finally:
        serve.delete(APP)


def when_generating(client, version: int, run, timeout_s: float = 900.0) -> dict:
    """The replica's report ({replica, pid, generating}) once a generate at `version` runs on it. Each call waits on
    the replica's gate for up to 10 s, then the run is checked: a run that failed earlier fails the test with its own
    error. `timeout_s` only turns a test that can no longer pass into a failure."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        arrived = client.handle.wait_for_generation.remote(version, 10.0).result()
        if arrived is not None:
            return arrived
        if run.done():
            run()  # raises what the run raised
            pytest.fail(f"the run ended before a generate at policy version {version} reached the replica")
    pytest.fail(f"no generate at policy version {version} reached the replica in {timeout_s:g} s")


def sampled_versions(rollouts: Path, step: int) -> set[int]:
    """The policy versions of the samples `trainer.rollout_data_dir` holds for `step`."""
    return {
        json.loads(line)["policy_version"]
        for f in sorted(rollouts.glob(f"{step}-rank*.jsonl"))
        for line in f.read_text().splitlines()
    }


def test_a_replica_killed_while_generating_is_replaced_and_the_run_finishes_on_policy(
    compose, rollout, tiny_model_dir, small_arith_data, tmp_path
):
    from app.trainer.launch import train
    from app.trainer.tracking import read_metrics

    ((first_replica, version),) = rollout.replica_versions().items()
    assert version == 0  # a fresh deployment: step s samples policy version s - 1 (one sync after each update)
    out = tmp_path / "run"
    cfg = compose(
        [
            f"actor_rollout_ref.model.path={tiny_model_dir}",
            f"data.train_files={small_arith_data / 'train.parquet'}",
            "data.val_files=''",
            "data.max_prompt_length=256",
            f"data.max_response_length={RESPONSE}",
            "data.train_batch_size=2",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.rollout.n=2",
            "actor_rollout_ref.model.lora_rank=0",
            "actor_rollout_ref.actor.optim.lr=1e-3",
            "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp32",
            "actor_rollout_ref.rollout.dtype=float32",
            # scores that differ within every group: each update moves the policy, each version has its own weights
            f"custom_reward_function.path={Path(__file__).with_name('char_count_reward.py')}",
            "reward_model.num_workers=0",
            "trainer.num_workers=1",
            "trainer.cpus_per_worker=1",
            "trainer.total_training_steps=3",
            "trainer.val_before_train=false",
            "trainer.test_freq=-1",
            "trainer.save_freq=-1",
            "trainer.logger=[jsonl]",
            "trainer.experiment_name=replica-kill",
            f"trainer.default_local_dir={out}",
            f"trainer.rollout_data_dir={out / 'rollouts'}",
        ]
    )

    run = in_background(lambda: train(cfg, rollout_app=APP))
    arrived = when_generating(rollout, 1, run)  # step 2's generate, on the one replica
    os.kill(arrived["pid"], signal.SIGKILL)
    run()

    rows = read_metrics(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert arrived["replica"] == first_replica
    assert [r["rollout/replica_restarts"] for r in rows] == [0.0, 1.0, 0.0]
    assert [r["rollout/retried_requests"] for r in rows] == [0.0, 1.0, 0.0]  # step 2's one chunk, resent once
    # every step sampled the policy synced after the step before it (the replacement refuses any other version)...
    assert [sampled_versions(out / "rollouts", step) for step in (1, 2, 3)] == [{0}, {1}, {2}]
    # ...with the weights the trainer held: fp32 on both sides, so the trainer's log-probs of the samples match
    # vLLM's to kernel rounding, as test_train_e2e's on-policy match does
    assert all(r["actor/rollout_logprob_diff"] < 1e-3 for r in rows), [r["actor/rollout_logprob_diff"] for r in rows]
    ((replacement, served),) = rollout.replica_versions().items()
    assert replacement != first_replica and served == 3
