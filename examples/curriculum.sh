#!/usr/bin/env bash
# The quickstart with a curriculum sampler (examples/curriculum_sampler.py, verl's data.sampler keys): the next prompts
# come from the arithmetic levels the policy solves about half the time.
set -euo pipefail
MODEL=${MODEL:-models/smollm2-135m-instruct}
TRAIN=${TRAIN:-data/arithmetic/train.parquet}
VAL=${VAL:-data/arithmetic/test.parquet}
python -m app.train --config-name quickstart \
    actor_rollout_ref.model.path="$MODEL" data.train_files="$TRAIN" data.val_files="$VAL" \
    data.sampler.class_path=examples/curriculum_sampler.py data.sampler.class_name=PassRateCurriculum \
    +data.sampler.group_key=extra_info.level \
    trainer.experiment_name=curriculum "$@"
