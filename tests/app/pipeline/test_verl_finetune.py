"""verl_finetune: the card's defaults map onto the trainer config, what cannot apply is listed with its reason, the
dry run starts nothing, and a tiny real run leaves the trained model in `model_output`."""

from __future__ import annotations

import json

import pytest

from app.pipeline.__main__ import main
from app.pipeline.params import PipelineError
from app.pipeline.runner import plan_card


def card_params(tiny_model_dir, data, tmp_path, **more):
    return {
        "pytorch_model_path": str(tiny_model_dir),
        "data_train_files": str(data / "train.parquet"),
        "data_val_files": str(data / "test.parquet"),
        "model_output": str(tmp_path / "model"),
        **more,
    }


def test_card_defaults_land_on_the_trainer_keys(tiny_model_dir, small_arith_data, tmp_path):
    plan, cfg, _ = plan_card("verl_finetune", card_params(tiny_model_dir, small_arith_data, tmp_path), dry_run=True)
    arr = cfg.actor_rollout_ref
    # each value is the card's default (issue 15), not the schema's or configs/grpo_trainer.yaml's where they differ
    assert (cfg.data.train_batch_size, cfg.data.max_prompt_length, cfg.data.max_response_length) == (512, 1024, 2048)
    assert cfg.data.filter_overlong_prompts is True
    assert (arr.actor.optim.lr, arr.actor.ppo_mini_batch_size, arr.actor.ppo_micro_batch_size_per_gpu) == (
        3e-6,
        128,
        10,
    )
    assert (arr.model.lora_rank, arr.model.lora_alpha, arr.model.exclude_modules) == (64, 32, ".*visual.*")
    assert arr.model.enable_gradient_checkpointing is True and arr.ref.fsdp_config.param_offload is True
    assert (arr.actor.use_kl_loss, arr.actor.kl_loss_coef) == (True, 0.01)
    assert (arr.rollout.n, arr.rollout.dtype, arr.rollout.gpu_memory_utilization) == (5, "float16", 0.6)
    assert arr.rollout.enforce_eager is False and arr.rollout.free_cache_engine is False
    assert (arr.rollout.log_prob_micro_batch_size_per_gpu, arr.ref.log_prob_micro_batch_size_per_gpu) == (20, 20)
    assert (cfg.trainer.save_freq, cfg.trainer.test_freq, cfg.trainer.total_epochs) == (20, 5, 15)
    assert cfg.trainer.default_local_dir == str((tmp_path / "model.run").resolve())
    # the card's 1 GPU (number_of_gpu_to_use_finetuning, which wins over trainer_n_gpus_per_node's 8) and
    # tensor-parallel 2 are capped at what this CPU machine has
    assert cfg.trainer.n_gpus_per_node == 0 and arr.rollout.tensor_model_parallel_size == 1
    assert plan.outputs["model_output"] == str(tmp_path / "model")


def test_not_applicable_keys_are_accepted_and_listed_with_a_reason(tiny_model_dir, small_arith_data, tmp_path):
    params = card_params(
        tiny_model_dir,
        small_arith_data,
        tmp_path,
        instance_type_finetune="Standard_NC24ads_A100_v4",
        compute_finetune="gpu-cluster",
        shm_size_finetune="5g",
        ENGINE="vllm",
    )
    plan, _, _ = plan_card("verl_finetune", params, dry_run=True)
    listed = {name: why for name, _, why in plan.not_applicable}
    assert set(listed) == {
        "data_image_key",
        "actor_fsdp_config_offload_policy",
        "rollout_disable_mm_preprocessor_cache",
        "ENGINE",
        "shm_size_finetune",
        "instance_type_finetune",
        "compute_finetune",
    }
    assert "vision" in listed["rollout_disable_mm_preprocessor_cache"] and "Ray cluster" in listed["compute_finetune"]


def published_defaults() -> dict:
    """Every parameter of the published card that has a default, at that default, as a user submits the table."""
    from app.pipeline.params import REQUIRED
    from app.pipeline.verl_finetune import PARAMS

    return {p.name: p.default for p in PARAMS if not p.is_prefix and p.default not in (None, REQUIRED)}


def test_the_published_table_with_every_default_is_accepted_and_the_machine_wins(
    tiny_model_dir, small_arith_data, tmp_path
):
    params = {**published_defaults(), **card_params(tiny_model_dir, small_arith_data, tmp_path)}
    assert (params["number_of_gpu_to_use_finetuning"], params["trainer_n_gpus_per_node"]) == (1, 8)  # as published
    plan, cfg, _ = plan_card("verl_finetune", params, dry_run=True)
    # the infrastructure parameter describes the machine: its 1 GPU is used, the card's 8 dropped with a warning
    assert cfg.trainer.n_gpus_per_node == 1 and cfg.trainer.nnodes == 1 and cfg.trainer.num_workers == 1
    # the table's rollout_tensor_model_parallel_size=2 is the card default: capped at the 1 GPU, as a default is
    assert cfg.actor_rollout_ref.rollout.tensor_model_parallel_size == 1
    assert "rollout_tensor_model_parallel_size: card default 2 capped to 1 (GPUs per node)" in plan.notes
    assert plan.warnings == [
        "number_of_gpu_to_use_finetuning=1 and trainer_n_gpus_per_node=8 name the same setting; "
        "number_of_gpu_to_use_finetuning describes the machine, so it wins "
        "(trainer_n_gpus_per_node is not applied)"
    ]
    # the same for the node counts; agreeing GPU counts say nothing; verl's sglang rollout is served by vLLM
    plan, cfg, _ = plan_card(
        "verl_finetune",
        {
            **params,
            "trainer_n_gpus_per_node": 1,
            "num_nodes_finetune": 1,
            "trainer_nnodes": 2,
            "rollout_name": "sglang",
        },
        dry_run=True,
    )
    assert (
        cfg.trainer.nnodes == 1
        and len(plan.warnings) == 1
        and "num_nodes_finetune=1 and trainer_nnodes=2" in plan.warnings[0]
    )
    assert cfg.actor_rollout_ref.rollout.name == "vllm"


