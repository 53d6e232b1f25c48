"""The answers self-imitation replays (`actor_rollout_ref.actor.self_imitation`; the loss is `algos.imitation`).

Each rank keeps its latest samples whose task score reached `min_score`, one row each with its padding trimmed, and
hands some to each later update. A rank keeps what its own share of the prompts drew; the ranks agree only on how
many rows an update replays (the engines' micro-batches must match), which the learner settles.
"""

from __future__ import annotations

import random
from typing import Optional, Sequence

import torch

from app.batch import TensorBatch, concat_padded

# what a replayed row needs: the model's inputs and which of its tokens are the policy's
ROW_KEYS = ("input_ids", "attention_mask", "position_ids", "responses", "response_mask")


class ReplayBuffer:
    """The latest `capacity` answers that scored at least `min_score`, oldest first."""

    def __init__(self, capacity: int, min_score: float) -> None:
        if capacity < 1:
            raise ValueError(f"self_imitation.buffer_size must be >= 1, got {capacity}")
        self.capacity, self.min_score = capacity, min_score
        self.rows: list[TensorBatch] = []

    def __len__(self) -> int:
        return len(self.rows)

    def add(self, batch: TensorBatch, task_scores: Sequence[float]) -> int:
        """Keeps the rows of `batch` whose task score (one per row) reaches `min_score`; returns how many."""
        if len(task_scores) != len(batch):
            raise ValueError(f"ReplayBuffer.add: {len(task_scores)} scores for {len(batch)} rows")
        kept = [row for row, score in enumerate(task_scores) if score >= self.min_score]
        self.rows.extend(trimmed_row(batch, row) for row in kept)
        del self.rows[: max(0, len(self.rows) - self.capacity)]
        return len(kept)

    def sample(self, count: int, step: int) -> Optional[TensorBatch]:
        """`count` different answers, drawn with a generator seeded by `step` (a resumed run draws what the first run
        would have), as one batch with a `replayed` flag of ones; None for none."""
        if count > len(self.rows):
            raise ValueError(f"ReplayBuffer.sample: {count} answers asked, {len(self.rows)} kept")
        if count <= 0:
            return None
        picked = random.Random(step).sample(self.rows, count)
        batch = concat_padded(picked, pad_token_id=0)  # pads are masked out
        batch["replayed"] = torch.ones(count)
        return batch

    def state_dict(self) -> dict[str, list[torch.Tensor]]:
        """Plain tensors per key (the rows differ in width), for `torch.load(weights_only=True)`."""
        return {key: [row[key][0] for row in self.rows] for key in ROW_KEYS}

    def load_state_dict(self, state: dict[str, list[torch.Tensor]]) -> None:
        counts = {len(state[key]) for key in ROW_KEYS}
        if len(counts) != 1:
            raise ValueError(f"replay buffer state: the keys hold different row counts {sorted(counts)}")
        rows = [TensorBatch({key: state[key][i].unsqueeze(0) for key in ROW_KEYS}) for i in range(counts.pop())]
        self.rows = rows[max(0, len(rows) - self.capacity) :]


def trimmed_row(batch: TensorBatch, row: int) -> TensorBatch:
    """Row `row` of a rollout batch (`ROW_KEYS`), without the prompt's left padding or the response's right padding.
    The attention mask finds both ends: a multi-turn response masks tool tokens out of `response_mask` only."""
    prompt_width = batch["input_ids"].shape[1] - batch["responses"].shape[1]
    attention = batch["attention_mask"][row]
    prompt_len = int(attention[:prompt_width].sum())
    response_real = attention[prompt_width:].nonzero()
    response_len = int(response_real[-1]) + 1 if len(response_real) else 0
    full, response = slice(prompt_width - prompt_len, prompt_width + response_len), slice(0, response_len)
    columns = dict.fromkeys(("input_ids", "attention_mask", "position_ids"), full)
    columns |= dict.fromkeys(("responses", "response_mask"), response)
    return TensorBatch({key: batch[key][row, columns[key]].unsqueeze(0).clone() for key in ROW_KEYS})
