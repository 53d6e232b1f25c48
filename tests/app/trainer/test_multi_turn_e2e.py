"""Multi-turn end to end on Ray Train + Serve + vLLM: two GRPO steps of the calculator task with the agent loop, a
weight sync between them, and the multi_turn/* metrics logged. (What the tiny random model writes is noise, so
whether it calls a tool is up to chance; the tool path itself is covered token by token in tests/app/agents.)"""

from __future__ import annotations

import pytest

from app.trainer.launch import train
from app.trainer.tracking import read_metrics

APP = "multi-turn-e2e-rollout"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def rollout_app(ray_cluster, tiny_model_dir, free_port):
    from ray import serve
    from support import cpu_rollout_config

    from serve import deploy_rollout

    config = cpu_rollout_config(
        dtype="float32",
        max_num_seqs=16,
        max_num_batched_tokens=4096,
        cpu_kv_cache_gib=0.5,
        response_length=24,
        prompt_length=512,
        http_port=free_port(),
    )
    deploy_rollout(config, tiny_model_dir, APP, trust_remote_code=False)
    yield APP
    serve.delete(APP)


def test_two_grpo_steps_of_the_calculator_task(compose, rollout_app, tiny_model_dir, tmp_path):
    from app.prepare import main as prepare

    data, out = tmp_path / "calc", tmp_path / "run"
    assert prepare(["calculator", "--output", str(data), "--train-size", "8", "--test-size", "2"]) == 0
    mt = "actor_rollout_ref.rollout.multi_turn"
    train(
        compose(
            [
                f"actor_rollout_ref.model.path={tiny_model_dir}",
                f"data.train_files={data / 'train.parquet'}",
                f"data.val_files={data / 'test.parquet'}",
                "data.max_prompt_length=512",
                "data.max_response_length=24",
                "data.train_batch_size=2",
                "actor_rollout_ref.actor.ppo_mini_batch_size=2",
                "actor_rollout_ref.rollout.n=2",
                "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp32",
                "actor_rollout_ref.rollout.dtype=float32",
                "actor_rollout_ref.model.lora_rank=0",  # full-weight sync
                f"{mt}.enable=true",
                f"{mt}.tool_config_path={data / 'tool_config.yaml'}",
                f"{mt}.max_assistant_turns=3",
                "trainer.total_training_steps=2",
                "trainer.val_before_train=false",
                "trainer.test_freq=-1",
                "trainer.logger=[jsonl]",
                "trainer.cpus_per_worker=1",
                "trainer.num_workers=1",
                # scored in the train worker: spawned reward processes would import the installed checkout's algos
                f"trainer.default_local_dir={out}",
                "reward_model.num_workers=0",
            ]
        ),
        rollout_app=rollout_app,
    )
    rows = read_metrics(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    assert rows[1]["training/policy_version"] == rows[0]["training/policy_version"] + 1  # synced between the steps
    for r in rows:
        assert r["multi_turn/assistant_turns_mean"] >= 1.0
        assert 0 <= r["multi_turn/tool_errors_mean"] <= r["multi_turn/tool_calls_mean"]
        assert r["response_length/mean"] <= 24  # model tokens only, within the budget
