"""The reference policy: log-probs of the sampled responses under the frozen initial policy.

Full fine-tuning: its own inference-only engine. LoRA: the actor's engine with the adapter disabled (the base
model is the reference), so no second copy of the weights exists.
"""

from __future__ import annotations

import contextlib
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
