#!/usr/bin/env bash
# GRPO with the policy loss of examples/custom_loss.py, imported by `module:function`.
set -euo pipefail
MODEL=${MODEL:-models/smollm2-135m-instruct}
TRAIN=${TRAIN:-data/arithmetic/train.parquet}
VAL=${VAL:-data/arithmetic/test.parquet}
python -m app.train --config-name quickstart \
    actor_rollout_ref.model.path="$MODEL" data.train_files="$TRAIN" data.val_files="$VAL" \
    actor_rollout_ref.actor.policy_loss.loss_mode=examples.custom_loss:clipped_pg \
    trainer.experiment_name=custom-loss "$@"
