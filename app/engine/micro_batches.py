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


def check_budget(seq_lens: Sequence[int], max_tokens: int, budget_key: str = "max_token_len_per_gpu") -> None:
    """Every sequence must fit the token budget on its own: a micro-batch is never larger than the budget, and a
    sequence cannot be split. ``budget_key`` names the config key in the error."""
    if max_tokens < 1:
        raise ValueError(f"{budget_key}={max_tokens}: the token budget per micro-batch must be >= 1")
    longest = max(seq_lens, default=0)
    if longest > max_tokens:
        raise ValueError(
            f"{budget_key}={max_tokens} is below one sequence of {longest} tokens; raise it to at "
            f"least {longest} (prompt + response length)"
        )


def _first_fit_decreasing(seq_lens: Sequence[int], max_tokens: int) -> list[list[int]]:
    """Row indices packed into bins of at most ``max_tokens`` tokens, longest rows first."""
    bins: list[list[int]] = []
    loads: list[int] = []
    for i in sorted(range(len(seq_lens)), key=lambda i: (-seq_lens[i], i)):
        for b, load in enumerate(loads):
            if load + seq_lens[i] <= max_tokens:
                loads[b] += seq_lens[i]
                bins[b].append(i)
                break
        else:
            loads.append(seq_lens[i])
            bins.append([i])
    return bins


def num_bins_for_budget(seq_lens: Sequence[int], max_tokens: int, budget_key: str = "max_token_len_per_gpu") -> int:
    """How many micro-batches of at most ``max_tokens`` tokens first-fit-decreasing needs (``check_budget`` first)."""
    check_budget(seq_lens, max_tokens, budget_key)
    return max(1, len(_first_fit_decreasing(seq_lens, max_tokens)))


def token_budget_groups(
    seq_lens: Sequence[int], max_tokens: int, num_groups: int, budget_key: str = "max_token_len_per_gpu"
) -> list[list[int]]:
    """Exactly ``num_groups`` groups (the count the ranks agreed on, at least this rank's ``num_bins_for_budget``),
    none over ``max_tokens`` tokens: balanced when balancing fits the budget, else first-fit-decreasing bins, the
    fullest split in two until there are ``num_groups``. Ordered as ``balanced_groups``'s."""
    check_budget(seq_lens, max_tokens, budget_key)
    groups = balanced_groups(seq_lens, num_groups)
    if all(sum(seq_lens[i] for i in g) <= max_tokens for g in groups):
        return groups
    bins = _first_fit_decreasing(seq_lens, max_tokens)
    if len(bins) > num_groups:
        raise ValueError(
            f"{len(seq_lens)} rows need {len(bins)} micro-batches of {budget_key}={max_tokens} tokens, "
            f"more than the {num_groups} agreed"
        )
    while len(bins) < num_groups:  # num_groups <= rows (balanced_groups checked), so some bin has two rows
        fullest = max((b for b in bins if len(b) > 1), key=lambda b: sum(seq_lens[i] for i in b))
        bins.remove(fullest)
        bins += [fullest[::2], fullest[1::2]]
    return sorted((sorted(b) for b in bins), key=lambda g: g[0])


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
