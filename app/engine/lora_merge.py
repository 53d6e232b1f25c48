"""Fold LoRA adapters into their base weights: a peft model's full state dict -> plain Hugging Face names.

Used to sync a LoRA policy to the rollout engine as ordinary full weights, so it generates with base-model kernels
(vLLM's CPU LoRA path is several times slower than its plain one).
"""

from __future__ import annotations

from typing import Optional

import torch

_PEFT_PREFIX = "base_model.model."
_BASE_WEIGHT = ".base_layer.weight"


def hf_name(name: str) -> str:
    """A peft model's tensor name -> the plain model's (a LoRA-wrapped linear's base weight becomes its weight)."""
    plain = name[len(_PEFT_PREFIX) :] if name.startswith(_PEFT_PREFIX) else name
    if plain.endswith(_BASE_WEIGHT):
        return plain[: -len(_BASE_WEIGHT)] + ".weight"
    return plain.replace(".base_layer.", ".")  # a bias of a wrapped linear


def lora_pair_names(name: str, adapter: str = "default") -> Optional[tuple[str, str]]:
    """The names of the LoRA A and B weights that fold into the base weight ``name``; None if it is not one."""
    if not name.endswith(_BASE_WEIGHT):
        return None
    module = name[: -len(_BASE_WEIGHT)]
    return f"{module}.lora_A.{adapter}.weight", f"{module}.lora_B.{adapter}.weight"


def merge_lora_state_dict(
    state: dict[str, torch.Tensor], scaling: float, adapter: str = "default", dtype: Optional[torch.dtype] = None
) -> dict[str, torch.Tensor]:
    """`W + scaling * B @ A` for every LoRA-wrapped linear, and every other tensor renamed to its base name.

    `state`: names like `base_model.model.<module>.base_layer.weight`, `<module>.lora_A.<adapter>.weight` (r, in) and
    `<module>.lora_B.<adapter>.weight` (out, r); `scaling` = lora_alpha / lora_rank. Returns `<module>.weight` (out, in)
    in `dtype` (default: each base weight's own); the merge is computed in float32. Each tensor is cast as it is
    produced, so at most one float32 temporary exists at a time.
    """
    lora_a_suffix, lora_b_suffix = f".lora_A.{adapter}.weight", f".lora_B.{adapter}.weight"
    merged: dict[str, torch.Tensor] = {}
    for name, tensor in state.items():
        if name.endswith((lora_a_suffix, lora_b_suffix)):
            continue
        pair = lora_pair_names(name, adapter)
        if pair is not None:
            lora_a, lora_b = state[pair[0]], state[pair[1]]
            delta = scaling * (lora_b.float() @ lora_a.float())
            tensor = (tensor.float() + delta).to(dtype or tensor.dtype)
        merged[hf_name(name)] = tensor if dtype is None else tensor.to(dtype)
    return merged
