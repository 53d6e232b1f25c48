"""Batches of prompts from a PromptDataset, in a resumable order."""

from __future__ import annotations

from typing import Any, Iterator

from app.data.collate import PromptBatch, collate_prompts
from app.data.dataset import PromptDataset
from app.data.sampler import ResumableBatchSampler


def pad_token_id_of(tokenizer: Any) -> int:
    """The tokenizer's pad id, or its EOS id when it has no pad token (padding is masked out either way)."""
    pad = getattr(tokenizer, "pad_token_id", None)
    if pad is None:
        pad = getattr(tokenizer, "eos_token_id", None)
    if pad is None:
        raise ValueError("tokenizer has neither a pad nor an EOS token to pad prompts with")
    return int(pad)


class PromptDataLoader:
    """Iterates PromptBatches; ``state_dict()`` after a step and ``load_state_dict()`` on resume continue with the next
    unseen batch.

    ``for batch in loader`` yields the rest of the current epoch; ``next_batch()`` runs on across epochs.
    ``uid`` is ``"e{epoch}-b{batch}-{row}"``: unique in a run and the same on a resumed run.
    """

    def __init__(
        self,
        dataset: PromptDataset,
        batch_size: int,
        pad_token_id: int,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = True,
        pad_to: int | None = None,
        batch_sampler: Any = None,
    ):
        """`batch_sampler`: where the batches' indices come from in place of data.shuffle's order (a
        CustomBatchSampler: data.sampler's class); it has ResumableBatchSampler's draw / state_dict interface."""
        self.dataset = dataset
        self.pad_token_id = pad_token_id
        self.pad_to = pad_to
        if batch_sampler is None:
            batch_sampler = ResumableBatchSampler(
                len(dataset), batch_size, shuffle=shuffle, seed=seed, drop_last=drop_last
            )
        self.sampler = batch_sampler

    def __len__(self) -> int:
        """Batches per epoch."""
        return len(self.sampler)

    @property
    def epoch(self) -> int:
        return self.sampler.epoch

    def next_batch(self) -> PromptBatch:
        epoch, batch_number, indices = self.sampler.draw()
        uids = [f"e{epoch}-b{batch_number}-{row}" for row in range(len(indices))]
        records = [self.dataset[i] for i in indices]
        return collate_prompts(records, indices, uids, self.pad_token_id, self.pad_to)

    def __iter__(self) -> Iterator[PromptBatch]:
        for _ in range(len(self.sampler) - self.sampler.batch_in_epoch):
            yield self.next_batch()

    def state_dict(self) -> dict[str, Any]:
        return {"sampler": self.sampler.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.sampler.load_state_dict(state["sampler"])
