"""The `grpo_chat_completion` card: TRL-style GRPO arguments over the trainer.

TRL's names translated (TRL's meaning, then ours):
- `num_generations` completions per prompt -> `rollout.n`; `beta` the KL loss coefficient -> `actor.kl_loss_coef`
  (beta 0: no KL term, no reference model); `epsilon` the clip range -> `actor.clip_ratio`; `num_iterations` updates
  per generated batch -> `actor.ppo_epochs`.
- Batches: TRL's `per_device_train_batch_size` counts COMPLETIONS per device, not prompts. One optimizer step takes
  per_device x ranks x gradient_accumulation_steps completions, i.e. that / num_generations prompts; so
  `data.train_batch_size` = `actor.ppo_mini_batch_size` = that many prompts (one optimizer step per batch and
  iteration), and `actor.ppo_micro_batch_size_per_gpu` = per_device_train_batch_size (the accumulation steps follow).
Outputs: `output_model_path` holds the checkpoints (the trainer's run folder); `mlflow_model_folder` the best model by
validation reward as an MLflow transformers model (app/pipeline/best_model.py says what "best" can mean here).
"""

from __future__ import annotations

import math
from pathlib import Path

from app.pipeline.common import (
    apply_table,
    apply_trainer_overrides,
    check_output_folder,
    infra_params,
    map_gpu_layout,
    model_params,
    model_source,
    resolve_model,
)
from app.pipeline.params import Param, PipelineError, Values, param_rows
from app.pipeline.plan import Plan

CARD = "grpo_chat_completion"
BASE_CONFIG = "grpo_trainer"
A, R = "actor_rollout_ref.actor", "actor_rollout_ref.rollout"
SCHEDULES = (
    "linear",
    "cosine",
    "cosine_with_restarts",
    "polynomial",
    "constant",
    "constant_with_warmup",
    "inverse_sqrt",
    "reduce_lr_on_plateau",
)
_SCHEDULE_HERE = {"constant": "constant", "constant_with_warmup": "constant", "cosine": "cosine", "linear": "linear"}
OPTIMIZERS_HERE = ("adamw_torch", "adamw_torch_fused")


