"""The interaction interface, verl's life cycle: an environment that answers each assistant turn without a tool call
as the user would, with a score for that turn, and may end the episode. start_interaction -> generate_response ...
-> calculate_score -> finalize_interaction, once per trajectory. Methods are `async` as in verl; plain ones run too
(`app.agents.tool_base.call_tool` runs either)."""

from __future__ import annotations

import uuid
from typing import Any, Mapping, Optional


class BaseInteraction:
    """One interaction object serves every trajectory of a rank, from several threads: keep per-trajectory state
    under the instance id `start_interaction` returns. `config` is the entry's `config` with its `name` added."""

    def __init__(self, config: Mapping[str, Any]):
        self.config = dict(config or {})
        self.name: str = self.config.get("name", "interaction_agent")

    async def start_interaction(self, instance_id: Optional[str] = None, **kwargs) -> str:
        """Called with the row's `extra_info["interaction_kwargs"]` (its `name` included)."""
        return instance_id or uuid.uuid4().hex

    async def generate_response(
        self, instance_id: str, messages: list[dict[str, Any]], **kwargs
    ) -> tuple[bool, str, float, dict[str, Any]]:
        """(should_terminate_sequence, response_content, current_turn_score, additional_data) after the assistant's
        latest turn; `messages` is the whole conversation so far, the prompt's messages first."""
        raise NotImplementedError(f"interaction {self.name!r}: {type(self).__name__}.generate_response is not written")

    async def calculate_score(self, instance_id: str, **kwargs) -> float:
        """The trajectory's score at its end; reward functions read it as extra_info['interaction_score']."""
        return 0.0

    async def finalize_interaction(self, instance_id: str, **kwargs) -> None:
        """Release the trajectory's state; always called, also after an error."""
        return None
