"""The rollout's sequence budget fits the model's positions: a prompt of rollout.prompt_length tokens plus
rollout.response_length generated ones must fit the max_position_embeddings of its config.json, or vLLM refuses to
build the engine once Ray and Serve are up. (rollout.max_model_len against the same budget is a config check,
app.config.verl_compat.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Optional

from app.config.schema import TrainerRunConfig
from app.preflight.errors import PreflightError

_POSITION_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")


def check_context_length(cfg: TrainerRunConfig) -> None:
    rollout, model = cfg.actor_rollout_ref.rollout, cfg.actor_rollout_ref.model
    need = rollout.prompt_length + rollout.response_length
    positions = model_positions(model.path, model.override_config)
    if positions is not None and positions < need:
        where = (
            "actor_rollout_ref.model.override_config"
            if any(key in model.override_config for key in _POSITION_KEYS)
            else f"actor_rollout_ref.model.path={model.path} (config.json)"
        )
        raise PreflightError(
            f"actor_rollout_ref.rollout.prompt_length={rollout.prompt_length} + response_length="
            f"{rollout.response_length} = {need} tokens, more than the {positions} positions of {where}; lower "
            "data.max_prompt_length / data.max_response_length"
        )


def model_positions(path: str, overrides: Optional[Mapping[str, Any]] = None) -> Optional[int]:
    """The longest sequence the model's config.json allows, after `overrides` (model.override_config), or None when
    it says nothing (or is not a local folder)."""
    config = Path(path).expanduser() / "config.json"
    try:
        parsed = json.loads(config.read_text())
    except (OSError, ValueError):
        parsed = {}
    if not isinstance(parsed, dict):
        parsed = {}
    for source in (dict(overrides or {}), parsed, parsed.get("text_config") or {}):
        for key in _POSITION_KEYS:
            if isinstance(source.get(key), int):
                return source[key]
    return None
