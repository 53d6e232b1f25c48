#!/usr/bin/env bash
# GRPO on GSM8K on one GPU node: full fine-tuning with a KL loss to the initial model, 5 samples per prompt.
# MODEL: a Hugging Face folder (python -m app.import_model --source <hf folder | cached hub id> --output ...).
# GSM8K: a folder with GSM8K's train.jsonl and test.jsonl.
set -euo pipefail
MODEL=${MODEL:-models/qwen2.5-0.5b-instruct}
GSM8K=${GSM8K:-gsm8k}
NGPUS=${NGPUS:-8}
python -m app.prepare gsm8k --input "$GSM8K" --output data/gsm8k
python -m app.train --config-name grpo_trainer \
    actor_rollout_ref.model.path="$MODEL" actor_rollout_ref.model.lora_rank=0 \
    data.train_files=data/gsm8k/train.parquet data.val_files=data/gsm8k/test.parquet \
    data.train_batch_size=256 data.max_prompt_length=512 data.max_response_length=1024 \
    actor_rollout_ref.actor.optim.lr=1e-6 actor_rollout_ref.actor.ppo_mini_batch_size=64 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8 \
    actor_rollout_ref.actor.use_kl_loss=true actor_rollout_ref.actor.kl_loss_coef=0.001 \
    actor_rollout_ref.actor.kl_loss_type=low_var_kl \
    actor_rollout_ref.rollout.n=5 actor_rollout_ref.rollout.gpu_memory_utilization=0.6 \
    trainer.n_gpus_per_node="$NGPUS" trainer.nnodes=1 \
    trainer.experiment_name=gsm8k-grpo trainer.total_epochs=15 trainer.test_freq=5 trainer.save_freq=20 \
    trainer.logger='[console,jsonl,tensorboard]' "$@"
