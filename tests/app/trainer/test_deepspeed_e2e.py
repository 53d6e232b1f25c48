"""`actor.strategy=deepspeed` through `python -m app.train`'s code path: two GRPO steps of the tiny model on two Ray
Train workers (ZeRO-3, LoRA synced merged, a TRL-style DeepSpeed JSON of "auto" values), then a resume from the
step-1 checkpoint. The cheapest settings of the end-to-end tests: the hf rollout, 16-token responses, 2 prompts x 2
samples a step."""

from __future__ import annotations

import json

import pytest
from support import free_port

from app.trainer.tracking import read_metrics

pytest.importorskip("deepspeed")
pytestmark = pytest.mark.slow


def test_grpo_on_deepspeed_trains_two_steps_and_resumes_from_step_one(
    ray_cluster, tiny_model_dir, small_arith_data, tmp_path
):
    from app.config import compose_config
    from app.train import run

    ds_json = tmp_path / "ds_zero3.json"  # as TRL / accelerate users write them: ours fill every "auto"
    ds_json.write_text(
        json.dumps(
            {
                "train_micro_batch_size_per_gpu": "auto",
                "gradient_accumulation_steps": "auto",
                "train_batch_size": "auto",
                "gradient_clipping": "auto",
                "bf16": {"enabled": "auto"},
                "zero_optimization": {
                    "stage": 3,
                    "overlap_comm": False,
                    "stage3_gather_16bit_weights_on_model_save": "auto",
                },
                "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto"}},
            }
        )
    )
    reward = tmp_path / "spread_reward.py"  # the random tiny model never scores on arithmetic: all-zero advantages
    reward.write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    return sum(map(ord, solution_str)) % 7 / 6\n"
    )
    out = tmp_path / "run"
    overrides = [
        f"custom_reward_function.path={reward}",
        f"actor_rollout_ref.model.path={tiny_model_dir}",
        f"data.train_files={small_arith_data / 'train.parquet'}",
        f"data.val_files={small_arith_data / 'test.parquet'}",
        "data.max_prompt_length=256",
        "data.max_response_length=16",
        "data.train_batch_size=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.rollout.n=2",
        # 4 samples per step over 2 ranks, micro-batches of 1: each rank accumulates 2 backward passes
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
        "actor_rollout_ref.model.lora_rank=8",
        "actor_rollout_ref.model.lora_alpha=16",
        "actor_rollout_ref.actor.optim.lr=1e-3",
        "actor_rollout_ref.actor.strategy=deepspeed",
        f"actor_rollout_ref.actor.deepspeed_config.config_path={ds_json}",
        "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp32",
        "actor_rollout_ref.rollout.name=hf",
        "actor_rollout_ref.rollout.dtype=float32",
        # merged LoRA: the weights stream from both ZeRO-3 ranks, one gathered parameter at a time, in lockstep
        "actor_rollout_ref.rollout.lora_sync=merged",
        f"actor_rollout_ref.rollout.http_port={free_port()}",
        "trainer.num_workers=2",
        "trainer.cpus_per_worker=1",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        "trainer.logger=[jsonl]",
        "trainer.save_freq=1",
        "reward_model.num_workers=1",
    ]
    first = compose_config(
        "grpo_trainer", overrides + ["trainer.total_training_steps=2", f"trainer.default_local_dir={out}"]
    )
    resumed_dir = tmp_path / "resumed"
    again = compose_config(
        "grpo_trainer",
        overrides
        + [
            "trainer.total_training_steps=2",
            f"trainer.default_local_dir={resumed_dir}",
            f"trainer.resume_mode={out / 'global_step_1'}",
        ],
    )
    assert run(first) == 0
    rows = read_metrics(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["actor/grad_norm_nonfinite"] == 0 for r in rows)
    # two 16-token samples per prompt tie on this reward 1 time in 7: some step has a gradient (and so an update)
    assert any(r["actor/grad_norm"] > 0 for r in rows)
    assert all(r["training/policy_version"] >= r["step"] for r in rows)  # the merged weights synced every step
    # step 2 sampled from the weights streamed after step 1; fp32 on both sides, so the trainer's log-probs of those
    # samples match the replica's to rounding
    assert rows[-1]["actor/rollout_logprob_diff"] < 1e-3
    actor_ckpt = out / "global_step_1" / "actor"
    assert (actor_ckpt / "latest").read_text() == "deepspeed" and (actor_ckpt / "engine_state.pt").is_file()
    assert (out / "hf_model" / "model.safetensors").is_file()

    assert run(again) == 0  # resumes after step 1: trains step 2 only
    assert [r["step"] for r in read_metrics(resumed_dir / "metrics.jsonl")] == [2]
