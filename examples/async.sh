#!/usr/bin/env bash
# One-step off-policy training: vLLM samples batch k+1 while the trainer updates on batch k; the stale samples are
# weighted by truncated importance ratios (decoupled PPO).
set -euo pipefail
MODEL=${MODEL:-models/smollm2-135m-instruct}
TRAIN=${TRAIN:-data/arithmetic/train.parquet}
VAL=${VAL:-data/arithmetic/test.parquet}
python -m app.train --config-name grpo_trainer \
    actor_rollout_ref.model.path="$MODEL" data.train_files="$TRAIN" data.val_files="$VAL" \
    async_training.enable=true async_training.max_staleness=1 \
    algorithm.rollout_correction.rollout_is=token algorithm.rollout_correction.rollout_is_threshold=2.0 \
    data.train_batch_size=8 data.max_prompt_length=192 data.max_response_length=64 \
    actor_rollout_ref.actor.ppo_mini_batch_size=8 \
    trainer.experiment_name=async trainer.total_training_steps=30 trainer.test_freq=10 "$@"
