"""`*.model.override_config` names fields of the model's Hugging Face config: a misspelt name would otherwise be set as
a new attribute that nothing reads, and the run would train the unchanged model without a word. Reads config.json
through transformers, so it runs apart."""

from __future__ import annotations

import difflib
from typing import Any

from app.config.schema import TrainerRunConfig
from app.preflight.errors import PreflightError
from app.preflight.model_sections import built_model_sections


def check_model_overrides(cfg: TrainerRunConfig) -> None:
    from transformers import AutoConfig, PretrainedConfig

    for section, model in built_model_sections(cfg):
        overrides = getattr(model, "override_config", None)  # the reward model's section has none, as verl's
        if not overrides:
            continue
        key, path = f"{section}.override_config", model.path
        config = AutoConfig.from_pretrained(path, trust_remote_code=model.trust_remote_code)
        for name in overrides:
            current = getattr(config, name, _ABSENT)
            if current is _ABSENT:
                near = difflib.get_close_matches(name, sorted(_field_names(config)), n=1)
                hint = f"; did you mean {near[0]}?" if near else ""
                raise PreflightError(
                    f"{key}.{name}: the {type(config).__name__} of {path} has no field {name}{hint} "
                    "(a field it lacks would be set and read by nothing)"
                )
            if isinstance(current, PretrainedConfig):
                raise PreflightError(
                    f"{key}.{name}: {name} is a nested config of {type(config).__name__}; it is replaced, not merged, "
                    "so give a copy of the model folder with its config.json edited instead"
                )


_ABSENT = object()


def _field_names(config: Any) -> set[str]:
    """The config's fields and the aliases its attribute_map reads (max_position_embeddings: GPT-2's n_positions)."""
    return set(config.to_dict()) | set(getattr(config, "attribute_map", {}))
