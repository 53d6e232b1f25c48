"""Reductions over the trainer's ranks, on top of the engine's all-reduce (gloo on CPU, NCCL on GPU)."""

from __future__ import annotations

from typing import Optional

import torch


class RankGroup:
    """The data-parallel ranks of one run, as the loop needs them: metric means and maxima, sums, a barrier."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self.rank, self.world = engine.dp_rank, engine.dp_world_size

    def reduce(self, means: dict[str, float], maxima: Optional[dict[str, torch.Tensor]] = None) -> dict[str, float]:
        """Means over ranks for `means`; global max for `maxima` (keys starting with '-' hold negated minima)."""
        out: dict[str, float] = {}
        if means:
            names = sorted(means)
            values = self.engine.all_reduce(torch.tensor([float(means[k]) for k in names], dtype=torch.float64), "mean")
            out |= dict(zip(names, values.tolist()))
        if maxima:
            names = sorted(maxima)
            values = self.engine.all_reduce(torch.stack([maxima[k].double() for k in names]), "max")
            for k, v in zip(names, values.tolist()):
                if k.startswith("-"):
                    out[k[1:]] = -v
                else:
                    out[k] = v
        return out

    def sum(self, value: float) -> float:
        return float(self.sum_tensor(torch.tensor([value], dtype=torch.float64))[0])

    def sum_tensor(self, tensor: torch.Tensor) -> torch.Tensor:
        """`tensor` summed over the ranks, in float64 and back in its dtype (an algos.masked.BatchSum)."""
        return self.engine.all_reduce(tensor.double(), "sum").to(tensor.dtype)

    def min_int(self, value: int) -> int:
        return -int(self.engine.all_reduce(torch.tensor([-float(value)]), "max")[0])

    def union(self, names: set[str]) -> list[str]:
        """The sorted union of every rank's `names` (e.g. the extra fields its reward functions returned)."""
        out: set[str] = set()
        for text in self.gather_text("\n".join(sorted(names))):
            out |= set(text.split("\n")) - {""}
        return sorted(out)

    def gather_text(self, text: str) -> list[str]:
        """Every rank's `text`, in rank order (over the engine's all-reduce: a sum of rows only one rank fills)."""
        if self.world == 1:
            return [text]
        mine = torch.tensor(list(text.encode()), dtype=torch.float64)
        width = int(self.engine.all_reduce(torch.tensor([float(len(mine))]), "max")[0])
        rows = torch.zeros(self.world, width, dtype=torch.float64)
        rows[self.rank, : len(mine)] = mine
        rows = self.engine.all_reduce(rows, "sum")
        return [bytes(row).rstrip(b"\0").decode() for row in rows.to(torch.uint8).tolist()]

    def gather_rows(self, tensor: torch.Tensor) -> torch.Tensor:
        """Every rank's `(rows, cols)` tensor stacked in rank order, each zero-padded on the right to the widest
        rank's columns (float64 on the wire: exact for token ids and counts below 2**53)."""
        if self.world == 1:
            return tensor
        sizes = torch.zeros(2 * self.world, dtype=torch.float64)
        sizes[2 * self.rank], sizes[2 * self.rank + 1] = tensor.shape[0], tensor.shape[1]
        sizes = self.engine.all_reduce(sizes, "sum").long().view(self.world, 2)
        width = int(sizes[:, 1].max())
        rows = torch.zeros(int(sizes[:, 0].sum()), width, dtype=torch.float64)
        start = int(sizes[: self.rank, 0].sum())
        rows[start : start + tensor.shape[0], : tensor.shape[1]] = tensor.double()
        return self.engine.all_reduce(rows, "sum").to(tensor.dtype)

    def from_rank0(self, values: list[int]) -> list[int]:
        """Rank 0's `values` on every rank (each rank passes a list of the same length; only rank 0's are kept)."""
        if self.world == 1:
            return list(values)
        mine = torch.tensor(values, dtype=torch.float64) if self.rank == 0 else torch.zeros(len(values))
        return [int(v) for v in self.engine.all_reduce(mine.double(), "sum").tolist()]

    def barrier(self) -> None:
        self.engine.all_reduce(torch.zeros(1), "sum")
