"""Left-padded batches of prompts, ready for generation."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Sequence

import torch

from app.data.dataset import PromptRecord


@dataclass
class PromptBatch:
    """A batch of prompts. Tensors are left-padded to the longest prompt (or ``pad_to``).

    Tensors:
        input_ids: ``(batch, prompt_len)`` long, pad id on the left.
        attention_mask: ``(batch, prompt_len)`` long, 1 = real token (keep), 0 = padding.
        position_ids: ``(batch, prompt_len)`` long, 0.. on real tokens, 0 on padding.
    Per row (lists of length batch):
        raw_prompt_ids: prompt token ids without padding; raw_prompt: the chat messages;
        data_source, ground_truth, extra_info, ability: from the dataset;
        uid: unique id of the prompt in this run (responses to the same prompt share it);
        index: position of the prompt in the dataset.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    position_ids: torch.Tensor
    raw_prompt_ids: list[list[int]]
    raw_prompt: list[list[dict[str, str]]]
    data_source: list[str]
    ground_truth: list[Any]
    extra_info: list[dict[str, Any]]
    ability: list[str | None]
    uid: list[str]
    index: list[int]

    TENSOR_KEYS = ("input_ids", "attention_mask", "position_ids")

    def __len__(self) -> int:
        return len(self.uid)

    def tensors(self) -> dict[str, torch.Tensor]:
        return {k: getattr(self, k) for k in self.TENSOR_KEYS}

    def non_tensors(self) -> dict[str, list[Any]]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in self.TENSOR_KEYS}

    def rank_share(self, rank: int, world: int) -> "PromptBatch":
        """Rank `rank`'s contiguous share of `world` equal shares (the data-parallel split of a global batch)."""
        size = len(self) // world
        lo, hi = rank * size, (rank + 1) * size
        return PromptBatch(
            **{k: v[lo:hi] for k, v in self.tensors().items()}, **{k: v[lo:hi] for k, v in self.non_tensors().items()}
        )


def collate_prompts(
    records: Sequence[PromptRecord],
    indices: Sequence[int],
    uids: Sequence[str],
    pad_token_id: int,
    pad_to: int | None = None,
) -> PromptBatch:
    """Stack ``records`` into a left-padded PromptBatch. ``pad_to`` fixes the width (must be >= the longest prompt)."""
    if not records:
        raise ValueError("collate_prompts needs at least one record")
    longest = max(len(r.prompt_ids) for r in records)
    width = longest if pad_to is None else pad_to
    if width < longest:
        raise ValueError(f"pad_to={pad_to} is shorter than the longest prompt ({longest} tokens)")
    input_ids = torch.full((len(records), width), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(records), width), dtype=torch.long)
    for row, record in enumerate(records):
        n = len(record.prompt_ids)
        if n:
            input_ids[row, width - n :] = torch.tensor(record.prompt_ids, dtype=torch.long)
            attention_mask[row, width - n :] = 1
    position_ids = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)
    return PromptBatch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        raw_prompt_ids=[list(r.prompt_ids) for r in records],
        raw_prompt=[r.messages for r in records],
        data_source=[r.data_source for r in records],
        ground_truth=[r.ground_truth for r in records],
        extra_info=[r.extra_info for r in records],
        ability=[r.ability for r in records],
        uid=list(uids),
        index=list(indices),
    )
