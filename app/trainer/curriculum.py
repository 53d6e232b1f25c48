"""data.sampler in the loop: one order of prompts for every rank, and each trained batch handed to a sampler that
learns from it (verl's AbstractCurriculumSampler.update), as verl's single driver does.

Each rank draws its share of the same global batch from its own loader. A user's sampler may draw from a random
generator of its own, so with several ranks every rank takes rank 0's draws (RankZeroDraws), and only rank 0's
sampler learns, from every rank's samples of the step (SamplerBatch).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from app.data.custom_sampler import CustomBatchSampler, SamplerBatch
from app.data.sampler import BatchPosition
from app.trainer.collectives import RankGroup
from app.trainer.rollout_batch import REWARD_EXTRA, RolloutGroup

# the tensors a sampler's update sees, where the step made them (returns and values: estimators with a critic)
BATCH_TENSORS = (
    "responses",
    "response_mask",
    "token_level_scores",
    "token_level_rewards",
    "advantages",
    "returns",
    "values",
)


class RankZeroDraws(BatchPosition):
    """`inner`'s batches as rank 0 draws them, on every rank (ResumableBatchSampler's interface)."""

    def __init__(self, inner: CustomBatchSampler, ranks: RankGroup) -> None:
        self.inner, self.ranks = inner, ranks

    def __len__(self) -> int:
        return len(self.inner)

    def draw(self) -> tuple[int, int, list[int]]:
        """Collective: every rank calls it for every batch, in the same order."""
        if self.ranks.rank == 0:
            epoch, number, indices = self.inner.draw()
        else:
            epoch, number, indices = 0, 0, [0] * self.inner.batch_size
        epoch, number, *indices = self.ranks.from_rank0([epoch, number, *indices])
        self._epoch, self._batch_in_epoch = epoch, number + 1
        return epoch, number, indices

    def next_batch(self) -> list[int]:
        return self.draw()[2]

    def state_dict(self) -> dict[str, Any]:
        """Rank 0's is the one a checkpoint keeps."""
        return self.inner.state_dict() | {"epoch": self._epoch, "batch_in_epoch": self._batch_in_epoch}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inner.load_state_dict(state)
        self._epoch, self._batch_in_epoch = int(state["epoch"]), int(state["batch_in_epoch"])


class Curriculum:
    """The loop's link to data.sampler: `share_draws` once the ranks are known, `learn` after each update."""

    def __init__(self, loader: Any, ranks: RankGroup) -> None:
        self.ranks = ranks
        self.sampler = loader.sampler if isinstance(loader.sampler, CustomBatchSampler) else None
        if self.sampler is not None and ranks.world > 1:
            loader.sampler = RankZeroDraws(self.sampler, ranks)

    @property
    def learns(self) -> bool:
        return self.sampler is not None and self.sampler.learns

    def learn(self, group: RolloutGroup, step: int, version: int) -> None:
        """Hand the step's trained samples (every rank's) to the sampler's `update`; collective where it learns."""
        if not self.learns:
            return
        batch = sampler_batch(group, self.ranks, step, version)
        if self.ranks.rank == 0:
            self.sampler.update(batch)


def sampler_batch(group: RolloutGroup, ranks: RankGroup, step: int, version: int) -> SamplerBatch:
    """Every rank's samples of `group` as one SamplerBatch, in rank order (collective)."""
    tensors = {key: ranks.gather_rows(group.batch[key]) for key in BATCH_TENSORS if key in group.batch}
    mine: dict[str, list[Any]] = {
        "uid": group.uid,
        "dataset_index": group.dataset_index,
        "index": [(info or {}).get("index", 0) for info in group.extra_info],
        "data_source": group.data_source,
        "task_score": [float(v) for v in group.extras.get("task_score", [])],
    }
    for key, values in group.extras.items():
        if key.startswith(REWARD_EXTRA):
            mine[key[len(REWARD_EXTRA) :]] = list(values)
    parts = [json.loads(text) for text in ranks.gather_text(json.dumps(mine, default=_plain))]
    columns = {key: [v for part in parts for v in part.get(key, [])] for key in mine}
    rows = len(columns["uid"])
    non_tensor = {key: _array(values) for key, values in columns.items() if len(values) == rows}
    return SamplerBatch(tensors, non_tensor, {"global_steps": step, "policy_version": version})


def _plain(value: Any) -> Any:
    """What json cannot write as is: numpy / torch scalars as numbers, anything else as its text."""
    if hasattr(value, "item"):
        return value.item()
    return str(value)


def _array(values: list[Any]) -> np.ndarray:
    if values and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return np.asarray(values)
    array = np.empty(len(values), dtype=object)
    array[:] = values
    return array
