"""One typed configuration schema (verl key names), loaded from Hydra/OmegaConf and validated before Ray starts."""
from app.config.loader import ConfigError, load_config, to_container
from app.config.schema import TrainerRunConfig

__all__ = ["ConfigError", "TrainerRunConfig", "load_config", "to_container"]
