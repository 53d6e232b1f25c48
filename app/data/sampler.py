"""Batches of dataset indices, in an order that can be saved and resumed exactly.

Epoch ``e`` visits the dataset in ``permutation(seed + e)`` (or in file order without shuffling). The state is just
(epoch, batches already taken in that epoch), so a resumed run takes the next unseen batch: nothing repeats and
nothing is skipped, across epoch boundaries too.
"""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np

from app.data.errors import DataError


class BatchPosition:
    """Where a batch sampler stands (its subclasses move `_epoch` and `_batch_in_epoch` as they draw)."""

    _epoch = 0
    _batch_in_epoch = 0

    @property
    def epoch(self) -> int:
        """The epoch of the batches being drawn."""
        return self._epoch

    @property
    def batch_in_epoch(self) -> int:
        """How many batches of the current epoch were already taken."""
        return self._batch_in_epoch


class ResumableBatchSampler(BatchPosition):
    """Yields lists of dataset indices, ``batch_size`` at a time.

    Args:
        dataset_size: number of prompts.
        batch_size: prompts per batch (data.train_batch_size).
        shuffle: reshuffle every epoch from ``seed + epoch``; otherwise file order.
        seed: data.seed.
        drop_last: leave out the last, smaller batch of each epoch (keeps every step the same size).
    """

    def __init__(self, dataset_size: int, batch_size: int, shuffle: bool = True, seed: int = 0, drop_last: bool = True):
        if batch_size <= 0:
            raise DataError(f"batch size must be positive, got {batch_size}")
        if dataset_size <= 0:
            raise DataError("dataset is empty: nothing to sample")
        if drop_last and dataset_size < batch_size:
            raise DataError(
                f"dataset has {dataset_size} prompts, fewer than one batch of {batch_size} (data.train_batch_size)"
            )
        self.dataset_size = dataset_size
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self._epoch = 0
        self._batch_in_epoch = 0
        self._order_cache: tuple[int, np.ndarray] | None = None

    def __len__(self) -> int:
        """Batches per epoch."""
        if self.drop_last:
            return self.dataset_size // self.batch_size
        return -(-self.dataset_size // self.batch_size)

    def epoch_order(self, epoch: int) -> np.ndarray:
        """``(dataset_size,)`` the visiting order of ``epoch``; the same for the same seed and epoch."""
        if self._order_cache is not None and self._order_cache[0] == epoch:
            return self._order_cache[1]
        if self.shuffle:
            order = np.random.default_rng(self.seed + epoch).permutation(self.dataset_size)
        else:
            order = np.arange(self.dataset_size)
        self._order_cache = (epoch, order)
        return order

    def draw(self) -> tuple[int, int, list[int]]:
        """(epoch, batch number in it, indices) of the next batch."""
        epoch, number = self._epoch, self._batch_in_epoch
        return epoch, number, self.next_batch()

    def next_batch(self) -> list[int]:
        """The next batch of indices; moves on to the next epoch after the last batch of this one."""
        start = self._batch_in_epoch * self.batch_size
        batch = self.epoch_order(self._epoch)[start : start + self.batch_size].tolist()
        self._batch_in_epoch += 1
        if self._batch_in_epoch >= len(self):
            self._epoch += 1
            self._batch_in_epoch = 0
        return batch

    def __iter__(self) -> Iterator[list[int]]:
        """The remaining batches of the current epoch (all of them at an epoch start)."""
        for _ in range(len(self) - self._batch_in_epoch):
            yield self.next_batch()

    def state_dict(self) -> dict[str, Any]:
        return {
            "epoch": self._epoch,
            "batch_in_epoch": self._batch_in_epoch,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "dataset_size": self.dataset_size,
            "batch_size": self.batch_size,
            "drop_last": self.drop_last,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a saved state. The data and batching must be the same as when it was saved, otherwise the
        saved position would point at different prompts; that is an error rather than a silent reshuffle."""
        for key in ("seed", "shuffle", "dataset_size", "batch_size", "drop_last"):
            if key in state and state[key] != getattr(self, key):
                raise DataError(
                    f"cannot resume data order: checkpoint has {key}={state[key]!r}, this run has "
                    f"{getattr(self, key)!r}; resuming needs the same dataset and batching"
                )
        epoch, batch = int(state["epoch"]), int(state["batch_in_epoch"])
        if epoch < 0 or not 0 <= batch < len(self):
            raise DataError(f"invalid sampler state epoch={epoch} batch_in_epoch={batch} ({len(self)} batches/epoch)")
        self._epoch, self._batch_in_epoch = epoch, batch
