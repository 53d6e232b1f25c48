"""`algorithm.rollout_correction.bypass_mode`: the update's old policy is the sampler's own log-probs, so a
multi-mini-batch update needs no separate old-log-prob pass.

The trainer is the real one (tiny model, one rank, in this process); a recording stand-in for the rollout service
reports every sampled token at log-prob -1.0, a value the tiny model's own log-probs of random tokens (about
-ln(vocab)) are far from. So the PPO ratio shows which old policy the update used.
"""

from __future__ import annotations

import json
from pathlib import Path

from recording_rollout import RecordingRollout


def train_two_mini_batches(compose, tiny_model_dir, small_arith_data, out: Path, bypass: bool) -> list[dict]:
    """One step whose update takes two mini-batches (so it is not on-policy); its logged metrics."""
    from app.trainer.setup import build_trainer

    cfg = compose(
        [
            f"actor_rollout_ref.model.path={tiny_model_dir}",
            f"data.train_files={small_arith_data / 'train.parquet'}",
            "data.val_files=''",
            "data.max_prompt_length=256",
            "data.max_response_length=8",
            "data.train_batch_size=2",
            "actor_rollout_ref.actor.ppo_mini_batch_size=1",
            "actor_rollout_ref.rollout.n=2",
            "trainer.num_workers=1",
            "actor_rollout_ref.actor.use_kl_loss=false",
            f"algorithm.rollout_correction.bypass_mode={str(bypass).lower()}",
            "trainer.total_training_steps=1",
            "trainer.val_before_train=false",
            "trainer.test_freq=-1",
            "trainer.save_freq=-1",
            "trainer.logger=[jsonl]",
            f"trainer.default_local_dir={out}",
            "reward_model.num_workers=0",
        ]
    )
    build_trainer(cfg, RecordingRollout(vocab_size=1000, n=2, response_len=8, logprob=-1.0), device="cpu").fit()
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_bypass_uses_the_sampler_log_probs_and_skips_the_old_log_prob_pass(
    compose, tiny_model_dir, small_arith_data, tmp_path
):
    (step,) = train_two_mini_batches(compose, tiny_model_dir, small_arith_data, tmp_path / "run", bypass=True)
    assert "timing_s/old_log_prob" not in step
    # ppo_kl = mean(old - new) = -1.0 - mean(new): random tokens under the tiny model score far below -1
    assert step["actor/ppo_kl"] > 2.0


def test_without_bypass_the_trainer_recomputes_old_log_probs(compose, tiny_model_dir, small_arith_data, tmp_path):
    (step,) = train_two_mini_batches(compose, tiny_model_dir, small_arith_data, tmp_path / "run", bypass=False)
    assert step["timing_s/old_log_prob"] > 0.0
    # the first mini-batch's ratio is exactly 1 and the second moved by one small LoRA step
    assert abs(step["actor/ppo_kl"]) < 0.05
