"""A cheaper forward for peft's LoRA ``Linear`` layers in the plain case the engine trains.

peft computes ``result + lora_B(lora_A(x)) * scaling``: the scaling multiplies, and the sum writes, a full
``(tokens, out_features)`` tensor, and the multiply runs again in backward. On a CPU those elementwise passes over
bf16 activations cost about as much as the rank-16 matmuls themselves (SmolLM2, all-linear LoRA: ~2 s of a ~12 s
forward+backward). Here the scaling is applied to the rank-``r`` side, ``lora_A(x) * scaling``, and the low-rank
product is accumulated into the base layer's output by one ``addmm_``. Same function, same parameters and names.

Only layers with one adapter, no dropout, no bias on ``lora_B`` and no variant (DoRA, ...) take the fast path, and
only while the adapter is active and unmerged; anything else runs peft's own forward.
"""

from __future__ import annotations

import types
from typing import Any

import torch
import torch.nn.functional as F


def _fused_forward(self, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    active = self.active_adapters
    if args or kwargs or self.disable_adapters or self.merged or len(active) != 1:
        return type(self).forward(self, x, *args, **kwargs)
    name = active[0]
    lora_a, lora_b = self.lora_A[name], self.lora_B[name]
    # mixed dtypes need peft's casts; decided before the base matmul so that it never runs twice
    if not x.dtype == lora_a.weight.dtype == lora_b.weight.dtype == self.base_layer.weight.dtype:
        return type(self).forward(self, x)
    result = self.base_layer(x)
    low_rank = F.linear(x, lora_a.weight).mul_(self.scaling[name])  # (..., r)
    flat = result.reshape(-1, result.shape[-1])
    return flat.addmm_(low_rank.reshape(-1, low_rank.shape[-1]), lora_b.weight.t()).view(result.shape)


def _plain(layer: torch.nn.Module) -> bool:
    names = list(layer.lora_A.keys())
    if len(names) != 1 or getattr(layer, "fan_in_fan_out", False) or getattr(layer, "lora_variant", {}):
        return False
    name = names[0]
    return (
        isinstance(layer.lora_dropout[name], torch.nn.Identity)
        and layer.lora_B[name].bias is None
        and isinstance(layer.base_layer, torch.nn.Linear)
    )


def use_fused_lora_forward(model: torch.nn.Module) -> int:
    """Give every plain peft LoRA ``Linear`` in ``model`` the fused forward; returns how many layers took it."""
    from peft.tuners.lora import Linear as LoraLinear

    count = 0
    for module in model.modules():
        if type(module) is LoraLinear and _plain(module):
            module.forward = types.MethodType(_fused_forward, module)
            count += 1
    return count
