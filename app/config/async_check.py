"""`async_training.enable=true` checked on the driver: what one-step off-policy training needs, and what it cannot
combine with yet, refused before any worker starts."""

from __future__ import annotations

from app.config.errors import ConfigError
from app.config.schema import TrainerRunConfig


def check_async_training(cfg: TrainerRunConfig, needs_greedy_baseline: bool) -> None:
    at = cfg.async_training
    if at.max_staleness < 0:
        raise ConfigError(f"async_training.max_staleness={at.max_staleness} must be >= 0 (0: synchronous)")
    if not at.enable:
        return
    rc = cfg.algorithm.rollout_correction
    if at.max_staleness > 0 and rc.rollout_is is None and not rc.bypass_mode:
        raise ConfigError(
            f"async_training.enable=true with max_staleness={at.max_staleness} trains on samples of an older policy, "
            "and algorithm.rollout_correction sets no correction for that: set rollout_is=token (or sequence; the "
            "decoupled PPO objective, clipped against the current policy and weighted by current/sampler) or "
            "bypass_mode=true (PPO clipped against the sampler's log-probs)"
        )
    refused = [
        (
            "algorithm.filter_groups.enable=true",
            cfg.algorithm.filter_groups.enable,
            "its extra generation rounds depend on the scores of the batch in hand",
        ),
        (
            f"algorithm.adv_estimator={cfg.algorithm.adv_estimator}",
            needs_greedy_baseline,
            "its greedy baseline is sampled alongside the batch",
        ),
        (
            "trainer.placement=colocated",
            cfg.trainer.placement == "colocated",
            "vLLM sleeps during the update that generation would overlap",
        ),
    ]
    for setting, on, why in refused:
        if on:
            raise ConfigError(f"async_training.enable=true cannot be combined with {setting}: {why}; turn one off")
