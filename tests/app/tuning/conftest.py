"""Helpers for the sweep tests: compose configs from configs/ with Hydra, as `app.sweep` does."""

import pytest


def compose_tree(name: str, overrides=(), resolve: bool = False) -> dict:
    from omegaconf import OmegaConf

    from app.config import compose_config

    cfg = compose_config(name, overrides)
    tree = OmegaConf.to_container(cfg, resolve=resolve)
    tree.pop("hydra", None)
    return tree


def load_tree(tree: dict):
    from omegaconf import OmegaConf

    from app.config import load_config

    return load_config(OmegaConf.create(tree))


@pytest.fixture
def compose():
    """compose(name, overrides=(), resolve=False) -> the config tree Hydra composes from configs/."""
    return compose_tree


@pytest.fixture
def base_cfg():
    """base_cfg(**overrides) -> quickstart with its KL loss on (as configs/sweep/grpo_small.yaml runs it, to search
    the KL coefficient), as a validated TrainerRunConfig."""
    return lambda **overrides: load_tree(
        compose_tree(
            "quickstart", ["actor_rollout_ref.actor.use_kl_loss=true", *[f"{k}={v}" for k, v in overrides.items()]]
        )
    )
