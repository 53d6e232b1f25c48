"""Fixtures the trainer's end-to-end tests share: composing the Hydra config, a free local port."""

from __future__ import annotations

from pathlib import Path

import pytest

CONFIGS = Path(__file__).resolve().parents[3] / "configs"


def _compose(overrides: list[str], config_name: str = "grpo_trainer"):
    """The typed config `python -m app.train --config-name <config_name> <overrides>` would run with."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from app.config import load_config

    with initialize_config_dir(str(CONFIGS), version_base=None):
        return load_config(hydra_compose(config_name, overrides=overrides))


@pytest.fixture(scope="session")
def compose():
    return _compose


@pytest.fixture(scope="session")
def free_port():
    from support import free_port as port

    return port
