#!/usr/bin/env bash
# DAPO: dynamic sampling (drop groups whose samples all score alike, generate more), overlong shaping, clip-higher,
# token-mean loss, no KL term.
set -euo pipefail
MODEL=${MODEL:-models/smollm2-135m-instruct}
TRAIN=${TRAIN:-data/arithmetic/train.parquet}
VAL=${VAL:-data/arithmetic/test.parquet}
python -m app.train --config-name grpo_trainer \
    actor_rollout_ref.model.path="$MODEL" data.train_files="$TRAIN" data.val_files="$VAL" \
    algorithm.filter_groups.enable=true algorithm.filter_groups.metric=score \
    algorithm.filter_groups.max_num_gen_batches=4 data.gen_batch_size=12 data.train_batch_size=8 \
    data.max_prompt_length=192 data.max_response_length=128 \
    reward_model.overlong_buffer.enable=true reward_model.overlong_buffer.len=32 \
    reward_model.overlong_buffer.penalty_factor=1.0 \
    actor_rollout_ref.actor.clip_ratio_low=0.2 actor_rollout_ref.actor.clip_ratio_high=0.28 \
    actor_rollout_ref.actor.loss_agg_mode=token-mean actor_rollout_ref.actor.use_kl_loss=false \
    actor_rollout_ref.actor.ppo_mini_batch_size=8 actor_rollout_ref.rollout.n=8 \
    trainer.experiment_name=dapo trainer.total_training_steps=30 trainer.test_freq=10 "$@"
