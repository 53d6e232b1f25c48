"""Learning-rate factor per training step: linear warm-up, then constant, cosine or linear decay.

Warm-up follows verl/transformers: the factor is ``step / warmup_steps`` during warm-up, so step 0 runs at lr 0.
Linear (transformers' and TRL's default) goes from 1 to ``min_lr_ratio`` at ``total_training_steps``; cosine (verl)
runs ``num_cycles`` periods of a cosine between 1 and ``min_lr_ratio``, by default half a period: from 1 down to
``min_lr_ratio`` at ``total_training_steps``. Either starts at the end of warm-up, or later where
``lr_decay_steps_ratio`` < 1 holds the lr until the run's last ``lr_decay_steps_ratio`` of steps (warm-up, stable,
decay).
"""

from __future__ import annotations

import math

import torch

from app.engine.spec import OptimSpec


def warmup_steps(optim: OptimSpec) -> int:
    if optim.lr_warmup_steps >= 0:
        return int(optim.lr_warmup_steps)
    if optim.lr_warmup_steps_ratio > 0 and optim.total_training_steps <= 0:
        raise ValueError(
            f"optim.lr_warmup_steps_ratio={optim.lr_warmup_steps_ratio} needs "
            f"optim.total_training_steps > 0, got {optim.total_training_steps}"
        )
    return int(optim.lr_warmup_steps_ratio * max(optim.total_training_steps, 0))


def lr_factor(step: int, optim: OptimSpec) -> float:
    """Multiplier of ``optim.lr`` for optimizer steps taken after ``step`` scheduler steps."""
    warm = warmup_steps(optim)
    if step < warm:
        return step / warm
    if optim.warmup_style == "constant":
        return 1.0
    if optim.warmup_style not in ("cosine", "linear"):
        raise ValueError(f"optim.warmup_style={optim.warmup_style!r}; use 'constant', 'cosine' or 'linear'")
    total = optim.total_training_steps
    if total <= 0:
        raise ValueError(f"optim.warmup_style={optim.warmup_style!r} needs optim.total_training_steps > 0, got {total}")
    if not 0 < optim.lr_decay_steps_ratio <= 1:
        raise ValueError(f"optim.lr_decay_steps_ratio={optim.lr_decay_steps_ratio} must lie in (0, 1]")
    # the decay starts at the end of warm-up, or where the run's last lr_decay_steps_ratio of steps begins if later
    start = max(warm, total - int(optim.lr_decay_steps_ratio * total))
    if step < start:
        return 1.0
    progress = min(1.0, (step - start) / max(1, total - start))
    if optim.warmup_style == "linear":
        return optim.min_lr_ratio + (1.0 - optim.min_lr_ratio) * (1.0 - progress)
    decay = 0.5 * (1.0 + math.cos(2.0 * math.pi * optim.num_cycles * progress))
    return optim.min_lr_ratio + (1.0 - optim.min_lr_ratio) * decay


def build_lr_scheduler(optimizer: torch.optim.Optimizer, optim: OptimSpec) -> torch.optim.lr_scheduler.LambdaLR:
    lr_factor(0, optim)  # validate the settings now, not at the first step
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_factor(step, optim))