def test_exactly_one_model_key(tiny_model_dir, small_arith_data, tmp_path):
    params = card_params(tiny_model_dir, small_arith_data, tmp_path, huggingface_id="org/name")
    with pytest.raises(PipelineError, match="exactly one of .* \\(given: huggingface_id, pytorch_model_path\\)"):
        plan_card("verl_finetune", params, dry_run=True)
    params.pop("pytorch_model_path")  # a hub id that is not in the local cache: named, with the way out
    with pytest.raises(PipelineError, match="huggingface_id: hub id 'org/name' is not in the local Hugging Face cache"):
        plan_card("verl_finetune", params, dry_run=True)


def test_dry_run_from_a_params_file_prints_the_config_and_starts_nothing(
    tiny_model_dir, small_arith_data, tmp_path, capsys
):
    params = card_params(tiny_model_dir, small_arith_data, tmp_path, data_train_batch_size=256)
    (tmp_path / "params.json").write_text(json.dumps(params))
    # the command line wins over the file
    assert (
        main(["verl_finetune", "--params", str(tmp_path / "params.json"), "data_train_batch_size=128", "--dry-run"])
        == 0
    )
    out = capsys.readouterr().out
    assert "data.train_batch_size = 128" in out and "ENGINE='vllm': " in out
    assert f"model_output: {tmp_path / 'model'}" in out and "trainer config (validated):" in out
    assert not (tmp_path / "model.run").exists() and not (tmp_path / "model").exists()


def test_a_wrong_parameter_exits_2_naming_it(tiny_model_dir, small_arith_data, tmp_path, capsys):
    params = card_params(tiny_model_dir, small_arith_data, tmp_path)
    args = ["verl_finetune", *(f"{k}={v}" for k, v in params.items()), "--dry-run"]
    assert main(args + ["actor_optim_lrr=1e-5"]) == 2
    assert "did you mean 'actor_optim_lr'?" in capsys.readouterr().err
    assert main(args + ["actor_rollout_ref.actor.optim.lrr=1e-5"]) == 2  # a dotted key: the schema's own check
    assert "actor_rollout_ref.actor.optim.lrr" in capsys.readouterr().err
    assert main(["verl_finetun", "--dry-run"]) == 2
    assert "did you mean 'verl_finetune'?" in capsys.readouterr().err


@pytest.mark.slow
def test_tiny_run_writes_the_trained_model_to_model_output(ray_cluster, tiny_model_dir, small_arith_data, tmp_path):
    from support import free_port

    from app.trainer.tracking import read_metrics

    params = card_params(
        tiny_model_dir,
        small_arith_data,
        tmp_path,
        data_train_batch_size=2,
        data_max_prompt_length=256,
        data_max_response_length=16,
        actor_ppo_mini_batch_size=2,
        actor_ppo_micro_batch_size_per_gpu=2,
        actor_model_lora_rank=8,
        actor_model_lora_alpha=16,
        rollout_name="hf",
        rollout_dtype="float32",
        rollout_n=2,
        rollout_log_prob_micro_batch_size_per_gpu=4,
        ref_log_prob_micro_batch_size_per_gpu=4,
        total_training_steps=2,
        trainer_test_freq=1,
        trainer_save_freq=-1,
    )
    params |= {
        "trainer.num_workers": 1,
        "trainer.val_before_train": "false",
        "trainer.logger": "[jsonl]",
        "reward_model.num_workers": 1,
        "actor_rollout_ref.rollout.http_port": free_port(),
    }
    assert main(["verl_finetune", *(f"{k}={v}" for k, v in params.items())]) == 0
    model = tmp_path / "model"
    assert (model / "config.json").is_file() and (model / "model.safetensors").is_file()
    assert (model / "tokenizer_config.json").is_file()
    assert not (tmp_path / "model.run" / "hf_model").exists()  # moved, not copied
    assert [r["step"] for r in read_metrics(tmp_path / "model.run" / "metrics.jsonl")] == [1, 2]
    from transformers import AutoModelForCausalLM

    # a plain model: the LoRA adapter (rank 8 here) was merged into the weights, not saved beside them
    # (the random tiny model scores 0 everywhere, so GRPO's advantages are 0 and the weights cannot be asked to move)
    trained = AutoModelForCausalLM.from_pretrained(model)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert [n for n, _ in trained.named_parameters()] == [n for n, _ in base.named_parameters()]
