"""The reference policy: log-probs of the sampled responses under the frozen initial policy.

Full fine-tuning: its own inference-only engine. LoRA: the actor's engine with the adapter disabled (the base
model is the reference), so no second copy of the weights exists. With ``ref.sync_ref_model`` (TR-DPO, TRL's
GRPOConfig) a full-fine-tuning reference moves toward the actor now and then (``move_toward``).
"""

from __future__ import annotations

import contextlib
import itertools
from typing import Optional

import torch

from app.batch import TensorBatch
from app.engine.base import BaseEngine, StepContext

_MODEL_INPUTS = ("input_ids", "attention_mask", "position_ids", "responses", "response_mask")


class Reference:
    def __init__(
        self,
        engine: BaseEngine,
        *,
        disable_adapter: bool = False,
        log_prob_micro_batch_size: Optional[int] = None,
        log_prob_use_dynamic_bsz: Optional[bool] = None,
        log_prob_max_token_len: Optional[int] = None,
        log_prob_max_token_len_key: Optional[str] = None,
    ) -> None:
        """``disable_adapter``: ``engine`` is the actor's LoRA engine; run it without the adapter.

        ``log_prob_*``: the micro-batching of the pass (verl ``ref.log_prob_micro_batch_size_per_gpu``,
        ``log_prob_use_dynamic_bsz``, ``log_prob_max_token_len_per_gpu``); None: the engine's."""
        if disable_adapter and not engine.has_adapter:
            raise ValueError("Reference(disable_adapter=True) needs a LoRA engine (model.lora_rank > 0)")
        self.engine = engine
        self.disable_adapter = disable_adapter
        self.micro_batch_size = log_prob_micro_batch_size
        self.use_dynamic_bsz = log_prob_use_dynamic_bsz
        self.max_token_len = log_prob_max_token_len
        self.max_token_len_key = log_prob_max_token_len_key if log_prob_max_token_len else None  # for errors

    def compute_ref_log_prob(self, batch: TensorBatch) -> TensorBatch:
        """``ref_log_prob (b, R)`` at ``batch.meta['temperature']`` (default 1), 0 at padding."""
        inputs = batch.select(_MODEL_INPUTS, strict=False)
        ctx = StepContext(
            temperature=float(batch.meta.get("temperature", 1.0)),
            micro_batch_size=self.micro_batch_size,
            use_dynamic_bsz=self.use_dynamic_bsz,
            max_token_len=self.max_token_len,
            max_token_len_key=self.max_token_len_key,
        )
        adapter_off = self.engine.disable_adapter() if self.disable_adapter else contextlib.nullcontext()
        with torch.no_grad(), self.engine.eval_mode(), adapter_off:
            result = self.engine.forward_backward_step(inputs, ctx, forward_only=True)
        return TensorBatch({"ref_log_prob": result.outputs["log_probs"]})

    def move_toward(self, actor_engine: BaseEngine, weight: float) -> None:
        """TR-DPO's reference update: each weight becomes ``weight`` x the actor's + (1 - weight) x its own, blended
        piece by piece on every rank (both engines shard the model alike), computed in fp32 and stored in the
        reference's dtype."""
        if self.disable_adapter:
            raise ValueError("a LoRA reference is the actor's own base model: it cannot move toward the actor")
        mine, theirs = list(self.engine.local_weights()), list(actor_engine.local_weights())
        for (name, own), (other_name, other) in itertools.zip_longest(mine, theirs, fillvalue=("-", None)):
            if name != other_name or _shape(own) != _shape(other) or own is None:
                raise ValueError(
                    f"the reference's weight {name} {_shape(own)} does not match the actor's {other_name} "
                    f"{_shape(other)} on this rank: the two engines must hold the same model, sharded alike"
                )
        with torch.no_grad():
            for (_, own), (_, other) in zip(mine, theirs):
                blended = torch.lerp(own.float(), other.to(device=own.device, dtype=torch.float32), weight)
                own.copy_(blended)


def _shape(tensor: Optional[torch.Tensor]) -> Optional[tuple[int, ...]]:
    return None if tensor is None else tuple(tensor.shape)
