#!/usr/bin/env bash
# PPO with a critic (GAE advantages), KL to the reference in the reward. Small enough for a CPU.
set -euo pipefail
MODEL=${MODEL:-models/smollm2-135m-instruct}
TRAIN=${TRAIN:-data/arithmetic/train.parquet}
VAL=${VAL:-data/arithmetic/test.parquet}
python -m app.train --config-name ppo_trainer \
    actor_rollout_ref.model.path="$MODEL" data.train_files="$TRAIN" data.val_files="$VAL" \
    algorithm.adv_estimator=gae algorithm.gamma=1.0 algorithm.lam=0.95 \
    algorithm.use_kl_in_reward=true algorithm.kl_ctrl.kl_coef=0.001 \
    data.train_batch_size=8 data.max_prompt_length=192 data.max_response_length=64 \
    actor_rollout_ref.actor.ppo_mini_batch_size=8 actor_rollout_ref.actor.optim.lr=1e-6 \
    critic.optim.lr=1e-5 critic.ppo_mini_batch_size=8 \
    trainer.experiment_name=ppo-critic trainer.total_training_steps=20 trainer.test_freq=10 "$@"
