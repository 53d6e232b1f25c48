"""A batch of samples: named tensors sharing the leading (batch) dimension, plus non-tensor metadata.

Keys follow verl: ``input_ids (B, P+R)``, ``attention_mask (B, P+R)`` (1 = real token), ``position_ids (B, P+R)``,
``responses (B, R)``, ``response_mask (B, R)`` (1 = real response token), ``old_log_probs``, ``ref_log_prob``,
``advantages``, ``returns``, ``values`` (all ``(B, R)``). Prompts are left-padded and responses right-padded, so the
response of every row starts at column ``P``.

``meta`` carries per-batch scalars (e.g. ``temperature``); it is shared, not split, when the batch is cut up.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping, Sequence

import torch


@dataclass
class TensorBatch:
    tensors: dict[str, torch.Tensor]
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        sizes = {k: v.shape[0] for k, v in self.tensors.items() if v.dim() > 0}
        if len(set(sizes.values())) > 1:
            raise ValueError(f"TensorBatch: tensors disagree on the batch size: {sizes}")
        for k, v in self.tensors.items():
            if v.dim() == 0:
                raise ValueError(f"TensorBatch: key {k!r} is a 0-d tensor; put scalars in meta instead")

    # ------------------------------------------------------------------ access
    def __len__(self) -> int:
        for v in self.tensors.values():
            return int(v.shape[0])
        return 0

    def __getitem__(self, key: str) -> torch.Tensor:
        try:
            return self.tensors[key]
        except KeyError:
            raise KeyError(f"TensorBatch has no key {key!r}; keys: {sorted(self.tensors)}") from None

    def __setitem__(self, key: str, value: torch.Tensor) -> None:
        if len(self.tensors) and value.shape[0] != len(self):
            raise ValueError(f"TensorBatch: {key!r} has batch size {value.shape[0]}, the batch has {len(self)}")
        self.tensors[key] = value

    def __contains__(self, key: object) -> bool:
        return key in self.tensors

    def get(self, key: str, default: torch.Tensor | None = None) -> torch.Tensor | None:
        return self.tensors.get(key, default)

    def keys(self) -> list[str]:
        return list(self.tensors)

    # ------------------------------------------------------------------ views and copies
    def select(self, keys: Iterable[str], *, strict: bool = True) -> "TensorBatch":
        """A batch with only ``keys`` (tensors shared, not copied). ``strict=False`` skips missing keys."""
        keys = list(keys)
        if strict:
            missing = [k for k in keys if k not in self.tensors]
            if missing:
                raise KeyError(f"TensorBatch.select: missing keys {missing}; keys: {sorted(self.tensors)}")
        return TensorBatch({k: self.tensors[k] for k in keys if k in self.tensors}, dict(self.meta))

    def index(self, idx: torch.Tensor | Sequence[int] | slice) -> "TensorBatch":
        """Rows ``idx`` of every tensor (a slice gives views; an index list copies)."""
        if not isinstance(idx, slice):
            idx = torch.as_tensor(idx, dtype=torch.long)
        return TensorBatch(
            {k: v[idx.to(v.device) if isinstance(idx, torch.Tensor) else idx] for k, v in self.tensors.items()},
            dict(self.meta),
        )

    def split(self, size: int) -> list["TensorBatch"]:
        """Consecutive pieces of ``size`` rows (the last one may be shorter)."""
        if size < 1:
            raise ValueError(f"TensorBatch.split: size must be >= 1, got {size}")
        return [self.index(slice(s, min(s + size, len(self)))) for s in range(0, len(self), size)]

    def chunk(self, n: int) -> list["TensorBatch"]:
        """``n`` consecutive pieces of equal size; the batch size must divide by ``n``."""
        if n < 1 or len(self) % n:
            raise ValueError(f"TensorBatch.chunk: batch size {len(self)} is not divisible into {n} equal parts")
        return self.split(len(self) // n)

    def to(self, device: torch.device | str, non_blocking: bool = False) -> "TensorBatch":
        return TensorBatch(
            {k: v.to(device, non_blocking=non_blocking) for k, v in self.tensors.items()}, dict(self.meta)
        )

    def update(self, other: "TensorBatch | Mapping[str, torch.Tensor]") -> "TensorBatch":
        """Add (or replace) the tensors of ``other`` in place; returns self."""
        items = other.tensors if isinstance(other, TensorBatch) else other
        for k, v in items.items():
            self[k] = v
        if isinstance(other, TensorBatch):
            self.meta.update(other.meta)
        return self

    @staticmethod
    def concat(batches: Sequence["TensorBatch"]) -> "TensorBatch":
        """Rows of all ``batches`` in order; they must have the same keys. Meta is taken from the first."""
        if not batches:
            raise ValueError("TensorBatch.concat: nothing to concatenate")
        keys = batches[0].keys()
        for i, b in enumerate(batches):
            if sorted(b.keys()) != sorted(keys):
                raise ValueError(
                    f"TensorBatch.concat: batch {i} has keys {sorted(b.keys())}, batch 0 has {sorted(keys)}"
                )
        return TensorBatch({k: torch.cat([b.tensors[k] for b in batches], dim=0) for k in keys}, dict(batches[0].meta))

    def __iter__(self) -> Iterator[str]:
        return iter(self.tensors)

    def __repr__(self) -> str:
        shapes = ", ".join(
            f"{k}: {tuple(v.shape)} {str(v.dtype).removeprefix('torch.')}" for k, v in self.tensors.items()
        )
        return f"TensorBatch({shapes}; meta={self.meta})"


def concat_padded(batches: Sequence[TensorBatch], pad_token_id: int, *, fill_missing: bool = False) -> TensorBatch:
    """The rows of all ``batches`` in order, re-padded to the longest prompt ``P`` and response ``R`` among them.

    Tensors as wide as prompt + response get left padding up to ``P`` and right padding up to ``R``; tensors as wide as
    the response get right padding (along dim 1 only); others (``(B,)``) are kept. The pad is ``pad_token_id`` for
    ``input_ids`` / ``responses`` and 0 elsewhere (masks 0 = padding). With ``fill_missing``, a key that some batches
    lack is filled there with pads of its layout (zeros: masked out); without, the batches must have the same keys.
    """
    if not batches:
        raise ValueError("concat_padded: nothing to concatenate")
    widths = [(b["input_ids"].shape[1] - b["responses"].shape[1], b["responses"].shape[1]) for b in batches]
    p_max, r_max = max(p for p, _ in widths), max(r for _, r in widths)
    layout: dict[str, tuple[str, torch.Tensor]] = {}  # key -> (its column kind, a tensor of it)
    for b, (p, r) in zip(batches, widths):
        for key, t in b.tensors.items():
            layout.setdefault(key, (_column_kind(t, p, r), t))
    padded = []
    for b, (p, r) in zip(batches, widths):
        if not fill_missing and sorted(b.keys()) != sorted(layout):
            raise ValueError(f"concat_padded: a batch has keys {sorted(b.keys())}, the union is {sorted(layout)}")
        out = {}
        for key, (kind, example) in layout.items():
            value = pad_token_id if key in ("input_ids", "responses") else 0
            t = b.tensors.get(key)
            if t is None:  # fill_missing: pads of the key's layout at this batch's widths
                columns = {"full": (p + r,), "response": (r,), "row": ()}[kind]
                t = torch.full((len(b), *columns, *example.shape[1 + len(columns) :]), value, dtype=example.dtype)
            inner = (0, 0) * (t.dim() - 2)  # F.pad counts from the last dim
            if kind == "full":
                t = torch.nn.functional.pad(t, inner + (p_max - p, r_max - r), value=value)
            elif kind == "response":
                t = torch.nn.functional.pad(t, inner + (0, r_max - r), value=value)
            out[key] = t
        padded.append(TensorBatch(out, dict(b.meta)))
    return TensorBatch.concat(padded)


def _column_kind(t: torch.Tensor, prompt: int, response: int) -> str:
    """`full` for a tensor as wide as prompt + response, `response` for one as wide as the response, else `row`."""
    if t.dim() >= 2 and t.shape[1] == prompt + response:
        return "full"
    if t.dim() >= 2 and t.shape[1] == response:
        return "response"
    return "row"
