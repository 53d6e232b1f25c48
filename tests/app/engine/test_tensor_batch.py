import pytest
import torch

from app.batch import TensorBatch


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
