"""A merged-LoRA sync folded on the rollout side: the base checkpoint's tensors with a peft adapter added in.

Why: with `rollout.lora_sync=merged` vLLM serves plain merged weights (its CPU LoRA kernels are several times slower),
and folding them on the replica means only the adapter (a few MB) travels each sync. Merging on the trainer instead
gathers every merged weight (540 MB for SmolLM2-135M in fp32), copies it into the object store and out into a file
in /dev/shm. The base weights are read from the model folder the rollout engine itself started from: the trainer's
LoRA wraps the same weights and never changes them.

The fold is the trainer's (`app.engine.lora_merge`): `W + scaling * B @ A` in float32, cast to the sync dtype;
tests/serve/test_lora_fold.py holds the two equal bit for bit. With `rollout.lora_fold_dtype` the folded weight is
first rounded to that dtype: a float32 replica then serves the weights a bf16 replica holds, in fp32 arithmetic.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Collection, Iterator, Mapping, Optional

if TYPE_CHECKING:  # torch is imported where the tensors are made
    import torch

PEFT_PREFIX = "base_model.model."
_HALVES = {".lora_A.weight": "A", ".lora_B.weight": "B"}


def checkpoint_files(model_path: str) -> list[str]:
    """The `*.safetensors` files of a model folder, in name order; empty when there are none (or no such folder)."""
    folder = Path(model_path)
    return sorted(str(p) for p in folder.glob("*.safetensors")) if folder.is_dir() else []


def lora_scaling(adapter_config: Mapping) -> float:
    """peft's factor on `B @ A`: lora_alpha / r, or lora_alpha / sqrt(r) with rsLoRA."""
    rank, alpha = adapter_config["r"], adapter_config["lora_alpha"]
    return alpha / math.sqrt(rank) if adapter_config.get("use_rslora") else alpha / rank


def adapter_pairs(adapter: Mapping[str, "torch.Tensor"]) -> dict[str, dict[str, "torch.Tensor"]]:
    """peft-saved adapter tensors (`base_model.model.<module>.lora_A.weight`, `...lora_B.weight`) grouped by the base
    weight they fold into: {`<module>.weight`: {"A": (r, in), "B": (out, r)}}. Anything else, or half a pair, is an
    error naming the tensor."""
    pairs: dict[str, dict] = {}
    for name, tensor in adapter.items():
        suffix = next((s for s in _HALVES if name.endswith(s)), None)
        if suffix is None or not name.startswith(PEFT_PREFIX):
            raise KeyError(
                f"adapter tensor {name!r} is not a peft LoRA weight ({PEFT_PREFIX}<module>.lora_A/B.weight);"
                " only LoRA adapters can be folded on the rollout side"
            )
        pairs.setdefault(name[len(PEFT_PREFIX) : -len(suffix)] + ".weight", {})[_HALVES[suffix]] = tensor
    for base, pair in pairs.items():
        if len(pair) != 2:
            raise KeyError(f"adapter has only lora_{next(iter(pair))} for {base!r}; a LoRA pair needs both A and B")
    return pairs


def fold(
    weight: "torch.Tensor",
    lora_a: "torch.Tensor",
    lora_b: "torch.Tensor",
    scaling: float,
    dtype: "torch.dtype",
    round_to: Optional["torch.dtype"] = None,
) -> "torch.Tensor":
    """`weight + scaling * lora_b @ lora_a`, computed in float32, rounded to `round_to` (None: not), in `dtype`.
    weight (out, in), A (r, in), B (out, r)."""
    folded = weight.float() + scaling * (lora_b.float() @ lora_a.float())
    return (folded if round_to is None else folded.to(round_to)).to(dtype)


def iter_folded(
    base_files: list[str],
    adapter: Mapping[str, "torch.Tensor"],
    scaling: float,
    dtype: "torch.dtype",
    skip: Collection[str] = (),
    round_to: Optional["torch.dtype"] = None,
) -> Iterator[tuple[str, "torch.Tensor"]]:
    """(name, tensor) for every tensor of `base_files` except `skip`, in `dtype`, the adapter folded into the weights
    it wraps (rounded to `round_to` first, when given; `fold`). Every pair is matched against the files' names before
    the first tensor is yielded, so a mismatched adapter fails before the receiver has loaded anything."""
    from safetensors import safe_open

    from serve.payload import iter_safetensors

    if not base_files:
        raise FileNotFoundError("no base checkpoint files to fold the LoRA adapter into")
    pairs = adapter_pairs(adapter)
    names: set[str] = set()
    for path in base_files:
        with safe_open(path, framework="pt") as f:
            names.update(f.keys())
    missing = sorted(set(pairs) - names)
    if missing:
        raise KeyError(
            f"the adapter wraps {missing[:3]} ({len(missing)} in all), which "
            f"{Path(base_files[0]).parent} does not hold: is the rollout's model the trainer's base?"
        )
    for name, tensor in iter_safetensors(base_files):
        if name in skip:
            continue
        pair = pairs.get(name)
        yield name, (tensor.to(dtype) if pair is None else fold(tensor, pair["A"], pair["B"], scaling, dtype, round_to))


def iter_folded_adapter(
    model_path: str, adapter_dir: str, dtype: str, skip: Collection[str] = (), round_to: Optional[str] = None
) -> Iterator[tuple[str, "torch.Tensor"]]:
    """`iter_folded` from a model folder and a staged peft folder (adapter_config.json + adapter_model.safetensors),
    in the torch dtype named `dtype`, the folded weights rounded to the one named `round_to` (None: not)."""
    import torch
    from safetensors.torch import load_file

    files = checkpoint_files(model_path)
    if not files:
        raise FileNotFoundError(f"{model_path} holds no *.safetensors base weights to fold the LoRA adapter into")
    scaling = lora_scaling(json.loads((Path(adapter_dir) / "adapter_config.json").read_text()))
    adapter = load_file(str(Path(adapter_dir) / "adapter_model.safetensors"))
    return iter_folded(files, adapter, scaling, getattr(torch, dtype), skip, round_to and getattr(torch, round_to))
