"""verl's GRPO+LoRA example script trains two steps through `python -m app.train`'s code path, sized down for the tiny
model on CPU, with the script's own `trainer.logger='["console","wandb"]'`: W&B runs offline (no key on this
machine) under the run folder, and its record holds the run's config and both steps' metrics.

The script's arguments come from tests/app/config/verl_scripts/ as the shell splits them; what this test appends only
shrinks the job (sizes, lengths, one CPU rank, the hf rollout) and never touches a key's meaning or the logger.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import free_port, verl_script_args, wandb_run_records

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).resolve().parent / "config" / "verl_scripts" / "grpo_run_qwen2_5-3b_gsm8k_grpo_lora.txt"


def test_verl_grpo_lora_script_trains_two_steps_logging_to_wandb_offline(
    ray_cluster, tiny_model_dir, small_arith_data, wandb_env, tmp_path
):
    from app.config import compose_config
    from app.train import run

    out = tmp_path / "run"
    args = verl_script_args(
        SCRIPT,
        model=str(tiny_model_dir),
        train=str(small_arith_data / "train.parquet"),
        test=str(small_arith_data / "test.parquet"),
    )
    assert 'trainer.logger=["console","wandb"]' in args  # the script's own logger setting, untouched below
    shrink = [
        "trainer.n_gpus_per_node=0",
        "trainer.num_workers=1",
        "trainer.cpus_per_worker=1",
        "data.train_batch_size=2",
        "data.max_prompt_length=256",
        "data.max_response_length=16",
        "actor_rollout_ref.model.lora_rank=8",
        "actor_rollout_ref.model.lora_alpha=16",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "actor_rollout_ref.rollout.name=hf",
        "actor_rollout_ref.rollout.dtype=float32",
        f"actor_rollout_ref.rollout.http_port={free_port()}",
        "reward_model.num_workers=1",
        "trainer.total_training_steps=2",
        "trainer.save_freq=-1",
        f"trainer.default_local_dir={out}",
    ]
    cfg = compose_config("ppo_trainer", args + shrink)
    assert run(cfg) == 0

    assert (out / "hf_model" / "config.json").is_file()
    _, records = wandb_run_records(out / "wandb")
    [meta] = [r.run for r in records if r.HasField("run")]
    assert (meta.project, meta.display_name) == ("verl_grpo_example_gsm8k", "qwen2.5_3b_grpo_lora")
    config = {item.key: json.loads(item.value_json) for item in meta.config.update}
    assert config["actor_rollout_ref"]["actor"]["kl_loss_coef"] == 0.001  # the script's value reached the run
    steps = {}
    for record in records:
        if record.HasField("history"):
            keys = {item.key or "/".join(item.nested_key) for item in record.history.item}
            steps.setdefault(record.history.step.num, set()).update(keys)
    assert {1, 2} <= set(steps) and all("critic/score/mean" in steps[s] for s in (1, 2))
    assert any(r.HasField("exit") for r in records)  # the worker finished the W&B run
