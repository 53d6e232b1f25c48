"""The schema's defaults as Hydra's base config, so that they are written once (in app/config/schema.py), and
configs/ on Hydra's search path.

`configs/ppo_trainer.yaml` starts from `rayrl_schema` (this node, registered in Hydra's ConfigStore) and holds only
Hydra's own settings; `grpo_trainer.yaml` and `quickstart.yaml` hold what differs from it. Importing `app.config`
registers the node, so every entry point (`app.train`, `app.sweep`, `app.pipeline`) and test composes the same
defaults.

verl users keep configs of their own that start from verl's (`defaults: [ppo_trainer, _self_]`, run with
`--config-path DIR --config-name NAME`, as verl's multi-turn and recipe scripts do). Hydra then searches DIR instead
of configs/, so configs/ is added to every search path: `ppo_trainer` resolves to ours.
"""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path

SCHEMA_NODE = "rayrl_schema"
CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def register_schema_defaults() -> None:
    """Store the defaults of `TrainerRunConfig` under `SCHEMA_NODE` (as plain data: the typed schema, not OmegaConf,
    checks values, so verl's spellings such as `trainer.logger=console` reach it)."""
    from hydra.core.config_store import ConfigStore

    from app.config.schema import TrainerRunConfig

    ConfigStore.instance().store(name=SCHEMA_NODE, node=dataclasses.asdict(TrainerRunConfig()))


def register_config_search_path() -> None:
    """configs/ after the primary config folder on every Hydra search path. The `hydra.searchpath` entry verl's own
    example configs name (`file://verl/trainer/config`, verl's source tree) does not exist here: its warning is
    dropped, since configs/ stands in for it."""
    from hydra.core.config_search_path import ConfigSearchPath
    from hydra.core.plugins import Plugins
    from hydra.plugins.search_path_plugin import SearchPathPlugin

    class RayrlConfigs(SearchPathPlugin):
        def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
            search_path.append(provider="rayrl", path=f"file://{CONFIGS}")

    Plugins.instance().register(RayrlConfigs)
    warnings.filterwarnings("ignore", message=r".*path=verl/trainer/config is not available", category=UserWarning)
