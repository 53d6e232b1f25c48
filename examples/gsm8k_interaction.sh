#!/usr/bin/env bash
# Multi-turn GRPO on GSM8K with verl's interaction config (examples/gsm8k_interaction.yaml): after a wrong answer the
# built-in gsm8k interaction asks again (its words are masked out of training), a right one ends the episode; at most
# two retries. The reward reads the whole conversation's answers; extra_info['turn_scores'] holds the interaction's.
# MODEL: a Hugging Face folder (python -m app.import_model ...). GSM8K: a folder with train.jsonl and test.jsonl.
set -euo pipefail
MODEL=${MODEL:-models/smollm2-135m-instruct}
GSM8K=${GSM8K:-gsm8k}
python -m app.prepare gsm8k --input "$GSM8K" --output data/gsm8k
python -m app.train --config-name grpo_trainer \
    actor_rollout_ref.model.path="$MODEL" \
    data.train_files=data/gsm8k/train.parquet data.val_files=data/gsm8k/test.parquet \
    data.max_prompt_length=512 data.max_response_length=1024 \
    actor_rollout_ref.rollout.multi_turn.enable=true \
    actor_rollout_ref.rollout.multi_turn.interaction_config_path=examples/gsm8k_interaction.yaml \
    actor_rollout_ref.rollout.multi_turn.max_user_turns=2 \
    trainer.experiment_name=gsm8k-interaction "$@"
