"""Cutting a batch into micro-batches: a fixed number of samples, or a token budget (``use_dynamic_bsz``).

Each function returns groups of row indices. The caller runs the groups in order and puts the outputs back in
the original row order with ``restore_order``. Under data parallelism every rank must run the same number of
micro-batches (each forward/backward is a collective), so the token-budget path takes the count as an argument:
the caller agrees on it across ranks first (``num_bins_for_budget`` then an all-reduce max).
"""
from __future__ import annotations

import heapq
from typing import Sequence

import torch


def fixed_size_groups(batch_size: int, micro_batch_size: int | None) -> list[list[int]]:
    """Consecutive groups of ``micro_batch_size`` rows (None: one group with everything)."""
    if micro_batch_size is None or micro_batch_size >= batch_size:
        return [list(range(batch_size))]
    if micro_batch_size < 1:
        raise ValueError(f"micro batch size must be >= 1, got {micro_batch_size}")
    return [list(range(s, min(s + micro_batch_size, batch_size))) for s in range(0, batch_size, micro_batch_size)]


def num_bins_for_budget(seq_lens: Sequence[int], max_tokens: int) -> int:
    """How many bins of at most ``max_tokens`` tokens first-fit-decreasing needs (a longer sequence gets its own)."""
    if max_tokens < 1:
        raise ValueError(f"max token length per micro-batch must be >= 1, got {max_tokens}")
    loads: list[int] = []
    for n in sorted(seq_lens, reverse=True):
        for i, load in enumerate(loads):
            if load + n <= max_tokens:
                loads[i] += n
                break
        else:
            loads.append(n)
    return max(1, len(loads))


def balanced_groups(seq_lens: Sequence[int], num_groups: int) -> list[list[int]]:
    """Split rows into ``num_groups`` groups of similar total length (longest first onto the lightest group).

    Indices inside a group are ascending; groups are ordered by their first index, so the result is deterministic.
    """
    n = len(seq_lens)
    if not 1 <= num_groups <= n:
        raise ValueError(f"cannot split {n} rows into {num_groups} non-empty micro-batches")
    heap = [(0, g) for g in range(num_groups)]
    groups: list[list[int]] = [[] for _ in range(num_groups)]
    order = sorted(range(n), key=lambda i: (-seq_lens[i], i))
    # lengths are >= 1, so the first num_groups rows land in distinct (empty) groups: none stays empty
    for i in order:
        load, g = heapq.heappop(heap)
        groups[g].append(i)
        heapq.heappush(heap, (load + seq_lens[i], g))
    for g in groups:
        g.sort()
    return sorted(groups, key=lambda g: g[0])


def restore_order(groups: Sequence[Sequence[int]]) -> torch.Tensor:
    """Index that maps the concatenation of the groups' rows back to the original row order."""
    flat = torch.tensor([i for g in groups for i in g], dtype=torch.long)
    inverse = torch.empty_like(flat)
    inverse[flat] = torch.arange(flat.numel())
    return inverse
