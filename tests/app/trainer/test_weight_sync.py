"""`app.trainer.weight_sync.rollout_payload`: which payload one sync sends, for each model and `lora_sync`."""

from __future__ import annotations

import torch

from app.engine import WeightSyncPayload
from app.trainer.weight_sync import rollout_payload
from serve.types import FullWeights, LoraAdapter, MergedLora


class StubEngine:
    """Records which engine call built the payload and with which dtype / merge flag."""

    def __init__(self, has_adapter: bool):
        self.has_adapter = has_adapter
        self.calls: list[tuple] = []

    def get_per_tensor_param(self, dtype=None, merge_lora=False):
        self.calls.append(("stream", dtype, merge_lora))
        return iter([("model.norm.weight", torch.ones(2, dtype=dtype))])

    def state_dict_for_sync(self, dtype=None, merge_lora=False):
        self.calls.append(("adapter", dtype, merge_lora))
        return WeightSyncPayload("lora", {"base_model.model.x.lora_A.weight": torch.ones(1, 2)}, {"r": 1})


def test_full_fine_tuning_streams_every_weight_in_the_rollout_dtype(tmp_path):
    engine = StubEngine(has_adapter=False)
    payload = rollout_payload(engine, lora_sync="merged", model_path=str(tmp_path), dtype=torch.bfloat16)
    assert isinstance(payload, FullWeights) and not isinstance(payload.tensors, dict)  # a stream, read once
    assert engine.calls == [("stream", torch.bfloat16, False)]


def test_adapter_sync_sends_the_adapter_in_the_rollout_dtype(tmp_path):
    engine = StubEngine(has_adapter=True)
    payload = rollout_payload(engine, lora_sync="adapter", model_path=str(tmp_path), dtype=torch.bfloat16)
    assert isinstance(payload, LoraAdapter) and payload.adapter_config == {"r": 1}
    assert engine.calls == [("adapter", torch.bfloat16, False)]


def test_merged_sync_sends_the_float32_adapter_for_the_replicas_to_fold(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"")  # only its presence is looked at here
    engine = StubEngine(has_adapter=True)
    payload = rollout_payload(engine, lora_sync="merged", model_path=str(tmp_path), dtype=torch.bfloat16)
    assert isinstance(payload, MergedLora) and payload.dtype == "bfloat16"
    assert engine.calls == [("adapter", None, False)]  # None: the engine's own float32, not the rollout dtype


def test_merged_sync_without_safetensors_to_fold_into_merges_on_the_trainer(tmp_path):
    (tmp_path / "pytorch_model.bin").write_bytes(b"")
    engine = StubEngine(has_adapter=True)
    payload = rollout_payload(engine, lora_sync="merged", model_path=str(tmp_path), dtype=torch.float32)
    assert isinstance(payload, FullWeights)
    assert engine.calls == [("stream", torch.float32, True)]
