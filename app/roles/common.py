"""Pieces the training roles share: global loss normalisers, mini-batch iteration, metric bookkeeping."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, Callable, Iterator

import torch

from algos.aggregation import loss_normalizer
from app.batch import TensorBatch, concat_padded
from app.engine.base import BaseEngine, StepContext


def rank_normalizer(
    engine: BaseEngine, response_mask: torch.Tensor, loss_agg_mode: str, loss_scale_factor: float
) -> float:
    """The ``normalizer`` each rank passes to the loss for one mini-batch.

    Every mode's normaliser is additive over rows, so the global one is the sum over ranks; it is divided by the
    world size because FSDP averages the ranks' gradients (see ``algos.aggregation``). ``loss_scale_factor``: the
    per-answer constant of seq-mean-token-sum-norm, given rather than read from the mask, whose width is only this
    mini-batch's longest answer.
    """
    local = loss_normalizer(response_mask, loss_agg_mode, loss_scale_factor=loss_scale_factor)
    total = float(engine.all_reduce(torch.tensor([local], dtype=torch.float64), "sum")[0])
    return total / engine.dp_world_size


def samples_per_rank(key: str, prompts: int, rollout_n: int, world_size: int) -> int:
    """verl counts mini-batches in prompts; each prompt has ``rollout_n`` samples, split over the ranks."""
    samples = prompts * rollout_n
    if samples % world_size:
        raise ValueError(
            f"{key}={prompts} prompts x rollout.n={rollout_n} = {samples} samples cannot be split "
            f"evenly over {world_size} data-parallel ranks"
        )
    return samples // world_size


def iter_mini_batches(batch: TensorBatch, mini_batch_size: int, *, shuffle: bool, seed: int) -> Iterator[TensorBatch]:
    """Mini-batches of ``mini_batch_size`` rows, the last one smaller where the size does not divide the rows (as
    verl's split); with ``shuffle`` the rows are permuted first (seeded)."""
    if shuffle:
        order = torch.randperm(len(batch), generator=torch.Generator().manual_seed(seed))
        batch = batch.index(order)
    yield from batch.split(mini_batch_size)


class MetricMeans:
    """Running means of scalar metrics (optionally weighted)."""

    def __init__(self) -> None:
        self._sum: dict[str, float] = defaultdict(float)
        self._weight: dict[str, float] = defaultdict(float)

    def add(self, name: str, value: float, weight: float = 1.0) -> None:
        self._sum[name] += float(value) * float(weight)
        self._weight[name] += float(weight)

    def add_all(self, metrics: dict[str, float], prefix: str = "") -> None:
        for k, v in metrics.items():
            self.add(prefix + k, v)

    def total(self, name: str) -> float:
        """Weighted sum of ``name`` (0 if never added)."""
        return self._sum.get(name, 0.0)

    def means(self) -> dict[str, float]:
        return {k: self._sum[k] / self._weight[k] if self._weight[k] else 0.0 for k in self._sum}


def global_means(engine: BaseEngine, means: MetricMeans) -> dict[str, float]:
    """Weighted means over all data-parallel ranks (weights summed too), e.g. exact token means of the global
    mini-batch even when ranks hold different token counts. Every rank must have added the same names."""
    names = sorted(means._sum)
    if not names:
        return {}
    local = [means._sum[k] for k in names] + [means._weight[k] for k in names]
    total = engine.all_reduce(torch.tensor(local, dtype=torch.float64), "sum").tolist()
    n = len(names)
    return {k: total[i] / total[n + i] if total[n + i] else 0.0 for i, k in enumerate(names)}


def global_loss_sums(engine: BaseEngine, sums: dict[str, float]) -> dict[str, float]:
    """Mini-batch losses from each rank's sum of globally normalised micro-batch losses.

    A rank's sum is ``world * (its numerator) / global_normalizer`` (see ``rank_normalizer``), so the mean over
    ranks is the loss of the whole global mini-batch.
    """
    names = sorted(sums)
    if not names:
        return {}
    reduced = engine.all_reduce(torch.tensor([sums[k] for k in names], dtype=torch.float64), "mean").tolist()
    return dict(zip(names, reduced))


def run_ppo_epochs(
    engine: BaseEngine,
    data: TensorBatch,
    *,
    epochs: int,
    mini_batch_size: int,
    shuffle: bool,
    seed: int,
    loss_agg_mode: str,
    loss_scale_factor: float,
    make_loss_fn: Callable[[MetricMeans, dict[str, float]], Any],
    grad_norm_metric: str,
    ctx_kwargs: dict[str, Any] | None = None,
    replay: TensorBatch | None = None,
) -> MetricMeans:
    """Epochs over mini-batches, one optimiser step each (the shared body of the actor and critic updates).

    `make_loss_fn(token_means, loss_sums)` returns the engine loss for one mini-batch and fills its metrics; the loss
    is normalised over the whole mini-batch on all ranks. Returns per-mini-batch metrics, each global over ranks.

    `replay`: rows (flagged `replayed`) that join the first mini-batch of the first epoch after its normaliser is
    computed from its own rows, so each weighs what one of them weighs (self-imitation, `algos.imitation`); the
    loss function tells them apart by the flag. Every rank must pass the same number of rows.
    """
    per_step = MetricMeans()
    for epoch in range(epochs):
        for mini in iter_mini_batches(data, mini_batch_size, shuffle=shuffle, seed=seed + epoch):
            token_means, loss_sums = MetricMeans(), {}
            engine.set_loss_fn(make_loss_fn(token_means, loss_sums))
            normalizer = rank_normalizer(engine, mini["response_mask"], loss_agg_mode, loss_scale_factor)
            if replay is not None:
                # padding only: the attention mask keeps every pad id out of the model's outputs
                mini, replay = concat_padded([mini, replay], pad_token_id=0, fill_missing=True), None
            engine.optimizer_zero_grad()
            engine.forward_backward_step(mini, StepContext(loss_normalizer=normalizer, **(ctx_kwargs or {})))
            grad_norm = engine.optimizer_step()  # the engine skips a step on a NaN/Inf norm
            per_step.add(grad_norm_metric, grad_norm)
            per_step.add(grad_norm_metric + "_nonfinite", float(not math.isfinite(grad_norm)))  # share of skipped steps
            per_step.add_all(global_means(engine, token_means))
            per_step.add_all(global_loss_sums(engine, loss_sums))
    return per_step
