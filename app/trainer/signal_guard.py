"""A run that trains on nothing says so: the share of groups whose samples scored unlike, watched step by step.

A group-relative estimator (GRPO, RLOO, Dr. GRPO, ...) gives every sample of a group zero advantage when the group's
samples all get the same score. When almost every group is like that for several steps (the policy stopped
producing the answer format, or the task is too hard or too easy for it), the update moves nothing and the curve is
flat; without this guard the only clue is a reward that does not change.
"""

from __future__ import annotations

import logging
from typing import Any, Hashable, Sequence

import torch

from algos.group_filter import informative_groups

log = logging.getLogger(__name__)

SHARE_METRIC = "signal/groups_share"
STEPS_METRIC = "signal/low_signal_steps"


def group_counts(sample_scores: torch.Tensor, uid: Sequence[Hashable]) -> tuple[int, int]:
    """(groups whose samples scored unlike, groups) among the samples of `uid`; `sample_scores` is `(batch,)`.

    A group of one sample counts as no signal here: alone it has no peer to be compared with."""
    members: dict[Hashable, int] = {}
    for group_id in uid:
        members[group_id] = members.get(group_id, 0) + 1
    informative = informative_groups(sample_scores, uid)
    return sum(1 for g, keep in informative.items() if keep and members[g] > 1), len(members)


class NoSignalGuard:
    """Counts steps in a row where at most `min_share` of the groups carried signal; at `steps` in a row it warns
    (once per stretch), naming what to try. `steps` 0: it measures but never warns."""

    def __init__(self, steps: int, min_share: float):
        self.steps, self.min_share = steps, min_share
        self.in_a_row = 0

    def observe(self, step: int, informative: float, groups: float) -> tuple[dict[str, float], str | None]:
        """This step's metrics, and the warning to print (None unless this step completes a stretch of `steps`)."""
        share = informative / groups if groups else 0.0
        self.in_a_row = self.in_a_row + 1 if share <= self.min_share else 0
        metrics = {SHARE_METRIC: share, STEPS_METRIC: float(self.in_a_row)}
        if not self.steps or self.in_a_row != self.steps:
            return metrics, None
        first = step - self.in_a_row + 1
        return metrics, (
            f"steps {first}-{step}: at most {self.min_share:.0%} of the groups had samples that scored unlike "
            f"({share:.0%} at step {step}), so a group-relative estimator learns (almost) nothing from them. Try: a "
            "higher actor_rollout_ref.rollout.temperature or rollout.n (more varied samples), easier prompts, a "
            "reward with partial credit (for the answer format), or algorithm.filter_groups.enable=true to resample "
            "such groups (trainer.no_signal_steps=0 silences this)"
        )

    def watch(self, step: int, group: Any, ranks: Any) -> dict[str, float]:
        """`observe` over every rank's groups of this step's batch (`group`: a RolloutGroup; `ranks`: a RankGroup);
        rank 0 logs the warning."""
        informative, groups = group_counts(group.batch["token_level_scores"].sum(dim=-1), group.uid)
        metrics, warning = self.observe(step, ranks.sum(informative), ranks.sum(groups))
        if warning and ranks.rank == 0:
            log.warning(warning)
        return metrics
