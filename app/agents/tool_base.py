"""The tool interface: verl's life cycle (create -> execute ... -> calc_reward -> release) and its OpenAI function
schema. A tool written against verl's `BaseTool` methods plugs in by subclassing `BaseTool` here instead; its methods
may be plain or `async` (`call_tool` runs either)."""

from __future__ import annotations

import asyncio
import inspect
import uuid
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional


@dataclass(frozen=True)
class FunctionSchema:
    name: str
    description: str = ""
    parameters: Mapping[str, Any] = field(default_factory=dict)  # a JSON schema of the arguments object


@dataclass(frozen=True)
class ToolSchema:
    """An OpenAI function-tool schema: `{"type": "function", "function": {"name", "description", "parameters"}}`."""

    function: FunctionSchema
    type: str = "function"

    @classmethod
    def from_dict(cls, data: Any, where: str) -> "ToolSchema":
        """Parse one `tool_schema` mapping; `where` names it in errors (file and tool)."""
        if not isinstance(data, Mapping) or data.get("type", "function") != "function":
            raise ValueError(f"{where}: tool_schema must be a mapping with type: function, got {data!r}")
        function = data.get("function")
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str) or not function["name"]:
            raise ValueError(f"{where}: tool_schema.function.name is missing (the name the model calls the tool by)")
        parameters = function.get("parameters") or {}
        if not isinstance(parameters, Mapping):
            raise ValueError(f"{where}: tool_schema.function.parameters must be a JSON-schema mapping")
        return cls(FunctionSchema(function["name"], str(function.get("description") or ""), dict(parameters)))

    def to_dict(self) -> dict[str, Any]:
        """The schema as the OpenAI API and chat templates take it (`tools=[...]`)."""
        f = self.function
        return {
            "type": self.type,
            "function": {"name": f.name, "description": f.description, "parameters": dict(f.parameters)},
        }


class BaseTool:
    """One tool, shared by every trajectory; per-trajectory state lives under the instance id `create` returns.

    `execute` returns (text for the conversation, a step reward, metrics); the step rewards are summed per trajectory
    and reported, `calc_reward` gives the reward the trajectory's score can use at the end."""

    def __init__(self, config: Mapping[str, Any], tool_schema: ToolSchema):
        self.config = dict(config or {})
        self.tool_schema = tool_schema
        self.name = tool_schema.function.name

    def get_openai_tool_schema(self) -> ToolSchema:
        return self.tool_schema

    def create(self, instance_id: Optional[str] = None, **kwargs) -> str:
        return instance_id or uuid.uuid4().hex

    def execute(self, instance_id: str, parameters: Mapping[str, Any], **kwargs) -> tuple[str, float, dict]:
        raise NotImplementedError(f"tool {self.name!r}: {type(self).__name__}.execute is not written")

    def calc_reward(self, instance_id: str, **kwargs) -> float:
        return 0.0

    def release(self, instance_id: str, **kwargs) -> None:
        return None


def call_tool(method, *args, **kwargs) -> Any:
    """`method(*args, **kwargs)`, awaited on a fresh event loop when the tool wrote it `async` (verl's tools are)."""
    result = method(*args, **kwargs)
    if inspect.isawaitable(result):

        async def wait():
            return await result

        return asyncio.run(wait())
    return result


def execute_result_text(result: Any) -> tuple[str, float, dict]:
    """Normalise what `execute` returned: a string, or (text or an object with `.text`, reward, metrics)."""
    if isinstance(result, tuple):
        text, reward, metrics = (list(result) + [0.0, {}])[:3]
    else:
        text, reward, metrics = result, 0.0, {}
    if not isinstance(text, str):
        text = getattr(text, "text", None) or ("" if text is None else str(text))
    return text, float(reward or 0.0), dict(metrics or {})
