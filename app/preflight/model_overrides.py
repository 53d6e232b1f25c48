"""`*.model.override_config` names fields of the model's Hugging Face config: a misspelt name would otherwise be set as
a new attribute that nothing reads, and the run would train the unchanged model without a word. Reads config.json
through transformers, so it runs apart."""

from __future__ import annotations

import difflib
from typing import Any, Iterator

from app.config.schema import TrainerRunConfig
from app.preflight.errors import PreflightError


def check_model_overrides(cfg: TrainerRunConfig) -> None:
    for key, path, overrides, trust_remote_code in _overridden_models(cfg):
        from transformers import AutoConfig, PretrainedConfig

        config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
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


def _overridden_models(cfg: TrainerRunConfig) -> Iterator[tuple[str, str, dict[str, Any], bool]]:
    """(key, model path, overrides, trust_remote_code) of each model section that sets override_config."""
    from algos.catalog import estimator_traits

    arr, critic = cfg.actor_rollout_ref, cfg.critic
    sections = [("actor_rollout_ref.model.override_config", arr.model)]
    if estimator_traits(cfg.algorithm.adv_estimator).needs_critic:
        sections.append(("critic.model.override_config", critic.model))
    for key, model in sections:
        if model.override_config:
            yield key, model.path, dict(model.override_config), model.trust_remote_code


def _field_names(config: Any) -> set[str]:
    """The config's fields and the aliases its attribute_map reads (max_position_embeddings: GPT-2's n_positions)."""
    return set(config.to_dict()) | set(getattr(config, "attribute_map", {}))
