"""`app.trainer.weight_sync.rollout_payload`: which `serve.types` payload one sync sends, for each model and
`lora_sync`, carrying exactly what the engine gave."""

from __future__ import annotations

import torch

from app.trainer.weight_sync import rollout_payload
from serve.types import FullWeights, LoraAdapter, MergedLora


class StubEngine:
    """Records which engine call built the payload and with which dtype / merge flag; hands out fixed tensors."""

    def __init__(self, has_adapter: bool):
        self.has_adapter = has_adapter
        self.calls: list[tuple] = []
        self.stream = [("model.norm.weight", torch.tensor([1.0, 2.0])), ("model.embed_tokens.weight", torch.ones(3, 2))]
        self.adapter_config = {"r": 1, "lora_alpha": 2}
        self.adapter_tensors = {"base_model.model.x.lora_A.weight": torch.tensor([[3.0, 4.0]])}

    def get_per_tensor_param(self, dtype=None, merge_lora=False):
        self.calls.append(("stream", dtype, merge_lora))
        return iter(self.stream)

    def lora_adapter_state(self, dtype=None):
        self.calls.append(("adapter", dtype))
        return self.adapter_config, self.adapter_tensors


def _is_the_engine_stream(pairs, engine: StubEngine) -> bool:
    """The engine's very (name, tensor) pairs, in its order, neither copied nor converted."""
    return all(got is sent for got, sent in zip(list(pairs), engine.stream, strict=True))


def test_full_fine_tuning_streams_every_weight_in_the_rollout_dtype(tmp_path):
    engine = StubEngine(has_adapter=False)
    payload = rollout_payload(engine, lora_sync="merged", model_path=str(tmp_path), dtype=torch.bfloat16)
    assert isinstance(payload, FullWeights) and not isinstance(payload.tensors, dict)  # a stream, read once
    assert engine.calls == [("stream", torch.bfloat16, False)]
    assert _is_the_engine_stream(payload.tensors, engine)


def test_adapter_sync_sends_the_adapter_in_the_rollout_dtype(tmp_path):
    engine = StubEngine(has_adapter=True)
    payload = rollout_payload(engine, lora_sync="adapter", model_path=str(tmp_path), dtype=torch.bfloat16)
    assert isinstance(payload, LoraAdapter)
    assert payload.adapter_config is engine.adapter_config and payload.tensors is engine.adapter_tensors
    assert engine.calls == [("adapter", torch.bfloat16)]


def test_merged_sync_sends_the_float32_adapter_for_the_replicas_to_fold(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"")  # only its presence is looked at here
    engine = StubEngine(has_adapter=True)
    payload = rollout_payload(engine, lora_sync="merged", model_path=str(tmp_path), dtype=torch.bfloat16)
    assert isinstance(payload, MergedLora) and payload.dtype == "bfloat16"
    assert payload.adapter_config is engine.adapter_config and payload.tensors is engine.adapter_tensors
    assert engine.calls == [("adapter", None)]  # None: the engine's own float32, not the rollout dtype


def test_merged_sync_names_the_dtype_the_replicas_round_the_fold_to(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"")
    engine = StubEngine(has_adapter=True)
    payload = rollout_payload(
        engine, lora_sync="merged", model_path=str(tmp_path), dtype=torch.float32, fold_round_to=torch.bfloat16
    )
    assert isinstance(payload, MergedLora) and (payload.dtype, payload.round_to) == ("float32", "bfloat16")
    assert rollout_payload(engine, lora_sync="merged", model_path=str(tmp_path), dtype=torch.float32).round_to is None


def test_merged_sync_on_the_trainer_rounds_the_weights_the_adapter_wraps(tmp_path):
    """Without safetensors to fold into, the trainer's merged stream is rounded as a replica's fold would be: the
    weight the adapter wraps (`x.weight`, from its `x.lora_A` and `x.lora_B`) goes through bf16, the others pass
    untouched."""
    engine = StubEngine(has_adapter=True)
    fine = torch.tensor([1 + 2.0**-9, 1 + 3 * 2.0**-7])  # bf16 next to 1.0: steps of 2**-7, so 2**-9 is dropped
    engine.stream = [("x.weight", fine), ("model.norm.weight", fine.clone())]
    engine.adapter_tensors["base_model.model.x.lora_B.weight"] = torch.tensor([[1.0]])

    payload = rollout_payload(
        engine, lora_sync="merged", model_path=str(tmp_path), dtype=torch.float32, fold_round_to=torch.bfloat16
    )

    sent = dict(payload.tensors)
    assert sent["x.weight"].dtype == torch.float32 and sent["x.weight"].tolist() == [1.0, 1 + 3 * 2.0**-7]
    assert sent["model.norm.weight"] is engine.stream[1][1]
    assert engine.calls == [("stream", torch.float32, True), ("adapter", None)]


def test_merged_sync_without_safetensors_to_fold_into_merges_on_the_trainer(tmp_path):
    (tmp_path / "pytorch_model.bin").write_bytes(b"")
    engine = StubEngine(has_adapter=True)
    payload = rollout_payload(engine, lora_sync="merged", model_path=str(tmp_path), dtype=torch.float32)
    assert isinstance(payload, FullWeights)
    assert engine.calls == [("stream", torch.float32, True)]
    assert _is_the_engine_stream(payload.tensors, engine)
