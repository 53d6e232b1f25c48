"""DeepSpeed's JSON config: derived from the engine spec, then merged with the user's file (``config_path``).

Derived: the batch keys (samples per optimiser step split over the ranks and into micro-batches as the FSDP engine
splits them), the ZeRO stage, optimizer offload, gradient clipping and bf16/fp16. The user's file wins on every
value except the batch keys; ``"auto"`` (Hugging Face's and TRL's spelling) takes the derived value. The engine cuts
micro-batches and marks the accumulation boundary itself, so a batch key that disagrees would be ignored or make
DeepSpeed fail mid-run: it is refused naming the file, the key and both values. The optimizer is torch's AdamW and
the schedule ours (``optim.*``), so an ``optimizer`` / ``scheduler`` section may only say ``"auto"``.

Plain Python (no torch, no deepspeed): the driver runs it to refuse a bad file before any worker starts.
"""

from __future__ import annotations

import copy
import json
from typing import Any, Optional

BATCH_KEYS = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")
AUTO = "auto"
_ADAM_TYPES = ("adam", "adamw")
_NEVER_PRINT = 2**31 - 1  # DeepSpeed's own step log; the trainer reports its metrics


class DeepSpeedConfigError(ValueError):
    """A DeepSpeed setting or file is wrong; the message names the file or key and the values."""


def batch_keys(
    train_batch_size: Optional[int],
    micro_batch_size_per_gpu: Optional[int],
    world_size: int,
    *,
    use_dynamic_bsz: bool = False,
) -> dict[str, int]:
    """DeepSpeed's three batch keys. ``train_batch_size``: samples per optimiser step over all ranks (None: an
    inference-only engine, which never accumulates). A token budget (``use_dynamic_bsz``) makes the micro-batch count
    vary per step: DeepSpeed is then told one micro-batch of the whole per-rank share (the engine marks the
    accumulation boundary itself, so the nominal count changes nothing)."""
    if train_batch_size is None:
        micro = micro_batch_size_per_gpu or 1
        return {
            "train_batch_size": micro * world_size,
            "train_micro_batch_size_per_gpu": micro,
            "gradient_accumulation_steps": 1,
        }
    if train_batch_size <= 0 or train_batch_size % world_size:
        raise DeepSpeedConfigError(
            f"{train_batch_size} samples per optimiser step do not split evenly over {world_size} data-parallel ranks"
        )
    per_rank = train_batch_size // world_size
    micro = per_rank if use_dynamic_bsz or micro_batch_size_per_gpu is None else micro_batch_size_per_gpu
    if micro <= 0 or per_rank % micro:
        raise DeepSpeedConfigError(
            f"each rank's {per_rank} samples per optimiser step do not split into micro-batches of {micro}"
        )
    return {
        "train_batch_size": train_batch_size,
        "train_micro_batch_size_per_gpu": micro,
        "gradient_accumulation_steps": per_rank // micro,
    }


def derived_config(
    *, zero_stage: int, offload_optimizer: bool, trains: bool, grad_clip: float, param_dtype: str, batch: dict[str, int]
) -> dict[str, Any]:
    """What our config says, in DeepSpeed's keys. ``trains``: the engine has an optimizer."""
    zero: dict[str, Any] = {"stage": zero_stage}
    if offload_optimizer and trains:
        zero["offload_optimizer"] = {"device": "cpu"}
    precision = param_dtype.lower()
    return {
        **batch,
        "gradient_clipping": float(grad_clip) if grad_clip and grad_clip > 0 else 0.0,
        "zero_optimization": zero,
        "bf16": {"enabled": precision in ("bf16", "bfloat16")},
        "fp16": {"enabled": precision in ("fp16", "float16")},
        # the client optimizer is torch's AdamW, as in the FSDP engine; with offload it steps on the CPU as it is,
        # without building DeepSpeedCPUAdam (a C++ extension)
        "zero_allow_untested_optimizer": True,
        "zero_force_ds_cpu_optimizer": False,
        "steps_per_print": _NEVER_PRINT,
        "wall_clock_breakdown": False,
    }


def load_user_config(path: str, key: str = "deepspeed_config.config_path") -> dict[str, Any]:
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        raise DeepSpeedConfigError(f"{key}={path}: no such file") from None
    except json.JSONDecodeError as exc:
        raise DeepSpeedConfigError(f"{key}={path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise DeepSpeedConfigError(f"{key}={path} must hold a JSON object, not {type(data).__name__}")
    return data


def _all_auto(section: Any) -> bool:
    if isinstance(section, dict):
        return all(_all_auto(v) for v in section.values())
    return section == AUTO


def _check_optimizer_sections(user: dict[str, Any], source: str, optim_key: str) -> None:
    optimizer = user.get("optimizer")
    if optimizer is not None:
        kind = str(optimizer.get("type", AUTO)).lower() if isinstance(optimizer, dict) else None
        if kind not in (AUTO, *_ADAM_TYPES) or not _all_auto(optimizer.get("params", {})):
            raise DeepSpeedConfigError(
                f"{source}: optimizer={json.dumps(optimizer)}: the optimizer is AdamW built from {optim_key}.* (lr, "
                f'betas, weight_decay); set those there and leave this section out or its params "auto"'
            )
    scheduler = user.get("scheduler")
    if scheduler is not None and not (isinstance(scheduler, dict) and _all_auto(scheduler.get("params", {}))):
        raise DeepSpeedConfigError(
            f"{source}: scheduler={json.dumps(scheduler)}: the learning-rate schedule comes from {optim_key}.* "
            f"(lr_warmup_steps, warmup_style, min_lr_ratio); set it there and leave this section out or its params "
            '"auto"'
        )


def _merge(derived: Any, user: Any) -> Any:
    """``user`` over ``derived``, section by section; ``"auto"`` keeps the derived value (or DeepSpeed's default)."""
    if isinstance(derived, dict) and isinstance(user, dict):
        merged = dict(derived)
        for key, value in user.items():
            if value == AUTO:
                continue
            merged[key] = _merge(derived.get(key), value) if key in derived else copy.deepcopy(value)
        return merged
    return derived if user == AUTO else copy.deepcopy(user)


def merge_user_config(
    derived: dict[str, Any],
    user: dict[str, Any],
    *,
    source: str,
    trains: bool,
    explain: str = "the role's mini-batch, micro-batch and rank count",
    optim_key: str = "optim",
) -> dict[str, Any]:
    """The final config. ``source`` names the file in messages; ``explain`` says where the batch keys came from."""
    _check_optimizer_sections(user, source, optim_key)
    user = {k: v for k, v in user.items() if k not in ("optimizer", "scheduler")}
    if trains:
        for key in BATCH_KEYS:
            value = user.get(key, AUTO)
            if value != AUTO and value != derived[key]:
                raise DeepSpeedConfigError(
                    f"{source}: {key}={value!r} disagrees with {key}={derived[key]} derived from {explain}; "
                    f'remove the key or set it to "auto"'
                )
    else:  # batch sizes mean nothing without an optimizer step; keep the derived, consistent ones
        user = {k: v for k, v in user.items() if k not in BATCH_KEYS}
    merged = _merge(derived, user)
    zero = merged.setdefault("zero_optimization", {})
    if not trains and zero.get("stage", 0) in (1, 2):
        # ZeRO-1/2 partition only optimizer state and gradients, which an inference engine has none of (and
        # DeepSpeed refuses them without an optimizer); stage 3 still partitions its parameters
        zero["stage"] = 0
        zero.pop("offload_optimizer", None)
    return merged
