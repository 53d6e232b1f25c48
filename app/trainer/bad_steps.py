"""Steps whose update met non-finite gradients: counted, skipped, and after `trainer.max_bad_steps` in a row, fatal.

The engine already refuses to apply an optimizer step whose gradient norm is NaN or Inf (it would destroy the
weights) and the update reports the share of such steps as `<role>/grad_norm_nonfinite`. One bad batch is survivable:
the weights are unchanged and the next batch may be fine. Many in a row mean the run is broken (a diverged policy, a
reward or loss producing NaN), and going on would only burn compute, so the run stops with an error while its last
checkpoint, written after a good step, stays intact.
"""
from __future__ import annotations

NONFINITE_METRICS = ("actor/grad_norm_nonfinite", "critic/grad_norm_nonfinite")


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
                "only written after good steps, so the newest one in trainer.default_local_dir is intact.")
        return bad