PARAMS: tuple[Param, ...] = (
    *model_params(),
    *param_rows(
        "Data",
        (
            "dataset_name",
            None,
            "str",
            "code: a local folder holding the splits, or a Hugging Face dataset id read from the local datasets cache "
            "(offline; an error otherwise); used when a split is not a path",
            {"optional": True},
        ),
        ("dataset_prompt_column", "problem", "str", "data.prompt_key"),
        ("dataset_train_split", "train", "str", "code: `data.train_files`: a JSONL path, or a split of dataset_name"),
        ("dataset_validation_split", "test", "str", "code: `data.val_files`: a JSONL path, or a split of dataset_name"),
    ),
    *param_rows(
        "Training",
        (
            "apply_lora",
            True,
            "bool",
            "code: true: LoRA at `actor_rollout_ref.model.lora_rank`/`lora_alpha` of configs/grpo_trainer.yaml "
            "(64/32); "
            "false: `lora_rank=0` (full fine-tuning)",
        ),
        (
            "eval_strategy",
            "steps",
            "choice",
            "code: `trainer.test_freq`: no -> -1 and no step-0 validation (the trainer still validates after the "
            "last step); steps -> eval_steps; epoch -> the steps of one epoch. The card names no default; steps here",
            {"choices": ("no", "steps", "epoch")},
        ),
        (
            "do_eval",
            None,
            "bool",
            "code: follows eval_strategy when unset; false turns evaluation off as eval_strategy=no",
            {"optional": True},
        ),
        ("num_iterations", 5, "int", f"{A}.ppo_epochs"),
        ("epsilon", 0.5, "float", f"{A}.clip_ratio"),
        (
            "per_device_train_batch_size",
            8,
            "int",
            "code: completions per rank and micro-batch: `actor.ppo_micro_batch_size_per_gpu`; with the rank count, "
            "gradient_accumulation_steps and num_generations it gives `data.train_batch_size` = "
            "`actor.ppo_mini_batch_size` (prompts)",
        ),
        (
            "per_device_eval_batch_size",
            8,
            "int",
            "n/a: validation prompts go to the rollout server in one request, which batches them itself",
        ),
        (
            "gradient_accumulation_steps",
            1,
            "int",
            "code: micro-batches per optimizer step (see per_device_train_batch_size)",
        ),
        ("learning_rate", 1e-6, "float", f"{A}.optim.lr"),
        ("logging_steps", 5, "int", "n/a: metrics are logged at every step"),
        (
            "lr_scheduler_type",
            "linear",
            "choice",
            "code: `actor.optim.warmup_style`: constant, constant_with_warmup -> constant; cosine -> cosine; linear -> "
            "linear; the others are refused (the trainer has no such schedule). The card names no default; linear "
            "here, as in TRL",
            {"choices": SCHEDULES},
        ),
        (
            "num_train_epochs",
            4.0,
            "float",
            "code: `trainer.total_epochs` (a fraction: `trainer.total_training_steps` from the training-set size)",
        ),
        ("max_steps", -1, "int", "code: `trainer.total_training_steps` when > 0 (then num_train_epochs is not used)"),
        ("max_grad_norm", 1.0, "float", f"{A}.grad_clip"),
        ("warmup_ratio", 0.1, "float", f"{A}.optim.lr_warmup_steps_ratio"),
        ("eval_steps", 1, "int", "code: `trainer.test_freq` under eval_strategy=steps"),
        (
            "optim",
            "adamw_torch",
            "str",
            "code: adamw_torch, adamw_torch_fused: the trainer's AdamW (`actor.optim`); any other is refused naming it",
        ),
        (
            "use_liger_kernel",
            False,
            "bool",
            "code: true prints a warning: Liger kernels are not wired into the "
            "FSDP engine here, so the standard kernels run",
        ),
        (
            "deepspeed_config",
            None,
            "path",
            f"code: `{A}.strategy=deepspeed` with this file as "
            f'`{A}.deepspeed_config.config_path` (its values win, "auto" takes '
            "the card's; batch keys that disagree with the card's are refused)",
            {"optional": True},
        ),
        (
            "beta",
            0.04,
            "float",
            f"code: `{A}.kl_loss_coef`, with `{A}.use_kl_loss` = beta > 0 (no reference model at 0)",
        ),
    ),
    *param_rows(
        "Generation",
        ("max_prompt_length", 512, "int", "data.max_prompt_length"),
        ("num_generations", 4, "int", f"{R}.n"),
        ("max_completion_length", 256, "int", "data.max_response_length"),
        ("temperature", 1.0, "float", f"{R}.temperature"),
        ("top_p", 1.0, "float", f"{R}.top_p"),
        (
            "num_completions_to_print",
            2,
            "int",
            "code: `trainer.log_val_generations`, and the `console_samples` logger prints them at each evaluation",
        ),
    ),
    *param_rows(
        "Checkpoints",
        ("save_steps", 100, "int", "trainer.save_freq"),
        ("save_total_limit", 20, "int", "code: `trainer.max_ckpt_to_keep` (0 or less: keep all)"),
        ("shuffle_dataset", True, "bool", "data.shuffle"),
    ),
    *param_rows(
        "vLLM",
        ("vllm_gpu_memory_utilization", 0.3, "float", f"{R}.gpu_memory_utilization"),
        (
            "vllm_tensor_parallel_size",
            1,
            "int",
            f"code: `{R}.tensor_model_parallel_size`; the card default is capped at the GPUs per node",
        ),
    ),
    *param_rows(
        "Outputs",
        (
            "output_model_path",
            "outputs/grpo_chat_completion/checkpoints",
            "path",
            "code: `trainer.default_local_dir`: checkpoints `global_step_N/`, metrics.jsonl, the final `hf_model/`",
        ),
        (
            "mlflow_model_folder",
            "outputs/grpo_chat_completion/mlflow_model",
            "path",
            "code: the best model by validation reward, saved with `mlflow.transformers.save_model` after the run",
        ),
    ),
    *infra_params(gpu_default=None),
    *param_rows(
        "rayrl extensions (not on the card)",
        ("dataset_solution_column", "solution", "str", "data.ground_truth_key"),
        (
            "dataset_data_source_column",
            "data_source",
            "str",
            "code: `data.reward_fn_key`, the column whose value picks the rule reward "
            "(`custom_reward_function.path=...` "
            "replaces the rules)",
        ),
    ),
)


