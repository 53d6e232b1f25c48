"""Each model folder's config.json reads as a Hugging Face config of a model type transformers knows, before Ray
starts: a type of one's own (registered by a module) or a folder with its own code would otherwise fail in the train
workers, after Ray, Serve and vLLM started. Runs apart (transformers), after the `external_lib` modules imported."""

from __future__ import annotations

from app.config.schema import TrainerRunConfig
from app.preflight.errors import PreflightError
from app.preflight.model_sections import built_model_sections


def check_model_configs(cfg: TrainerRunConfig) -> None:
    from transformers import AutoConfig

    for section, model in built_model_sections(cfg):
        try:
            AutoConfig.from_pretrained(model.path, trust_remote_code=model.trust_remote_code)
        except (ValueError, KeyError, OSError) as err:
            first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise PreflightError(
                f"{section}.path={model.path}: transformers cannot read its config ({first_line}); a model type of "
                f"your own needs the module that registers it in {section}.external_lib, a folder with its own code "
                f"{section}.trust_remote_code=true"
            ) from None
