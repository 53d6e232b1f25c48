"""Turn a Hydra/OmegaConf tree (or a plain dict) into the validated typed schema: the top of the config package."""

from __future__ import annotations

import dataclasses
from typing import Any

from app.config.errors import ConfigError
from app.config.schema import TrainerRunConfig
from app.config.typed import build_typed
from app.config.validate import validate


def to_container(cfg: Any) -> dict:
    """A resolved plain dict from an OmegaConf node, a dataclass or a dict."""
    if dataclasses.is_dataclass(cfg):
        return dataclasses.asdict(cfg)
    try:
        from omegaconf import DictConfig, OmegaConf
    except ImportError:  # pragma: no cover - omegaconf ships with hydra-core
        DictConfig = ()
    if DictConfig and isinstance(cfg, DictConfig):
        try:
            return OmegaConf.to_container(cfg, resolve=True)
        except Exception as exc:  # an interpolation that points nowhere
            raise ConfigError(f"config interpolation failed: {exc}") from exc
    return dict(cfg)


def load_config(cfg: Any) -> TrainerRunConfig:
    """Build and validate the root config. Raises ConfigError before any Ray worker starts."""
    run = build_typed(TrainerRunConfig, to_container(cfg), "")
    validate(run)
    return run
