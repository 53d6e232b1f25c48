"""The schema's defaults as Hydra's base config, so that they are written once (in app/config/schema.py).

`configs/ppo_trainer.yaml` starts from `rayrl_schema` (this node, registered in Hydra's ConfigStore) and holds only
Hydra's own settings; `grpo_trainer.yaml` and `quickstart.yaml` hold what differs from it. Importing `app.config`
registers the node, so every entry point (`app.train`, `app.sweep`, `app.pipeline`) and test composes the same
defaults.
"""

from __future__ import annotations

import dataclasses

SCHEMA_NODE = "rayrl_schema"


def register_schema_defaults() -> None:
    """Store the defaults of `TrainerRunConfig` under `SCHEMA_NODE` (as plain data: the typed schema, not OmegaConf,
    checks values, so verl's spellings such as `trainer.logger=console` reach it)."""
    from hydra.core.config_store import ConfigStore

    from app.config.schema import TrainerRunConfig

    ConfigStore.instance().store(name=SCHEMA_NODE, node=dataclasses.asdict(TrainerRunConfig()))
