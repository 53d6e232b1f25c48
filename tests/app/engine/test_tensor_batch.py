import pytest
import torch

from app.batch import TensorBatch, concat_padded


def _batch():
    return TensorBatch({"a": torch.arange(6).view(6, 1), "b": torch.arange(12).view(6, 2)}, meta={"temperature": 0.7})


def test_split_concat_round_trip_keeps_rows_and_meta():
    batch = _batch()
    parts = batch.split(4)
    assert [len(p) for p in parts] == [4, 2]  # the last piece keeps the remainder
    back = TensorBatch.concat(parts)
    assert torch.equal(back["a"], batch["a"]) and torch.equal(back["b"], batch["b"])
    assert back.meta == {"temperature": 0.7}


def test_index_select_and_chunk():
    batch = _batch()
    picked = batch.index([5, 0]).select(["b"])
    assert picked.keys() == ["b"]
    assert picked["b"].tolist() == [[10, 11], [0, 1]]
    assert [p["a"].flatten().tolist() for p in batch.chunk(3)] == [[0, 1], [2, 3], [4, 5]]
    with pytest.raises(ValueError, match="not divisible"):
        batch.chunk(4)


def test_mismatched_batch_sizes_and_missing_keys_are_reported():
    with pytest.raises(ValueError, match="disagree"):
        TensorBatch({"a": torch.zeros(2), "b": torch.zeros(3)})
    with pytest.raises(KeyError, match="missing keys \\['c'\\]"):
        _batch().select(["a", "c"])
    with pytest.raises(ValueError, match="batch size 2"):
        _batch()["c"] = torch.zeros(2)


def _rows(prompt_width: int, response_width: int, rows: int, value: int) -> TensorBatch:
    full, response = prompt_width + response_width, response_width
    return TensorBatch(
        {
            "input_ids": torch.full((rows, full), value),
            "attention_mask": torch.ones(rows, full, dtype=torch.long),
            "responses": torch.full((rows, response), value),
            "response_mask": torch.ones(rows, response, dtype=torch.long),
            "advantages": torch.full((rows, response), float(value)),
        }
    )


def test_concat_padded_pads_prompts_left_responses_right_and_fills_missing_keys():
    short = _rows(1, 2, 1, value=7)  # prompt 1 token, response 2
    long = _rows(3, 1, 1, value=8).select(["input_ids", "attention_mask", "responses", "response_mask"])
    long["replayed"] = torch.ones(1)
    both = concat_padded([short, long], pad_token_id=5, fill_missing=True)
    # P = 3, R = 2: the short row gains 2 pad columns on the left, the long one 1 on the right
    assert both["input_ids"].tolist() == [[5, 5, 7, 7, 7], [8, 8, 8, 8, 5]]
    assert both["attention_mask"].tolist() == [[0, 0, 1, 1, 1], [1, 1, 1, 1, 0]]
    assert both["response_mask"].tolist() == [[1, 1], [1, 0]]
    assert both["advantages"].tolist() == [[7.0, 7.0], [0.0, 0.0]]  # missing from the long row: zeros
    assert both["replayed"].tolist() == [0.0, 1.0]
    with pytest.raises(ValueError, match="a batch has keys"):
        concat_padded([short, long], pad_token_id=5)
