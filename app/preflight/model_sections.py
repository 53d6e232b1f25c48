"""The config's model sections: all three, and the ones a run builds a model from. The pre-flight checks of model
folders, configs and overrides walk the built ones; the external_lib import walks all three, so a misspelt module
name in a section the run leaves unused is refused rather than ignored."""

from __future__ import annotations

from typing import Any, Iterator

from app.config.schema import TrainerRunConfig


def model_sections(cfg: TrainerRunConfig) -> tuple[tuple[str, Any], ...]:
    """(key, section) of the policy's, the critic's and the reward model's model section."""
    return (
        ("actor_rollout_ref.model", cfg.actor_rollout_ref.model),
        ("critic.model", cfg.critic.model),
        ("reward_model.model", cfg.reward_model.model),
    )


def built_model_sections(cfg: TrainerRunConfig) -> Iterator[tuple[str, Any]]:
    """(key, section) of each model the run loads: the policy; the critic where the advantage estimator needs one;
    the reward model where reward_model.enable is set and it names a model path."""
    from algos.catalog import estimator_traits

    policy, critic, reward = model_sections(cfg)
    yield policy
    if estimator_traits(cfg.algorithm.adv_estimator).needs_critic and critic[1].path:
        yield critic
    if cfg.reward_model.enable and reward[1].path:
        yield reward
