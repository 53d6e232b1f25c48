"""What one step reports: its phases' wall-clock time, the batch's metrics (verl's names) reduced over the
data-parallel ranks, and the count of bad steps (updates skipped for non-finite gradients).

Bad steps: the engine already refuses to apply an optimizer step whose gradient norm is NaN or Inf (it would destroy
the weights) and the update reports the share of such steps as `<role>/grad_norm_nonfinite`. One bad batch is
survivable: the weights are unchanged and the next batch may be fine. Many in a row mean the run is broken (a diverged
policy, a reward or loss producing NaN), and going on would only burn compute, so the run stops with an error while
its last checkpoint, written after a good step, stays intact.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator, Optional

import torch

from algos.masked import masked_sum
from app.batch import TensorBatch
from app.trainer.collectives import RankGroup

NONFINITE_METRICS = ("actor/grad_norm_nonfinite", "critic/grad_norm_nonfinite")


class PhaseTimer:
    """Wall-clock timing of the phases of a step, reported as `timing_s/<phase>`."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start

    def metrics(self) -> dict[str, float]:
        return {f"timing_s/{name}": secs for name, secs in self.seconds.items()}


class BadStepLimitExceeded(RuntimeError):
    """`trainer.max_bad_steps` steps in a row skipped their updates."""


class BadStepGuard:
    """Tracks bad steps (`max_bad_steps` 0: count them, never stop)."""

    def __init__(self, max_bad_steps: int):
        self.max_bad_steps = max_bad_steps
        self.in_a_row = 0
        self.total = 0

    def observe(self, step: int, metrics: dict[str, float]) -> bool:
        """Whether `step` was bad; adds `training/bad_steps` (the run's count so far) to `metrics`. Raises
        `BadStepLimitExceeded` at the `max_bad_steps`-th bad step in a row."""
        bad = any(metrics.get(name, 0.0) > 0 for name in NONFINITE_METRICS)
        self.in_a_row = self.in_a_row + 1 if bad else 0
        self.total += bad
        metrics["training/bad_steps"] = float(self.total)
        if self.max_bad_steps and self.in_a_row >= self.max_bad_steps:
            first = step - self.in_a_row + 1
            raise BadStepLimitExceeded(
                f"trainer.max_bad_steps={self.max_bad_steps}: steps {first}-{step} all met non-finite gradients "
                "(NaN or Inf loss or grad norm), so their updates were skipped; stopping the run. Checkpoints are "
                "only written after good steps, so the newest one in trainer.default_local_dir is intact."
            )
        return bad


def step_metrics(
    batch: TensorBatch,
    timer: PhaseTimer,
    ranks: RankGroup,
    response_length_limit: int,
    extra: dict[str, float],
    means: Optional[dict[str, float]] = None,
) -> dict[str, float]:
    """The end-of-step metrics every rank computes together (collective): the batch's statistics over all ranks, the
    phase times, `extra` (gathered by the caller), and the throughput in tokens per second of the whole step.
    `means`: more per-rank statistics averaged over the ranks (the same names on every rank)."""
    out = ranks.reduce(batch_metrics(batch, response_length_limit) | (means or {}), max_min_metrics(batch))
    out |= token_means(batch, ranks) | timer.metrics() | extra
    tokens = ranks.sum(float(batch["attention_mask"].sum()))
    out["perf/throughput"] = tokens / max(timer.seconds["step"], 1e-9)
    return out


def batch_metrics(batch: TensorBatch, response_length_limit: int) -> dict[str, float]:
    """Reward and length statistics of this rank's samples: means over its responses (every rank holds as many, so
    the mean over ranks is the whole batch's).

    `response_length/clip_ratio` is the share of responses that hit the length limit (they were cut, not finished).
    """
    mask = batch["response_mask"].bool()
    lengths = mask.sum(dim=1).float()
    return {
        "critic/score/mean": float(batch["token_level_scores"].sum(dim=1).mean()),
        "critic/rewards/mean": float(batch["token_level_rewards"].sum(dim=1).mean()),
        "response_length/mean": float(lengths.mean()),
        "response_length/clip_ratio": float((lengths >= response_length_limit).float().mean()),
        # the prompt columns only: a multi-turn row's tool results are in the response, outside its mask
        "prompt_length/mean": float(batch["attention_mask"][:, : -mask.shape[1]].sum(dim=1).float().mean()),
    }


# token-weighted means: metric -> the batch field averaged over every response token
TOKEN_MEAN_FIELDS = {
    "critic/advantages/mean": "advantages",
    "critic/returns/mean": "returns",
    "critic/values/mean": "values",
}


def token_means(batch: TensorBatch, ranks: RankGroup) -> dict[str, float]:
    """Means over every response token of the whole batch (collective), as verl's masked means over the undivided
    batch: the ranks' sums over their token counts, not a mean of the ranks' means, which would weigh each token by
    how few its rank holds. A whitened advantage then reads 0.

    `actor/rollout_logprob_diff` is the mean |actor − vLLM| log-prob over response tokens: how far the rollout engine's
    numbers are from the trainer's on the same tokens (bf16 kernels, sampling processors).
    """
    mask = batch["response_mask"].bool()
    fields = {name: batch[key] for name, key in TOKEN_MEAN_FIELDS.items() if key in batch}
    if "old_log_probs" in batch and "rollout_log_probs" in batch:
        fields["actor/rollout_logprob_diff"] = (batch["old_log_probs"] - batch["rollout_log_probs"]).abs()
    names = sorted(fields)  # every rank holds the same fields, so the sums line up
    sums = [masked_sum(fields[name].double(), mask) for name in names]
    total = ranks.sum_tensor(torch.stack([*sums, mask.sum().double()]))
    tokens = total[-1].clamp(min=1)
    return {name: float(total[i] / tokens) for i, name in enumerate(names)}


def max_min_metrics(batch: TensorBatch) -> dict[str, torch.Tensor]:
    """Quantities whose global max/min (not mean) over ranks is wanted."""
    lengths = batch["response_mask"].sum(dim=1).float()
    scores = batch["token_level_scores"].sum(dim=1)
    return {
        "response_length/max": lengths.max(),
        "critic/score/max": scores.max(),
        "-critic/score/min": -scores.min(),  # negated so one max-reduce serves both
    }
