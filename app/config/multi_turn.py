"""Checks of `actor_rollout_ref.rollout.multi_turn.*` (tool-using rollouts, app/agents) at config time: the tool config
file and every class it names load, before any worker starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.agents.tool_calls import FORMATS
from app.agents.tool_config import ToolConfigError, check_tool_config
from app.agents.tool_runner import TRUNCATE_SIDES
from app.config.errors import ConfigError

KEY = "actor_rollout_ref.rollout.multi_turn"


def check_multi_turn(cfg: Any) -> None:
    mt = cfg.actor_rollout_ref.rollout.multi_turn
    if mt.format not in FORMATS:
        raise ConfigError(f"{KEY}.format={mt.format!r}: tool calls are parsed in {FORMATS} format only")
    if mt.tool_response_truncate_side not in TRUNCATE_SIDES:
        raise ConfigError(
            f"{KEY}.tool_response_truncate_side={mt.tool_response_truncate_side!r}: one of {TRUNCATE_SIDES}"
        )
    for name in ("max_parallel_calls", "max_tool_response_length"):
        if getattr(mt, name) < 1:
            raise ConfigError(f"{KEY}.{name}={getattr(mt, name)}: must be >= 1")
    for name in ("max_assistant_turns", "max_user_turns"):
        if getattr(mt, name) is not None and getattr(mt, name) < 1:
            raise ConfigError(
                f"{KEY}.{name}={getattr(mt, name)}: must be >= 1, or null for no limit but the response_length budget"
            )
    if mt.tool_timeout_s <= 0:
        raise ConfigError(f"{KEY}.tool_timeout_s={mt.tool_timeout_s}: must be > 0 seconds")
    if mt.tool_config_path:
        # absolute, so the Ray workers (another working directory) open the file the driver checked
        mt.tool_config_path = str(Path(mt.tool_config_path).expanduser().resolve())
        try:
            check_tool_config(mt.tool_config_path)
        except ToolConfigError as e:
            raise ConfigError(str(e) if str(e).startswith(KEY) else f"{KEY}.tool_config_path: {e}") from e
    if mt.enable and cfg.algorithm.adv_estimator == "remax":
        raise ConfigError(
            f"{KEY}.enable=True with algorithm.adv_estimator=remax: ReMax's greedy baseline is one "
            "single-turn answer, not a trajectory; use grpo, rloo or reinforce_plus_plus"
        )
