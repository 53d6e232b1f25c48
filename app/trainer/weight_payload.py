"""What one weight sync sends to the rollout service, by the engine's model and `rollout.lora_sync`.

- full fine-tuning: every weight, streamed one gathered tensor at a time (`FullWeights`);
- LoRA with `lora_sync=adapter`: the adapter alone, in the rollout dtype (`LoraAdapter`; vLLM applies it with its LoRA
  kernels);
- LoRA with `lora_sync=merged`: the adapter alone, in float32 (`MergedLora`); each replica folds it into the base
  weights of its own model folder (`serve.lora_fold`), so a few MB travel instead of every merged weight (540 MB for
  SmolLM2-135M in fp32). A model folder without safetensors files has nothing to fold into: the trainer then merges
  and streams full weights itself, as vLLM would receive them either way.

Every rank calls `rollout_payload` (the gathers are collective); rank 0's tensors are the payload.
"""
from __future__ import annotations

from typing import Union

import torch

from app.engine import BaseEngine
from serve.lora_fold import checkpoint_files
from serve.types import FullWeights, LoraAdapter, MergedLora


def rollout_payload(engine: BaseEngine, *, lora_sync: str, model_path: str, dtype: torch.dtype
                    ) -> Union[FullWeights, LoraAdapter, MergedLora]:
    if not engine.has_adapter:
        return FullWeights(tensors=engine.get_per_tensor_param(dtype=dtype))
    if lora_sync == "adapter":
        adapter = engine.state_dict_for_sync(dtype=dtype)
        return LoraAdapter(adapter_config=adapter.adapter_config, tensors=adapter.tensors)
    if checkpoint_files(model_path):
        adapter = engine.state_dict_for_sync(dtype=None)  # the trainer's own float32: the fold starts from them
        return MergedLora(adapter_config=adapter.adapter_config, tensors=adapter.tensors,
                          dtype=str(dtype).removeprefix("torch."))
    return FullWeights(tensors=engine.get_per_tensor_param(dtype=dtype, merge_lora=True))
