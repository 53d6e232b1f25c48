"""Sync weights one tensor at a time: a sharded model's state dict -> (name, full tensor) pairs, as the rollout wants
them (Hugging Face names; a LoRA adapter under peft's names, or merged into its base weights).

The engine supplies ``gathered(params)``, a context manager that makes a few sharded parameters whole on every rank
(FSDP2: ``full_tensor()``; ZeRO-3: ``GatheredParameters``) and frees them on exit, so at most one parameter (three
for a merged LoRA linear: base, A, B) is gathered at any time. Every rank must consume the iterator to the end.
"""

from __future__ import annotations

import contextlib
from typing import Callable, ContextManager, Iterator, Optional, Sequence

import torch

from app.engine.lora_merge import hf_name, lora_pair_names, merge_lora_state_dict

Gather = Callable[[Sequence[torch.Tensor]], ContextManager[list[torch.Tensor]]]


@contextlib.contextmanager
def already_whole(params: Sequence[torch.Tensor]) -> Iterator[list[torch.Tensor]]:
    """``gathered`` for parameters every rank holds in full (ZeRO-2, one rank)."""
    yield list(params)


def _cpu_copy(tensor: torch.Tensor, dtype: Optional[torch.dtype]) -> torch.Tensor:
    # a copy: the gathered storage is freed (or re-partitioned) when the gather context exits
    return tensor.detach().to("cpu", dtype=dtype or tensor.dtype, copy=True)


def _adapter_names(model: torch.nn.Module, names: list[str]) -> dict[str, str]:
    """peft's saved name of each adapter tensor among ``names`` (others are left out); computed on placeholders so
    nothing is gathered."""
    from peft import get_peft_model_state_dict

    placeholders = {name: torch.empty(0, device="meta") for name in names}
    renamed = get_peft_model_state_dict(model, state_dict=placeholders)
    by_id = {id(t): name for name, t in placeholders.items()}
    return {by_id[id(t)]: new for new, t in renamed.items() if id(t) in by_id}


def stream_sync_tensors(
    model: torch.nn.Module,
    gathered: Gather,
    *,
    adapter_only: bool,
    lora_scaling: Optional[float],
    tied_embeddings: bool,
    dtype: Optional[torch.dtype] = None,
) -> Iterator[tuple[str, torch.Tensor]]:
    """The engine's ``get_per_tensor_param(dtype, merge_lora)``: (name, full CPU tensor) pairs, one gathered at a time.

    ``adapter_only``: only the LoRA tensors, under peft's names. Otherwise plain Hugging Face names; with
    ``lora_scaling`` (a LoRA model) each wrapped linear's adapter is folded into its weight. A tied ``lm_head`` is
    left out (the receiver restores it from the embedding).
    """
    state = model.state_dict(keep_vars=True)  # the live (sharded / partitioned) parameters, not copies
    if adapter_only:
        renamed = _adapter_names(model, [n for n, p in state.items() if p.requires_grad])
        for name, new_name in renamed.items():
            with gathered([state[name]]) as (whole,):
                yield new_name, _cpu_copy(whole, dtype)
        return
    for name, tensor in state.items():
        pair = lora_pair_names(name) if lora_scaling is not None else None
        if lora_scaling is not None and pair is None and (".lora_A." in name or ".lora_B." in name):
            continue  # folded into its base weight below
        out_name = hf_name(name)
        if tied_embeddings and out_name == "lm_head.weight":
            continue
        if pair is None:
            with gathered([tensor]) as (whole,):
                yield out_name, _cpu_copy(whole, dtype)
            continue
        names = [name, *pair]
        with gathered([state[n] for n in names]) as wholes:
            merged = merge_lora_state_dict(dict(zip(names, wholes)), scaling=lora_scaling, dtype=dtype)
            ((merged_name, merged_tensor),) = merged.items()
            yield merged_name, _cpu_copy(merged_tensor, None)
