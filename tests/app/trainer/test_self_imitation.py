"""`app.trainer.self_imitation.ReplayBuffer`: which answers it keeps, how it trims and draws them, its checkpoint."""

from __future__ import annotations

import pytest
import torch

from app.batch import TensorBatch
from app.trainer.self_imitation import ReplayBuffer, trimmed_row

PAD = 0


def rollout_batch(rows: list[tuple[list[int], list[int]]]) -> TensorBatch:
    """Rows of (prompt ids, response ids), prompts left-padded and responses right-padded with PAD, as the loop's."""
    p = max(len(prompt) for prompt, _ in rows)
    r = max(len(response) for _, response in rows)
    ids = torch.full((len(rows), p + r), PAD)
    mask = torch.zeros(len(rows), p + r, dtype=torch.long)
    for i, (prompt, response) in enumerate(rows):
        ids[i, p - len(prompt) : p + len(response)] = torch.tensor(prompt + response)
        mask[i, p - len(prompt) : p + len(response)] = 1
    return TensorBatch(
        {
            "input_ids": ids,
            "attention_mask": mask,
            "position_ids": (mask.cumsum(1) - 1).clamp(min=0),
            "responses": ids[:, p:].clone(),
            "response_mask": mask[:, p:].clone(),
            "advantages": torch.ones(len(rows), r),  # not a row key: left behind
        }
    )


BATCH = rollout_batch([([11, 12], [21]), ([13], [22, 23, 24]), ([14, 15, 16], [25, 26])])


def test_a_trimmed_row_is_its_prompt_and_response_without_padding():
    row = trimmed_row(BATCH, 1)  # prompt [13] padded left by 2, response [22, 23, 24] not padded
    assert row["input_ids"].tolist() == [[13, 22, 23, 24]]
    assert row["responses"].tolist() == [[22, 23, 24]] and row["response_mask"].tolist() == [[1, 1, 1]]
    assert row["position_ids"].tolist() == [[0, 1, 2, 3]]
    assert set(row.keys()) == {"input_ids", "attention_mask", "position_ids", "responses", "response_mask"}


def test_a_multi_turn_row_keeps_its_tool_tokens_masked_out_of_the_response():
    batch = rollout_batch([([11], [21, 90, 91, 22]), ([12], [23])])
    batch["response_mask"][0] = torch.tensor([1, 0, 0, 1])  # 90, 91: a tool's output, not the policy's
    row = trimmed_row(batch, 0)
    assert row["responses"].tolist() == [[21, 90, 91, 22]] and row["response_mask"].tolist() == [[1, 0, 0, 1]]


def test_only_answers_reaching_min_score_are_kept_and_only_the_latest_capacity():
    buffer = ReplayBuffer(capacity=2, min_score=1.0)
    assert buffer.add(BATCH, [1.0, 0.5, 1.2]) == 2  # rows 0 and 2
    assert [row["responses"][0, 0].item() for row in buffer.rows] == [21, 25]
    assert buffer.add(BATCH, [0.0, 1.0, 0.0]) == 1  # row 1 joins; the oldest (21) leaves
    assert [row["responses"][0, 0].item() for row in buffer.rows] == [25, 22]
    with pytest.raises(ValueError, match="2 scores for 3 rows"):
        buffer.add(BATCH, [1.0, 1.0])


def test_a_draw_is_one_padded_batch_flagged_replayed_and_the_same_for_the_same_step():
    buffer = ReplayBuffer(capacity=8, min_score=0.0)
    buffer.add(BATCH, [1.0, 1.0, 1.0])
    drawn = buffer.sample(2, step=5)
    assert drawn["replayed"].tolist() == [1.0, 1.0]
    # re-padded together: each row's response starts at the same column, and its real tokens are intact
    firsts = {tuple(r[m.bool()].tolist()) for r, m in zip(drawn["responses"], drawn["response_mask"])}
    assert len(firsts) == 2 and firsts <= {(21,), (22, 23, 24), (25, 26)}
    assert torch.equal(buffer.sample(2, step=5)["input_ids"], drawn["input_ids"])
    assert buffer.sample(0, step=5) is None
    with pytest.raises(ValueError, match="4 answers asked, 3 kept"):
        buffer.sample(4, step=5)


def test_the_state_round_trips_through_a_weights_only_load(tmp_path):
    buffer = ReplayBuffer(capacity=8, min_score=1.0)
    buffer.add(BATCH, [1.0, 0.0, 1.0])
    torch.save(buffer.state_dict(), tmp_path / "replay.pt")
    resumed = ReplayBuffer(capacity=8, min_score=1.0)
    resumed.load_state_dict(torch.load(tmp_path / "replay.pt", weights_only=True))
    assert len(resumed) == 2
    assert torch.equal(resumed.sample(2, step=3)["input_ids"], buffer.sample(2, step=3)["input_ids"])
