"""The rollout's sequence budget fits the model's positions: a prompt of rollout.prompt_length tokens plus
rollout.response_length generated ones must fit the max_position_embeddings of its config.json, or vLLM refuses to
build the engine once Ray and Serve are up. (rollout.max_model_len against the same budget is a config check,
app.config.verl_compat.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from app.config.schema import TrainerRunConfig
from app.preflight.errors import PreflightError

_POSITION_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")


def check_context_length(cfg: TrainerRunConfig) -> None:
    rollout = cfg.actor_rollout_ref.rollout
    need = rollout.prompt_length + rollout.response_length
    positions = model_positions(cfg.actor_rollout_ref.model.path)
    if positions is not None and positions < need:
        raise PreflightError(
            f"actor_rollout_ref.rollout.prompt_length={rollout.prompt_length} + response_length="
            f"{rollout.response_length} = {need} tokens, more than the {positions} positions of "
            f"actor_rollout_ref.model.path={cfg.actor_rollout_ref.model.path} (config.json); lower "
            "data.max_prompt_length / data.max_response_length"
        )


def model_positions(path: str) -> Optional[int]:
    """The longest sequence the model's config.json allows, or None when it says nothing (or is not a local folder)."""
    config = Path(path).expanduser() / "config.json"
    try:
        parsed = json.loads(config.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(parsed, dict):
        return None
    for source in (parsed, parsed.get("text_config") or {}):
        for key in _POSITION_KEYS:
            if isinstance(source.get(key), int):
                return source[key]
    return None
