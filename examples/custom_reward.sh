#!/usr/bin/env bash
# GRPO with the reward function of examples/custom_reward.py instead of the rule reward of each row's data_source.
set -euo pipefail
MODEL=${MODEL:-models/smollm2-135m-instruct}
TRAIN=${TRAIN:-data/arithmetic/train.parquet}
VAL=${VAL:-data/arithmetic/test.parquet}
python -m app.train --config-name quickstart \
    actor_rollout_ref.model.path="$MODEL" data.train_files="$TRAIN" data.val_files="$VAL" \
    custom_reward_function.path=examples/custom_reward.py custom_reward_function.name=compute_score \
    trainer.experiment_name=custom-reward "$@"
