"""Learning-rate factor per training step: linear warm-up, then constant, cosine or linear decay.

Warm-up follows verl/transformers: the factor is ``step / warmup_steps`` during warm-up, so step 0 runs at lr 0.
Cosine (verl) and linear (transformers' and TRL's default) go from 1 at the end of warm-up to ``min_lr_ratio`` at
``total_training_steps``.
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
    progress = min(1.0, (step - warm) / max(1, total - warm))
    decay = 0.5 * (1.0 + math.cos(math.pi * progress)) if optim.warmup_style == "cosine" else 1.0 - progress
    return optim.min_lr_ratio + (1.0 - optim.min_lr_ratio) * decay


def build_lr_scheduler(optimizer: torch.optim.Optimizer, optim: OptimSpec) -> torch.optim.lr_scheduler.LambdaLR:
    lr_factor(0, optim)  # validate the settings now, not at the first step
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_factor(step, optim))
