"""A Hermes-style system message that lists the tools and how to call them, for chat templates that do not render
`tools=` themselves (SmolLM2's writes only the messages)."""

from __future__ import annotations

import json
from typing import Sequence

from app.agents.tool_base import ToolSchema


def tool_system_prompt(schemas: Sequence[ToolSchema], preamble: str = "You are a helpful assistant.") -> str:
    tools = "\n".join(json.dumps(s.to_dict(), separators=(", ", ": ")) for s in schemas)
    return (
        f"{preamble}\n\nYou may call these tools:\n<tools>\n{tools}\n</tools>\n\n"
        'To call a tool, write <tool_call>{"name": <tool name>, "arguments": <arguments as a JSON object>}'
        "</tool_call> and stop; the result comes back in a tool message."
    )
