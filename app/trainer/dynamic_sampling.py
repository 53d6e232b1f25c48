"""DAPO's dynamic sampling in the loop: rounds of generate + score until the batch holds enough informative groups.

verl's `algorithm.filter_groups`: each round takes the next `data.gen_batch_size` prompts (this rank's share), keeps
the groups whose samples disagree on the filter metric (`algos.group_filter`) and drops the rest, until every rank
holds its share of `data.train_batch_size` groups. All ranks run the same number of rounds, so their data loaders stay
in step and the collectives inside a round (metric reductions) match. Past `max_num_gen_batches` rounds verl stops
the run; here the step goes on, filling the batch with uninformative groups (they add no policy gradient) and
counting them, so a hard stretch of data slows learning instead of ending the job.
"""

from __future__ import annotations

from typing import Callable, Hashable, TypeVar

import torch

from algos.group_filter import informative_groups
from app.trainer.rollout_batch import RolloutGroup, concat_groups, select_rows

R = TypeVar("R")  # one round of generated and scored groups, of whatever kind the caller draws
Pick = tuple[int, Hashable]  # a group of the batch: (its round, its group id)


def informative_rounds(
    next_round: Callable[[], R],
    informative_of: Callable[[R], dict[Hashable, bool]],
    groups_needed: int,
    max_rounds: int,
    global_min: Callable[[int], int],
) -> tuple[list[R], list[Pick], dict[str, int]]:
    """Dynamic sampling's round loop, over any kind of round (the trainer's and bench/recipe_screen.py's).

    Args:
        next_round: generates and scores one round.
        informative_of: {group id: its samples disagree on the filter metric} of a round, in batch order
            (`algos.group_filter.informative_groups`).
        groups_needed: groups (prompts) this rank trains on: its share of data.train_batch_size.
        max_rounds: rounds at most (0: no limit).
        global_min: the minimum of an int over the ranks (identity on one rank).

    Returns:
        the rounds drawn; the batch's `groups_needed` groups as (round, group id), informative ones first in the order
        drawn, then, when the rounds ran out, uninformative ones in the order drawn; and the counts `rounds`,
        `generated`, `kept`, `dropped`, `padded` (groups, this rank).
    """
    rounds: list[R] = []
    kept: list[Pick] = []
    spare: list[Pick] = []
    counts = {"rounds": 0, "generated": 0, "kept": 0, "dropped": 0, "padded": 0}
    while True:
        rounds.append(next_round())
        number = counts["rounds"]
        counts["rounds"] += 1
        keep = informative_of(rounds[-1])
        counts["generated"] += len(keep)
        good = [uid for uid, k in keep.items() if k][: groups_needed - counts["kept"]]
        bad = [uid for uid, k in keep.items() if not k]
        counts["dropped"] += len(bad)
        counts["kept"] += len(good)
        kept += [(number, uid) for uid in good]
        spare += [(number, uid) for uid in bad]
        if global_min(counts["kept"]) >= groups_needed or 0 < max_rounds <= counts["rounds"]:
            break
    missing = groups_needed - counts["kept"]
    if missing > len(spare):
        raise RuntimeError(
            f"dynamic sampling: {counts['generated']} groups generated in {counts['rounds']} "
            f"rounds, fewer than the {groups_needed} this rank trains on"
        )
    if missing > 0:
        kept += spare[:missing]
        counts["padded"] = missing
    return rounds, kept, counts


def fill_with_informative_groups(
    next_round: Callable[[], tuple[RolloutGroup, dict[str, float]]],
    metric_of: Callable[[RolloutGroup], torch.Tensor],
    groups_needed: int,
    max_rounds: int,
    global_min: Callable[[int], int],
    pad_token_id: int,
) -> tuple[RolloutGroup, dict[str, float], dict[str, int]]:
    """Run `next_round` until this rank (and, through `global_min`, every rank) holds `groups_needed` groups.

    Args:
        next_round: generates and scores one round; returns the scored group and its reward metrics.
        metric_of: `(samples,)` the filter metric of a scored group.
        groups_needed, max_rounds, global_min: as `informative_rounds`.

    Returns:
        the batch (exactly `groups_needed` groups, informative ones first), the reward metrics averaged over rounds,
        and the counts of `informative_rounds`.
    """
    rounds, picks, counts = informative_rounds(
        next_round,
        lambda scored: informative_groups(metric_of(scored[0]), scored[0].uid),
        groups_needed,
        max_rounds,
        global_min,
    )
    batch = concat_groups([_group(rounds[number][0], uid) for number, uid in picks], pad_token_id)
    round_metrics = [metrics for _, metrics in rounds]
    names = sorted({k for m in round_metrics for k in m})
    mean = {k: sum(m.get(k, 0.0) for m in round_metrics) / len(round_metrics) for k in names}
    return batch, mean, counts


def _group(scored: RolloutGroup, uid: Hashable) -> RolloutGroup:
    """The samples of group `uid`, in batch order."""
    return select_rows(scored, [row for row, u in enumerate(scored.uid) if u == uid])


FILTER_COUNTS = ("generated", "kept", "dropped", "padded")


def filter_metric(group: RolloutGroup, metric: str) -> torch.Tensor:
    """`(samples,)` the value `algorithm.filter_groups.metric` names, for a scored group (see the schema)."""
    if metric == "score":
        return torch.tensor(group.extras["task_score"], dtype=torch.float64)
    if metric == "acc":
        acc = group.extras.get("acc")
        if acc is None or any(a is None for a in acc):
            raise RuntimeError(
                "algorithm.filter_groups.metric=acc needs a reward function that returns a dict with an 'acc' field "
                "for every sample; the built-in rules return a plain score: use metric=score"
            )
        return torch.tensor([float(a) for a in acc], dtype=torch.float64)
    if metric in ("seq_reward", "seq_final_reward"):  # no in-reward KL before filtering (validation refuses it)
        return group.batch["token_level_scores"].sum(dim=1).double()
    raise ValueError(f"unknown filter metric {metric!r}")