def build_plan(values: Values, dry_run: bool) -> Plan:
    plan = Plan(BASE_CONFIG)
    apply_table(PARAMS, values, plan)
    run_dir = Path(values["output_model_path"]).expanduser()
    mlflow_dir = Path(values["mlflow_model_folder"]).expanduser()
    check_output_folder("mlflow_model_folder", mlflow_dir)
    o = plan.overrides
    o["trainer.default_local_dir"] = str(run_dir.resolve())
    o["trainer.experiment_name"] = CARD
    _refuse_what_cannot_run(values, plan)
    if "trainer.num_workers" in values.trainer_overrides:  # the CPU rank count the batch sizes depend on
        o["trainer.num_workers"] = int(values.trainer_overrides["trainer.num_workers"])
    ranks = map_gpu_layout(
        values,
        plan,
        gpu_keys=("number_of_gpu_to_use_finetuning",),
        node_keys=("num_nodes_finetune",),
        tp_keys=("vllm_tensor_parallel_size",),
    )
    from app.pipeline.datasets import resolve_split

    for key, target in (("dataset_train_split", "data.train_files"), ("dataset_validation_split", "data.val_files")):
        o[target] = resolve_split(key, values[key], values["dataset_name"], run_dir, dry_run)
    prompts = _map_batches(values, plan, ranks)
    if not values["apply_lora"]:
        o["actor_rollout_ref.model.lora_rank"] = 0
    o[f"{A}.use_kl_loss"] = values["beta"] > 0
    o[f"{A}.kl_loss_coef"] = values["beta"]
    o[f"{A}.optim.warmup_style"] = _SCHEDULE_HERE[values["lr_scheduler_type"]]
    _map_length(values, plan, prompts)
    _map_eval(values, plan, prompts)
    limit = values["save_total_limit"]
    o["trainer.max_ckpt_to_keep"] = limit if limit and limit > 0 else None
    if values["num_completions_to_print"] > 0:
        o["trainer.log_val_generations"] = values["num_completions_to_print"]
        o["trainer.logger"] = ["console", "jsonl", "console_samples"]
    key, source = model_source(values)
    o["actor_rollout_ref.model.path"] = resolve_model(key, source, run_dir, dry_run)
    apply_trainer_overrides(values, plan)
    plan.outputs = {"output_model_path": str(run_dir), "mlflow_model_folder": str(mlflow_dir)}

    def finish(run_cfg, cfg) -> None:
        from app.pipeline.best_model import save_best_model

        save_best_model(run_cfg, cfg, mlflow_dir)

    plan.finish = finish
    return plan


def _refuse_what_cannot_run(values: Values, plan: Plan) -> None:
    if values["deepspeed_config"]:  # TRL's DeepSpeed JSON: the DeepSpeed engine, which checks it against the card
        plan.overrides[f"{A}.strategy"] = "deepspeed"
        plan.overrides[f"{A}.deepspeed_config.config_path"] = values["deepspeed_config"]
    if values["optim"] not in OPTIMIZERS_HERE:
        raise PipelineError(
            f"optim={values['optim']!r}: the trainer's optimizer is AdamW; use one of {', '.join(OPTIMIZERS_HERE)}"
        )
    if values["optim"] == "adamw_torch_fused":
        plan.notes.append("optim=adamw_torch_fused: the same AdamW update; torch picks the kernel")
    if values["lr_scheduler_type"] not in _SCHEDULE_HERE:
        raise PipelineError(
            f"lr_scheduler_type={values['lr_scheduler_type']!r}: the trainer's schedules are a "
            f"linear warm-up then constant, cosine or linear decay; use one of "
            f"{', '.join(_SCHEDULE_HERE)}"
        )
    if values["use_liger_kernel"]:
        plan.warnings.append(
            "use_liger_kernel=true: Liger kernels are not wired into the FSDP engine here; "
            "training runs the standard kernels"
        )


