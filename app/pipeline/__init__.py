"""`python -m app.pipeline <card> key=value ...`: the managed-pipeline parameter cards (verl_finetune,
grpo_chat_completion) as entry points over the trainer. See docs/pipelines.md."""
