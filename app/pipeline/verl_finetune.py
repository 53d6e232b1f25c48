"""The `verl_finetune` card: verl's GRPO run script as flat `section_key` parameters, with the card's defaults.

Most keys are verl keys with the dots replaced by underscores, so most rows copy the value onto that key. The output,
`model_output`, is the trained model (LoRA merged) as a Hugging Face folder.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from app.pipeline.common import (
    apply_table,
    apply_trainer_overrides,
    check_output_folder,
    infra_params,
    map_gpu_layout,
    model_params,
    model_source,
    move_folder,
    resolve_model,
)
from app.pipeline.params import REQUIRED, Param, Values, param_rows
from app.pipeline.plan import Plan

CARD = "verl_finetune"
BASE_CONFIG = "grpo_trainer"
A, M, R = "actor_rollout_ref.actor", "actor_rollout_ref.model", "actor_rollout_ref.rollout"
_VISION = "vision-language inputs are not supported here (text-only models)"
# (infrastructure parameter, the card's trainer parameter naming the same thing): the published card defaults them to
# 1 and 8 GPUs; the infrastructure one describes the machine, so it wins, as the managed pipeline would have it
MACHINE_WINS = (
    ("number_of_gpu_to_use_finetuning", "trainer_n_gpus_per_node"),
    ("num_nodes_finetune", "trainer_nnodes"),
)


def _infra_params() -> tuple[Param, ...]:
    """The infrastructure rows at the published card's defaults (1 GPU), the GPU count's row saying it wins."""
    mapping = (
        "`trainer.n_gpus_per_node`, a card default capped at the GPUs visible here (0 on a CPU machine: CPU "
        "training with `trainer.num_workers` ranks); given with a different trainer_n_gpus_per_node, this "
        "one wins, with a warning"
    )
    return tuple(
        dataclasses.replace(p, mapping=mapping) if p.name == "number_of_gpu_to_use_finetuning" else p
        for p in infra_params(gpu_default=1)
    )


PARAMS: tuple[Param, ...] = (
    *model_params(),
    *param_rows(
        "Data",
        ("data_train_files", REQUIRED, "path", "data.train_files"),
        ("data_val_files", REQUIRED, "path", "data.val_files"),
        ("data_train_batch_size", 512, "int", "data.train_batch_size"),
        ("data_max_prompt_length", 1024, "int", "data.max_prompt_length"),
        ("data_max_response_length", 2048, "int", "data.max_response_length"),
        ("data_filter_overlong_prompts", True, "bool", "data.filter_overlong_prompts"),
        ("data_truncation", "error", "choice", "data.truncation", {"choices": ("error", "left", "right", "middle")}),
        ("data_image_key", "images", "str", f"n/a: {_VISION}"),
    ),
    *param_rows(
        "Actor",
        ("actor_optim_lr", 3e-6, "float", f"{A}.optim.lr"),
        ("actor_model_use_remove_padding", True, "bool", f"{M}.use_remove_padding"),
        ("actor_strategy", "fsdp2", "choice", f"{A}.strategy", {"choices": ("fsdp", "fsdp2")}),
        (
            "actor_fsdp_config_offload_policy",
            True,
            "bool",
            "n/a: FSDP2's whole-model CPU offload policy is not wired in; offloading here is "
            "actor_fsdp_param_offload / actor_fsdp_optimizer_offload",
        ),
        ("actor_ppo_mini_batch_size", 128, "int", f"{A}.ppo_mini_batch_size"),
        ("actor_ppo_micro_batch_size_per_gpu", 10, "int", f"{A}.ppo_micro_batch_size_per_gpu"),
        ("actor_model_lora_rank", 64, "int", f"{M}.lora_rank"),
        ("actor_model_lora_alpha", 32, "int", f"{M}.lora_alpha"),
        ("actor_model_target_modules", "all-linear", "str", f"{M}.target_modules"),
        ("actor_model_exclude_modules", ".*visual.*", "str", f"{M}.exclude_modules"),
        ("actor_use_kl_loss", True, "bool", f"{A}.use_kl_loss"),
        ("actor_kl_loss_coef", 0.01, "float", f"{A}.kl_loss_coef"),
        ("actor_kl_loss_type", "low_var_kl", "str", f"{A}.kl_loss_type"),
        ("actor_entropy_coeff", 0.0, "float", f"{A}.entropy_coeff"),
        ("actor_model_enable_gradient_checkpointing", True, "bool", f"{M}.enable_gradient_checkpointing"),
        ("actor_fsdp_param_offload", False, "bool", f"{A}.fsdp_config.param_offload"),
        ("actor_fsdp_optimizer_offload", False, "bool", f"{A}.fsdp_config.optimizer_offload"),
    ),
    *param_rows(
        "Rollout",
        ("rollout_name", "vllm", "choice", f"{R}.name", {"choices": ("vllm", "hf", "sglang")}),
        ("rollout_dtype", "float16", "choice", f"{R}.dtype", {"choices": ("auto", "bfloat16", "float16", "float32")}),
        (
            "rollout_tensor_model_parallel_size",
            2,
            "int",
            f"code: `{R}.tensor_model_parallel_size`; the card default is capped at the GPUs per node",
        ),
        ("rollout_gpu_memory_utilization", 0.6, "float", f"{R}.gpu_memory_utilization"),
        ("rollout_n", 5, "int", f"{R}.n"),
        ("rollout_log_prob_micro_batch_size_per_gpu", 20, "int", f"{R}.log_prob_micro_batch_size_per_gpu"),
        ("rollout_disable_mm_preprocessor_cache", True, "bool", f"n/a: {_VISION} (vLLM's multimodal cache)"),
        ("rollout_enable_chunked_prefill", False, "bool", f"{R}.enable_chunked_prefill"),
        ("rollout_enforce_eager", False, "bool", f"{R}.enforce_eager"),
        ("rollout_free_cache_engine", False, "bool", f"{R}.free_cache_engine"),
    ),
    *param_rows(
        "Reference model",
        ("ref_log_prob_micro_batch_size_per_gpu", 20, "int", "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu"),
        ("ref_fsdp_param_offload", True, "bool", "actor_rollout_ref.ref.fsdp_config.param_offload"),
    ),
    *param_rows(
        "Algorithm",
        ("algorithm_adv_estimator", "grpo", "str", "algorithm.adv_estimator"),
        ("algorithm_use_kl_in_reward", False, "bool", "algorithm.use_kl_in_reward"),
    ),
    *param_rows(
        "Trainer",
        ("trainer_critic_warmup", 0, "int", "trainer.critic_warmup"),
        (
            "trainer_n_gpus_per_node",
            8,
            "int",
            "code: `trainer.n_gpus_per_node`; the card default is capped at the GPUs visible here (0: CPU training)",
        ),
        ("trainer_nnodes", 1, "int", "code: `trainer.nnodes` (GPU training)"),
        ("trainer_save_freq", 20, "int", "trainer.save_freq"),
        ("trainer_test_freq", 5, "int", "trainer.test_freq"),
        ("trainer_total_epochs", 15, "int", "trainer.total_epochs"),
        ("total_training_steps", None, "int", "trainer.total_training_steps", {"optional": True}),
    ),
    *param_rows(
        "Engine",
        ("ENGINE", "vllm", "str", "n/a: the card's engine switch; the rollout engine is rollout_name"),
    ),
    *param_rows(
        "Output",
        (
            "model_output",
            "outputs/verl_finetune/model",
            "path",
            "code: the trained model (LoRA merged) as a Hugging Face folder, moved there from "
            "`<trainer.default_local_dir>/hf_model` after the run",
        ),
    ),
    *_infra_params(),
    *param_rows(
        "rayrl extensions (not on the card)",
        (
            "run_dir",
            None,
            "path",
            "code: `trainer.default_local_dir` (checkpoints, metrics.jsonl, the imported base model); "
            "default `<model_output>.run`",
            {"optional": True},
        ),
    ),
)


def _machine_wins(values: Values, plan: Plan) -> None:
    """Where an infrastructure parameter and the card's trainer parameter both carry a value and disagree (the
    published table with every default: 1 GPU and 8), the infrastructure one is the machine's: it is used and the
    other dropped, with a warning naming both. A tensor-parallel size at the card's default is treated as that default
    (capped at the GPUs per node, with a note), whether the table named it or not."""
    for infra, card_key in MACHINE_WINS:
        if infra in values.given and card_key in values.given and values[infra] != values[card_key]:
            plan.warnings.append(
                f"{infra}={values[infra]} and {card_key}={values[card_key]} name the same setting; "
                f"{infra} describes the machine, so it wins ({card_key} is not applied)"
            )
            values.given.discard(card_key)
            values.values[card_key] = values[infra]
    # the table submitted whole gives the tensor-parallel size at its card default: capped like the default it is
    tp = next(p for p in PARAMS if p.name == "rollout_tensor_model_parallel_size")
    if values[tp.name] == tp.default:
        values.given.discard(tp.name)


def build_plan(values: Values, dry_run: bool) -> Plan:
    plan = Plan(BASE_CONFIG)
    apply_table(PARAMS, values, plan)
    model_output = Path(values["model_output"]).expanduser()
    check_output_folder("model_output", model_output)
    run_dir = Path(values["run_dir"] or f"{model_output}.run").expanduser()
    plan.overrides["trainer.default_local_dir"] = str(run_dir.resolve())
    plan.overrides["trainer.experiment_name"] = CARD
    _machine_wins(values, plan)
    map_gpu_layout(
        values,
        plan,
        gpu_keys=("number_of_gpu_to_use_finetuning", "trainer_n_gpus_per_node"),
        node_keys=("num_nodes_finetune", "trainer_nnodes"),
        tp_keys=("rollout_tensor_model_parallel_size",),
    )
    key, source = model_source(values)
    plan.overrides[f"{M}.path"] = resolve_model(key, source, run_dir, dry_run)
    apply_trainer_overrides(values, plan)
    plan.outputs = {"model_output": str(model_output), "checkpoints and metrics (run_dir)": str(run_dir)}

    def finish(run_cfg, cfg) -> None:
        move_folder(Path(run_cfg.trainer.default_local_dir) / "hf_model", model_output)
        print(f"model_output: {model_output.resolve()}")

    plan.finish = finish
    return plan
