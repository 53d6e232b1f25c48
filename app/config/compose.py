"""The config a `python -m app.train --config-name NAME key=value ...` command runs with, composed in code: for the
benches, the pipeline cards and notebooks, which compose configs/ without a Hydra command line of their own."""

from __future__ import annotations

from typing import Sequence

from app.config.hydra_defaults import CONFIGS
from app.config.loader import load_config
from app.config.schema import TrainerRunConfig


def compose_config(config_name: str, overrides: Sequence[str] = ()):
    """Hydra's composition (a DictConfig, not yet typed) of configs/<config_name>.yaml with `overrides`, Hydra
    override strings as on the command line. Inside another Hydra app (a test, a notebook that initialized Hydra)
    that app's search path is used."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():
        return compose(config_name=config_name, overrides=list(overrides))
    with initialize_config_dir(str(CONFIGS), version_base=None):
        return compose(config_name=config_name, overrides=list(overrides))


def compose_run_config(config_name: str, overrides: Sequence[str] = ()) -> TrainerRunConfig:
    """`compose_config`, typed and validated as `python -m app.train` does (a ConfigError names a wrong value)."""
    return load_config(compose_config(config_name, overrides))
