"""verl's tool config file: `tools:` a list of {class_name, config, tool_schema}. `class_name` names the class as
`package.module.Class` (verl's spelling) or `package.module:Class`; the class takes (config, ToolSchema)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from app.agents.config_file import AgentConfigError, import_class, missing_methods, read_entries
from app.agents.tool_base import BaseTool, ToolSchema

KEY = "actor_rollout_ref.rollout.multi_turn.tool_config_path"


class ToolConfigError(AgentConfigError):
    """The tool config file, or a tool class it names, cannot be used; the message names the file and the tool."""


def read_tool_specs(path: str | Path) -> list[dict[str, Any]]:
    """The file's tool entries, checked for shape (no class imported): [{class_name, config, tool_schema}]."""
    specs, names = [], set()
    for where, entry, config in read_entries(path, KEY, "tools", "class_name, config, tool_schema", ToolConfigError):
        try:
            schema = ToolSchema.from_dict(entry.get("tool_schema"), where)
        except ValueError as e:
            raise ToolConfigError(str(e)) from e
        if schema.function.name in names:
            raise ToolConfigError(f"{where}: a second tool named {schema.function.name!r}; tool names must differ")
        names.add(schema.function.name)
        specs.append(
            {
                "class_name": entry["class_name"],
                "config": config,
                "tool_schema": schema,
                "where": f"{where} ({schema.function.name})",
            }
        )
    return specs


def check_tool_config(path: str | Path) -> None:
    """Check the file and that every class it names imports and is a tool, without building any (config time)."""
    for spec in read_tool_specs(path):
        _tool_class(spec)


def load_tools(path: str | Path) -> dict[str, BaseTool]:
    """{tool name: tool instance} for every tool in the file, in file order."""
    tools = {}
    for spec in read_tool_specs(path):
        cls = _tool_class(spec)
        try:
            tools[spec["tool_schema"].function.name] = cls(spec["config"], spec["tool_schema"])
        except Exception as e:
            raise ToolConfigError(
                f"{spec['where']}: {spec['class_name']}({spec['config']!r}, ...) failed: {type(e).__name__}: {e}"
            ) from e
    return tools


def _tool_class(spec: Mapping[str, Any]) -> type:
    cls = import_class(spec["class_name"], spec["where"], ToolConfigError)
    missing = missing_methods(cls, ("create", "execute", "calc_reward", "release"))
    if missing:
        raise ToolConfigError(
            f"{spec['where']}: {spec['class_name']} lacks {missing}; subclass app.agents.tool_base.BaseTool"
        )
    return cls
