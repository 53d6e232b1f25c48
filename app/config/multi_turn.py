"""Checks of `actor_rollout_ref.rollout.multi_turn.*` (multi-turn rollouts, app/agents) at config time: the tool and
interaction config files and every class they name load, before any worker starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.agents.config_file import AgentConfigError
from app.agents.interaction_config import check_interaction_config
from app.agents.tool_calls import FORMATS
from app.agents.tool_config import check_tool_config
from app.agents.tool_runner import TRUNCATE_SIDES
from app.config.errors import ConfigError

KEY = "actor_rollout_ref.rollout.multi_turn"


def check_multi_turn(cfg: Any) -> None:
    mt = cfg.actor_rollout_ref.rollout.multi_turn
    if mt.format not in FORMATS:
        raise ConfigError(f"{KEY}.format={mt.format!r}: the tool-call format must be one of {FORMATS}")
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
    for name, check in (("tool_config_path", check_tool_config), ("interaction_config_path", check_interaction_config)):
        path = getattr(mt, name)
        if not path:
            continue
        # absolute, so the Ray workers (another working directory) open the file the driver checked
        setattr(mt, name, str(Path(path).expanduser().resolve()))
        try:
            check(getattr(mt, name))
        except AgentConfigError as e:
            raise ConfigError(str(e) if str(e).startswith(KEY) else f"{KEY}.{name}: {e}") from e
    if mt.enable and cfg.algorithm.adv_estimator == "remax":
        raise ConfigError(
            f"{KEY}.enable=True with algorithm.adv_estimator=remax: ReMax's greedy baseline is one "
            "single-turn answer, not a trajectory; use grpo, rloo or reinforce_plus_plus"
        )
