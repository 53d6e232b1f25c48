"""The critic: per-token values of the sampled responses, and the clipped value-loss update.

Settings from verl's ``critic`` section (ppo_mini_batch_size, ppo_epochs, cliprange_value, loss_agg_mode, shuffle).
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from algos.masked import masked_count
from algos.value_loss import compute_value_loss
from app.batch import TensorBatch
from app.engine.base import BaseEngine, StepContext
from app.roles.common import MetricMeans, run_ppo_epochs, samples_per_rank

_MODEL_INPUTS = ("input_ids", "attention_mask", "position_ids", "responses", "response_mask")


class Critic:
    def __init__(
        self,
        engine: BaseEngine,
        config: Any,
        *,
        rollout_n: int = 1,
        forward_micro_batch_size: Optional[int] = None,
        seed: int = 0,
        loss_scale_factor: Optional[float] = None,
    ) -> None:
        """``loss_scale_factor``: seq-mean-token-sum-norm's per-answer divisor, the response budget as in verl (None:
        the padded width of each mini-batch)."""
        self.engine = engine
        self.config = config
        self.rollout_n = rollout_n
        self.forward_micro_batch_size = forward_micro_batch_size
        self.seed = seed
        self.loss_scale_factor = loss_scale_factor
        self._updates = 0

    def compute_values(self, batch: TensorBatch) -> TensorBatch:
        """``values (b, R)``: the value of the state before each response token, 0 at padding."""
        inputs = batch.select(_MODEL_INPUTS, strict=False)
        ctx = StepContext(micro_batch_size=self.forward_micro_batch_size)
        with torch.no_grad(), self.engine.eval_mode():
            result = self.engine.forward_backward_step(inputs, ctx, forward_only=True)
        return TensorBatch({"values": result.outputs["values"]})

    def _loss_fn(self, token_means: MetricMeans, loss_sums: dict[str, float]):
        cfg = self.config

        def loss_fn(out: dict[str, torch.Tensor], micro: TensorBatch, ctx: StepContext):
            mask = micro["response_mask"]
            loss, metrics = compute_value_loss(
                out["values"],
                micro["values"],
                micro["returns"],
                mask,
                cliprange_value=cfg.cliprange_value,
                loss_agg_mode=cfg.loss_agg_mode,
                normalizer=ctx.loss_normalizer,
            )
            tokens = float(masked_count(mask))
            loss_sums["critic/vf_loss"] = loss_sums.get("critic/vf_loss", 0.0) + float(loss.detach())
            for name, value in metrics.items():
                token_means.add(f"critic/{name}", float(value), tokens)
            return loss, {}

        return loss_fn

    def update_critic(self, batch: TensorBatch) -> dict[str, float]:
        """Epochs over mini-batches (one optimizer step each, one LR-scheduler step per call). Needs ``values``
        (at rollout time) and ``returns``. Returns ``critic/*`` metrics averaged over mini-batches and ranks."""
        cfg = self.config
        missing = [
            k
            for k in ("input_ids", "attention_mask", "responses", "response_mask", "values", "returns")
            if k not in batch
        ]
        if missing:
            raise KeyError(f"update_critic: batch lacks {missing}; it has {batch.keys()}")
        data = batch.select((*_MODEL_INPUTS, "values", "returns"), strict=False)
        mini_size = samples_per_rank(
            "critic.ppo_mini_batch_size", cfg.ppo_mini_batch_size, self.rollout_n, self.engine.dp_world_size
        )
        lr = self.engine.get_lr()
        with self.engine.train_mode():
            per_step = run_ppo_epochs(
                self.engine,
                data,
                epochs=cfg.ppo_epochs,
                mini_batch_size=mini_size,
                shuffle=cfg.shuffle,
                seed=self.seed + 1000 * self._updates,
                loss_agg_mode=cfg.loss_agg_mode,
                loss_scale_factor=self.loss_scale_factor,
                make_loss_fn=self._loss_fn,
                grad_norm_metric="critic/grad_norm",
            )
        self.engine.lr_scheduler_step()
        self._updates += 1
        metrics = per_step.means()  # over mini-batches and epochs; each value is already global over ranks
        metrics["critic/lr"] = lr
        return metrics
