"""DAPO's dynamic sampling in the loop: rounds of generate + score until the batch holds enough informative groups.

verl's `algorithm.filter_groups`: each round takes the next `data.gen_batch_size` prompts (this rank's share), keeps
the groups whose samples disagree on the filter metric (`algos.group_filter`) and drops the rest, until every rank
holds its share of `data.train_batch_size` groups. All ranks run the same number of rounds, so their data loaders stay
in step and the collectives inside a round (metric reductions) match. Past `max_num_gen_batches` rounds verl stops
the run; here the step goes on, filling the batch with uninformative groups (they add no policy gradient) and
counting them, so a hard stretch of data slows learning instead of ending the job.
"""

from __future__ import annotations

from typing import Callable

import torch

from algos.group_filter import informative_groups
from app.trainer.rollout_batch import RolloutGroup, concat_groups, select_rows

Round = Callable[[], tuple[RolloutGroup, dict[str, float]]]


def fill_with_informative_groups(
    next_round: Round,
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
        groups_needed: groups (prompts) this rank trains on: its share of data.train_batch_size.
        max_rounds: rounds at most (0: no limit).
        global_min: the minimum of an int over the ranks (identity on one rank).

    Returns:
        the batch (exactly `groups_needed` groups, informative ones first), the reward metrics averaged over rounds,
        and the counts `rounds`, `generated`, `kept`, `dropped`, `padded` (groups, this rank).
    """
    kept: list[RolloutGroup] = []
    spare: list[RolloutGroup] = []
    round_metrics: list[dict[str, float]] = []
    counts = {"rounds": 0, "generated": 0, "kept": 0, "dropped": 0, "padded": 0}
    while True:
        group, metrics = next_round()
        round_metrics.append(metrics)
        counts["rounds"] += 1
        keep = informative_groups(metric_of(group), group.uid)
        counts["generated"] += len(keep)
        good = [uid for uid, k in keep.items() if k][: groups_needed - counts["kept"]]
        bad = [uid for uid, k in keep.items() if not k]
        counts["dropped"] += len(bad)
        counts["kept"] += len(good)
        kept.append(_groups(group, good))
        spare.append(_groups(group, bad))
        if global_min(counts["kept"]) >= groups_needed or 0 < max_rounds <= counts["rounds"]:
            break
    missing = groups_needed - counts["kept"]
    if missing > 0:
        filler = concat_groups(spare, pad_token_id) if any(len(s.uid) for s in spare) else None
        uids = list(dict.fromkeys(filler.uid))[:missing] if filler is not None else []
        if len(uids) < missing:
            raise RuntimeError(
                f"dynamic sampling: {counts['generated']} groups generated in {counts['rounds']} "
                f"rounds, fewer than the {groups_needed} this rank trains on"
            )
        kept.append(_groups(filler, uids))
        counts["padded"] = missing
    names = sorted({k for m in round_metrics for k in m})
    mean = {k: sum(m.get(k, 0.0) for m in round_metrics) / len(round_metrics) for k in names}
    return concat_groups([g for g in kept if len(g.uid)], pad_token_id), mean, counts


def _groups(group: RolloutGroup, uids: list) -> RolloutGroup:
    """The samples of the groups `uids`, in batch order."""
    wanted = set(uids)
    return select_rows(group, [row for row, uid in enumerate(group.uid) if uid in wanted])


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
