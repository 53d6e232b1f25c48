"""Fixtures the trainer's end-to-end tests share: composing the Hydra config, a free local port."""

from __future__ import annotations

import pytest


def _compose(overrides: list[str], config_name: str = "grpo_trainer"):
    """The typed config `python -m app.train --config-name <config_name> <overrides>` would run with."""
    from app.config import compose_run_config

    return compose_run_config(config_name, overrides)


@pytest.fixture(scope="session")
def compose():
    return _compose


@pytest.fixture(scope="session")
def free_port():
    from support import free_port as port

    return port