def _map_batches(values: Values, plan: Plan, ranks: int) -> int:
    """TRL counts completions: per optimizer step, per_device x ranks x accumulation of them. Each rank must hold
    whole groups here (its share of prompts with all their samples), so per_device x accumulation must be a
    multiple of num_generations. Returns the prompts per step."""
    per_device, accum, n = (
        values["per_device_train_batch_size"],
        values["gradient_accumulation_steps"],
        values["num_generations"],
    )
    for key in ("per_device_train_batch_size", "gradient_accumulation_steps", "num_generations"):
        if values[key] < 1:
            raise PipelineError(f"{key}={values[key]} must be at least 1")
    if (per_device * accum) % n:
        raise PipelineError(
            f"per_device_train_batch_size x gradient_accumulation_steps = {per_device} x {accum} = "
            f"{per_device * accum} completions per rank is not a multiple of num_generations={n}: each rank holds "
            "whole groups of a prompt's completions here"
        )
    prompts = per_device * accum * ranks // n
    plan.overrides["data.train_batch_size"] = prompts
    plan.overrides[f"{A}.ppo_mini_batch_size"] = prompts
    plan.overrides[f"{A}.ppo_micro_batch_size_per_gpu"] = per_device
    plan.notes.append(
        f"batch: {per_device} completions x {ranks} ranks x {accum} accumulation = "
        f"{per_device * ranks * accum} completions = {prompts} prompts x {n} generations per step"
    )
    return prompts


def _steps_per_epoch(plan: Plan, prompts: int) -> int:
    from app.data.sources import read_table

    path = plan.overrides["data.train_files"]
    try:
        rows = len(read_table(path).rows)
    except Exception as exc:  # a dry run of a cached dataset not yet written, or a bad file: the loader says more
        raise PipelineError(f"counting the training rows of {path} for an epoch-based setting: {exc}") from exc
    return max(1, rows // prompts)


def _map_length(values: Values, plan: Plan, prompts: int) -> None:
    o = plan.overrides
    if values["max_steps"] > 0:
        o["trainer.total_training_steps"] = values["max_steps"]
        return
    epochs = values["num_train_epochs"]
    if epochs <= 0:
        raise PipelineError(f"num_train_epochs={epochs} must be positive (or set max_steps)")
    if epochs == int(epochs):
        o["trainer.total_epochs"] = int(epochs)
        return
    steps = math.ceil(epochs * _steps_per_epoch(plan, prompts))
    o["trainer.total_training_steps"] = steps
    plan.notes.append(f"num_train_epochs={epochs}: {steps} steps of {prompts} prompts")


def _map_eval(values: Values, plan: Plan, prompts: int) -> None:
    o, strategy, do_eval = plan.overrides, values["eval_strategy"], values["do_eval"]
    if do_eval and strategy == "no":
        raise PipelineError("do_eval=true with eval_strategy=no: set eval_strategy to steps or epoch")
    if strategy == "no" or do_eval is False:
        o["trainer.test_freq"], o["trainer.val_before_train"] = -1, False
        plan.notes.append("no evaluation during training; the trainer still validates once after the last step")
        return
    if values["eval_steps"] < 1:
        raise PipelineError(f"eval_steps={values['eval_steps']} must be a step count of at least 1")
    o["trainer.test_freq"] = values["eval_steps"] if strategy == "steps" else _steps_per_epoch(plan, prompts)
    o["trainer.val_before_train"] = True  # the base model's reward: the first candidate for the best model
