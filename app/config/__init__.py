"""One typed configuration schema (verl key names), loaded from Hydra/OmegaConf and validated before Ray starts."""

from app.config.compose import compose_config, compose_run_config
from app.config.errors import ConfigError
from app.config.hydra_defaults import register_config_search_path, register_schema_defaults
from app.config.loader import load_config, to_container
from app.config.schema import TrainerRunConfig

register_schema_defaults()  # Hydra's base config: the schema's defaults (configs/ppo_trainer.yaml starts from it)
register_config_search_path()  # a user's config folder (--config-path) may start from configs/ppo_trainer.yaml

__all__ = ["ConfigError", "TrainerRunConfig", "compose_config", "compose_run_config", "load_config", "to_container"]
