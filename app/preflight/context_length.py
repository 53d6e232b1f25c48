"""The rollout's sequence budget fits vLLM's context cap and the model's positions: a prompt of
data.max_prompt_length tokens plus rollout.response_length generated ones must fit both, or vLLM refuses the engine
(or the requests) once the run is under way."""
from __future__ import annotations

import json
from pathlib import Path

from app.config.schema import TrainerRunConfig
from app.preflight.errors import PreflightError

_POSITION_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")


def check_context_length(cfg: TrainerRunConfig) -> None:
    rollout = cfg.actor_rollout_ref.rollout
    need = rollout.prompt_length + rollout.response_length
    budget = (f"actor_rollout_ref.rollout.prompt_length={rollout.prompt_length} + "
              f"actor_rollout_ref.rollout.response_length={rollout.response_length} = {need} tokens")
    if rollout.max_model_len is not None and rollout.max_model_len < need:
        raise PreflightError(f"actor_rollout_ref.rollout.max_model_len={rollout.max_model_len} is shorter than one "
                             f"sequence ({budget}); raise it, or lower data.max_prompt_length / "
                             "data.max_response_length")
    positions = model_positions(cfg.actor_rollout_ref.model.path)
    if positions is not None and positions < need:
        raise PreflightError(f"{budget}, more than the {positions} positions of actor_rollout_ref.model.path="
                             f"{cfg.actor_rollout_ref.model.path} (config.json); lower data.max_prompt_length / "
                             "data.max_response_length")


def model_positions(path: str):
    """The longest sequence the model's config.json allows, or None when it says nothing (or is not a local folder)."""
    config = Path(path).expanduser() / "config.json"
    try:
        parsed = json.loads(config.read_text())
    except (OSError, ValueError):
        return None
    for source in (parsed, parsed.get("text_config") or {}):
        for key in _POSITION_KEYS:
            if isinstance(source.get(key), int):
                return source[key]
    return None
