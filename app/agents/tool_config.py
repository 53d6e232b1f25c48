"""verl's tool config file: `tools:` a list of {class_name, config, tool_schema}. `class_name` names the class as
`package.module.Class` (verl's spelling) or `package.module:Class`; the class takes (config, ToolSchema)."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Mapping

import yaml

from app.agents.tool_base import BaseTool, ToolSchema

KEY = "actor_rollout_ref.rollout.multi_turn.tool_config_path"


class ToolConfigError(ValueError):
    """The tool config file, or a tool class it names, cannot be used; the message names the file and the tool."""


def import_class(class_name: str, where: str) -> type:
    """The class `class_name` names (`a.b:Cls` or `a.b.Cls`)."""
    module_name, sep, attr = class_name.partition(":")
    if not sep:
        module_name, _, attr = class_name.rpartition(".")
    if not module_name or not attr:
        raise ToolConfigError(
            f"{where}: class_name={class_name!r} must be 'package.module.Class' or 'package.module:Class'"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ToolConfigError(
            f"{where}: class_name={class_name!r}: cannot import module {module_name!r} ({e}); is it on PYTHONPATH?"
        ) from e
    cls = getattr(module, attr, None)
    if not isinstance(cls, type):
        raise ToolConfigError(f"{where}: class_name={class_name!r}: module {module_name!r} has no class {attr!r}")
    return cls


def read_tool_specs(path: str | Path) -> list[dict[str, Any]]:
    """The file's tool entries, checked for shape (no class imported): [{class_name, config, tool_schema}]."""
    path = Path(path)
    if not path.is_file():
        raise ToolConfigError(f"{KEY}={str(path)!r}: no such file")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise ToolConfigError(f"{KEY}={str(path)!r}: not valid YAML: {e}") from e
    tools = data.get("tools") if isinstance(data, Mapping) else None
    if not isinstance(tools, list) or not tools:
        raise ToolConfigError(f"{path}: needs a top-level 'tools:' list of {{class_name, config, tool_schema}}")
    specs, names = [], set()
    for i, entry in enumerate(tools):
        where = f"{path}: tools[{i}]"
        if not isinstance(entry, Mapping) or not isinstance(entry.get("class_name"), str):
            raise ToolConfigError(f"{where}: each tool needs a class_name string")
        config = entry.get("config") or {}
        if not isinstance(config, Mapping):
            raise ToolConfigError(f"{where}: config must be a mapping, got {config!r}")
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
                "config": dict(config),
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
    cls = import_class(spec["class_name"], spec["where"])
    missing = [m for m in ("create", "execute", "calc_reward", "release") if not callable(getattr(cls, m, None))]
    if missing:
        raise ToolConfigError(
            f"{spec['where']}: {spec['class_name']} lacks {missing}; subclass app.agents.tool_base.BaseTool"
        )
    return cls
