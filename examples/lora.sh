#!/usr/bin/env bash
# GRPO with LoRA (rank 32 on all linear layers); the adapter alone is synced to vLLM after each update.
set -euo pipefail
MODEL=${MODEL:-models/smollm2-135m-instruct}
TRAIN=${TRAIN:-data/arithmetic/train.parquet}
VAL=${VAL:-data/arithmetic/test.parquet}
python -m app.train --config-name grpo_trainer \
    actor_rollout_ref.model.path="$MODEL" data.train_files="$TRAIN" data.val_files="$VAL" \
    actor_rollout_ref.model.lora_rank=32 actor_rollout_ref.model.lora_alpha=32 \
    actor_rollout_ref.model.target_modules=all-linear actor_rollout_ref.rollout.lora_sync=adapter \
    actor_rollout_ref.actor.optim.lr=3e-5 actor_rollout_ref.rollout.n=8 \
    data.train_batch_size=8 data.max_prompt_length=192 data.max_response_length=64 \
    actor_rollout_ref.actor.ppo_mini_batch_size=8 \
    trainer.experiment_name=lora trainer.total_training_steps=30 trainer.test_freq=10 "$@"
