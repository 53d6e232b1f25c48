"""DAPO's dynamic sampling: which GRPO groups carry a learning signal.

A group is the `n` samples of one prompt. When every sample of a group gets the same score, a group-relative
estimator (GRPO, RLOO, ...) gives all of them a zero advantage: the group costs a forward and backward pass and teaches
nothing. DAPO drops such groups and samples more prompts until the batch is full (verl's
`algorithm.filter_groups`).
"""

from __future__ import annotations

from typing import Hashable, Sequence

import torch


def informative_groups(metric: torch.Tensor, index: Sequence[Hashable]) -> dict[Hashable, bool]:
    """For each group id in `index`, whether its samples disagree on `metric`.

    Args:
        metric: `(batch,)` one number per sample (a score, an accuracy, a summed reward).
        index: `batch` group ids; samples with equal ids form one group.

    Returns:
        {group id: keep}, in first-appearance order. `keep` is True when the group's metric has a non-zero standard
        deviation, and for a group of a single sample (verl keeps those: it has no peers to agree with).
    """
    values = metric.detach().double().reshape(-1)
    if values.numel() != len(index):
        raise ValueError(f"informative_groups: {values.numel()} metric values but {len(index)} group ids")
    members: dict[Hashable, list[int]] = {}
    for row, uid in enumerate(index):
        members.setdefault(uid, []).append(row)
    return {uid: len(rows) == 1 or bool(values[rows].std() > 0) for uid, rows in members.items()}
