"""Building the Hugging Face model an engine trains: causal LM or value model, optional peft LoRA."""

from __future__ import annotations

import json
import os
import shutil
from typing import Any

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForTokenClassification

from app.engine.packed_attention import packed_attention_kernel, register_packed_attention
from app.engine.spec import EngineSpec

# tokenizer and generation files copied next to exported weights so the folder is a complete HF model
_HF_SIDE_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
    "generation_config.json",
)


def attention_implementation(device: torch.device) -> str:
    """flash-attention 2 (varlen) on GPUs that have it; otherwise our packed attention (PyTorch's varlen kernel on
    GPUs that run it, per-sequence sdpa elsewhere)."""
    if device.type == "cuda":
        try:
            import flash_attn  # noqa: F401

            return "flash_attention_2"
        except ImportError:
            packed_attention_kernel(device)  # asks the GPU its compute capability now, not inside compiled layers
    return register_packed_attention()


def model_class(model_kind: str):
    if model_kind == "causal_lm":
        return AutoModelForCausalLM
    if model_kind == "value":
        return AutoModelForTokenClassification
    raise ValueError(f"model_kind={model_kind!r}; use 'causal_lm' or 'value'")


def load_config(spec: EngineSpec):
    """The model's config with ``spec.model_overrides`` set on it (verl's ``model.override_config``), so the model
    built, its shapes and the exported config.json agree; app.preflight.model_overrides checks the names first."""
    kwargs: dict[str, Any] = {"trust_remote_code": spec.trust_remote_code}
    if spec.model_kind == "value":
        kwargs["num_labels"] = 1  # one scalar value per token
    config = AutoConfig.from_pretrained(spec.model_path, **kwargs)
    for key, value in spec.model_overrides.items():
        setattr(config, key, value)
    return config


def load_model(spec: EngineSpec, dtype: torch.dtype, attn_implementation: str) -> torch.nn.Module:
    """Weights from ``spec.model_path`` (a value model gets a fresh ``score`` head if the folder has none)."""
    config = load_config(spec)
    model = model_class(spec.model_kind).from_pretrained(
        spec.model_path,
        config=config,
        dtype=dtype,
        trust_remote_code=spec.trust_remote_code,
        attn_implementation=attn_implementation,
    )
    _inference_settings(model)
    return model


def build_empty_model(spec: EngineSpec, dtype: torch.dtype, attn_implementation: str) -> torch.nn.Module:
    """The model of ``spec.model_path`` with every parameter on the meta device (no storage, nothing read) and its
    buffers real: the skeleton a rank fills from rank 0's weights (``FSDPEngine``'s one-rank load). Buffers stay
    real because some (rotary frequencies) are computed at construction and are in no checkpoint."""
    from accelerate import init_empty_weights

    config = load_config(spec)
    with init_empty_weights(include_buffers=False):
        model = model_class(spec.model_kind).from_config(
            config, dtype=dtype, trust_remote_code=spec.trust_remote_code, attn_implementation=attn_implementation
        )
    model.tie_weights()  # as from_pretrained does (tied embeddings share one parameter); not done on meta here
    _inference_settings(model)
    return model


def _inference_settings(model: torch.nn.Module) -> None:
    if hasattr(model.config, "use_cache"):
        model.config.use_cache = False
    # No dropout anywhere (the token-classification head defaults to 0.1): train-mode outputs must equal the
    # eval-mode ones used for old log-probs and values, or the PPO ratio and value clip see noise.
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0


# the value heads peft's token-classification task trains whole
_VALUE_HEADS = ("score", "classifier")


def lora_config(spec: EngineSpec):
    from peft import LoraConfig, TaskType

    target = spec.target_modules
    if isinstance(target, (list, tuple)):
        target = list(target)
    exclude = spec.exclude_modules
    if spec.model_kind == "value":
        # peft trains a token-classification head whole (modules_to_save), and an adapter on it is refused: keep the
        # head out of target_modules (all-linear would match it)
        heads = r"(?:.*\.)?(?:" + "|".join(_VALUE_HEADS) + ")"
        exclude = f"(?:{exclude})|{heads}" if exclude else heads
    return LoraConfig(
        r=spec.lora_rank,
        lora_alpha=spec.lora_alpha,
        target_modules=target,
        exclude_modules=exclude,
        lora_dropout=0.0,
        bias="none",
        task_type=TaskType.CAUSAL_LM if spec.model_kind == "causal_lm" else TaskType.TOKEN_CLS,
    )


def apply_lora(model: torch.nn.Module, spec: EngineSpec) -> torch.nn.Module:
    """Wrap with a peft LoRA adapter; only adapter weights (and a value head) stay trainable."""
    from peft import get_peft_model

    peft_model = get_peft_model(model, lora_config(spec))
    n_trainable = sum(p.numel() for p in peft_model.parameters() if p.requires_grad)
    if n_trainable == 0:
        raise ValueError(
            f"LoRA with target_modules={spec.target_modules!r}, exclude_modules={spec.exclude_modules!r}"
            " matched no module: nothing would train"
        )
    return peft_model


def adapter_config_dict(peft_model: torch.nn.Module, base_model_path: str) -> dict[str, Any]:
    """The adapter's ``adapter_config.json`` content (JSON-safe)."""
    cfg = peft_model.peft_config["default"].to_dict()
    cfg["base_model_name_or_path"] = base_model_path
    return json.loads(json.dumps(cfg, default=lambda o: sorted(o) if isinstance(o, set) else str(o)))


def decoder_layer_class_names(model: torch.nn.Module) -> set[str]:
    """Names of the transformer-block classes (each becomes one FSDP unit)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    names = set(getattr(base, "_no_split_modules", None) or [])
    if not names:
        raise ValueError(f"{type(base).__name__} does not declare _no_split_modules; cannot find its layers to shard")
    return names


def save_hf_folder(path: str, state: dict[str, torch.Tensor], spec: EngineSpec) -> None:
    """A Hugging Face model folder: ``spec``'s config, ``state`` (plain HF names) as safetensors, tokenizer files."""
    from huggingface_hub import save_torch_state_dict

    config = load_config(spec)
    config.dtype = next(iter(state.values())).dtype  # transformers names it `dtype` now (`torch_dtype` warns)
    os.makedirs(path, exist_ok=True)
    config.save_pretrained(path)
    save_torch_state_dict(state, path)
    for name in _HF_SIDE_FILES:
        src = os.path.join(spec.model_path, name)
        if os.path.isfile(src):
            shutil.copyfile(src, os.path.join(path, name))
