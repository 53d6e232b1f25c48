"""Colocated placement: the rollout engine sleeps from the end of generation until the weight sync wakes it, so the
update never shares the accelerator with vLLM, and nothing is sent to or sampled from a sleeping engine.

The trainer side is the real one (tiny model, one rank, in this process). A recording stand-in replaces the Serve
deployment: what vLLM's sleep frees is GPU memory, which a CPU machine cannot show, but the order of the calls the
loop makes is the same on any device.
"""

from __future__ import annotations

import torch
from recording_rollout import RecordingRollout
from support import in_process_run_overrides


def test_colocated_engine_sleeps_through_the_update_and_wakes_for_the_sync(
    compose, tiny_model_dir, small_arith_data, tmp_path
):
    from app.trainer.setup import build_trainer

    cfg = compose(
        [
            f"actor_rollout_ref.model.path={tiny_model_dir}",
            f"data.train_files={small_arith_data / 'train.parquet'}",
            f"data.val_files={small_arith_data / 'test.parquet'}",
            "data.max_prompt_length=256",
            "data.max_response_length=8",
            "data.train_batch_size=2",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.rollout.n=2",
            "actor_rollout_ref.model.lora_rank=4",
            "actor_rollout_ref.model.lora_alpha=8",
            "trainer.total_training_steps=2",
            "trainer.val_before_train=false",
            "trainer.test_freq=-1",
            "trainer.save_freq=-1",
            "trainer.logger=[jsonl]",
            f"trainer.default_local_dir={tmp_path / 'run'}",
            "reward_model.num_workers=1",
        ]
    )
    # Validation refuses colocated without GPUs (on a CPU nothing would be freed); the loop's ordering is what is
    # tested here, and it is the same on every device.
    cfg.trainer.placement = "colocated"
    rollout = RecordingRollout(vocab_size=1000, n=2, response_len=8)
    trainer = build_trainer(cfg, rollout, device="cpu")
    trainer.fit()
    step = ["generate", "sleep", "wake_up", "update_weights"]
    # two training steps, then the final validation samples from the awake, updated engine
    assert rollout.calls == step + step + ["generate"]
    assert rollout.version == 2 and not rollout.asleep
    assert (tmp_path / "run" / "hf_model" / "config.json").is_file()


def test_colocated_with_free_cache_engine_off_keeps_the_engine_awake(
    compose, tiny_model_dir, small_arith_data, tmp_path
):
    """verl's `rollout.free_cache_engine=false`: colocated, but vLLM keeps its memory; no sleep, no wake-up."""
    from app.trainer.setup import build_trainer

    cfg = compose(
        [
            *in_process_run_overrides(tiny_model_dir, small_arith_data),
            "actor_rollout_ref.rollout.free_cache_engine=false",
            "actor_rollout_ref.rollout.lora_sync=merged",
            "actor_rollout_ref.rollout.lora_fold_dtype=bfloat16",
            "trainer.total_training_steps=1",
            "trainer.val_before_train=false",
            "trainer.save_freq=-1",
            "trainer.logger=[jsonl]",
            f"trainer.default_local_dir={tmp_path / 'run'}",
            "reward_model.num_workers=1",
        ]
    )
    cfg.trainer.placement = "colocated"  # as above: validation would refuse it without GPUs
    rollout = RecordingRollout(vocab_size=1000, n=2, response_len=8)
    build_trainer(cfg, rollout, device="cpu").fit()
    assert rollout.calls == ["generate", "update_weights"]
    # merged LoRA: only the adapter travels, in the trainer's float32, for the replicas to fold into the model folder's
    # base weights in the rollout dtype (rounded to rollout.lora_fold_dtype first); every pair wraps a weight that
    # folder holds
    from safetensors import safe_open

    from serve.lora_fold import adapter_pairs
    from serve.types import MergedLora

    [(payload, tensors, _)] = rollout.payloads
    assert isinstance(payload, MergedLora) and payload.dtype == cfg.actor_rollout_ref.rollout.dtype
    assert payload.round_to == "bfloat16"
    assert tensors and all(t.dtype == torch.float32 for t in tensors.values())
    assert payload.adapter_config["r"] == cfg.actor_rollout_ref.model.lora_rank
    with safe_open(str(tiny_model_dir / "model.safetensors"), "pt") as f:
        assert set(adapter_pairs(tensors)) <= set(f.keys())


def test_a_critic_warmup_step_wakes_the_engine_for_the_next_rollout(
    compose, tiny_model_dir, small_arith_data, tmp_path
):
    """PPO's critic warm-up updates no policy, so no sync wakes vLLM: the step itself must, or the next rollout would
    reach a sleeping engine."""
    from app.trainer.setup import build_trainer

    cfg = compose(
        [
            *in_process_run_overrides(tiny_model_dir, small_arith_data),
            "algorithm.adv_estimator=gae",
            "trainer.critic_warmup=1",
            "trainer.total_training_steps=2",
            "trainer.val_before_train=false",
            "trainer.save_freq=-1",
            "trainer.logger=[jsonl]",
            f"trainer.default_local_dir={tmp_path / 'run'}",
            "reward_model.num_workers=1",
        ]
    )
    cfg.trainer.placement = "colocated"  # as above
    rollout = RecordingRollout(vocab_size=1000, n=2, response_len=8)
    build_trainer(cfg, rollout, device="cpu").fit()
    assert rollout.calls == [
        "generate",
        "sleep",
        "wake_up",  # step 1: the critic alone learns
        "generate",
        "sleep",
        "wake_up",
        "update_weights",
    ]
