"""What verl's tool and interaction config files share: one top-level list of entries in a YAML file, each naming
its class by `class_name` (`package.module.Class`, verl's spelling, or `package.module:Class`) with a `config`
mapping for it. Errors name the file, the entry and the key. verl's own built-in classes, as its example configs name
them, are this framework's equivalents (`VERL_BUILT_INS`)."""

from __future__ import annotations

import importlib
import logging
from pathlib import Path
from typing import Any, Mapping

import yaml

log = logging.getLogger(__name__)

# verl's tool and interaction classes its example configs name (both of its module layouts) -> the ones here, which
# take the same config and row kwargs and behave alike
_GSM8K_TOOL = "app.agents.tools.gsm8k:Gsm8kTool"
VERL_BUILT_INS = {
    "verl.tools.gsm8k_tool.Gsm8kTool": _GSM8K_TOOL,
    "verl.workers.tool.gsm8k_tool.Gsm8kTool": _GSM8K_TOOL,
    "verl.interactions.gsm8k_interaction.Gsm8kInteraction": "app.agents.interactions.gsm8k:Gsm8kInteraction",
}


class AgentConfigError(ValueError):
    """A tool or interaction config file, or a class it names, cannot be used."""


def import_class(class_name: str, where: str, error: type[Exception] = AgentConfigError) -> type:
    """The class `class_name` names (`a.b:Cls` or `a.b.Cls`; verl's built-ins: `VERL_BUILT_INS`); `where` (file and
    entry) leads every `error`."""
    if class_name in VERL_BUILT_INS:
        log.info("%s: %s, verl's built-in, is %s here", where, class_name, VERL_BUILT_INS[class_name])
        class_name = VERL_BUILT_INS[class_name]
    module_name, sep, attr = class_name.partition(":")
    if not sep:
        module_name, _, attr = class_name.rpartition(".")
    if not module_name or not attr:
        raise error(f"{where}: class_name={class_name!r} must be 'package.module.Class' or 'package.module:Class'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise error(
            f"{where}: class_name={class_name!r}: cannot import module {module_name!r} ({e}); is it on PYTHONPATH?"
        ) from e
    cls = getattr(module, attr, None)
    if not isinstance(cls, type):
        raise error(f"{where}: class_name={class_name!r}: module {module_name!r} has no class {attr!r}")
    return cls


def read_entries(
    path: str | Path, key: str, top: str, fields: str, error: type[Exception] = AgentConfigError
) -> list[tuple[str, Mapping[str, Any], dict[str, Any]]]:
    """(where, entry, config) for each entry of the file's `top:` list, checked to have a `class_name` string and a
    `config` mapping (absent: {}). `key` is the config key that named the file; `fields` lists an entry's keys for
    the message when the list is missing."""
    path = Path(path)
    if not path.is_file():
        raise error(f"{key}={str(path)!r}: no such file")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise error(f"{key}={str(path)!r}: not valid YAML: {e}") from e
    entries = data.get(top) if isinstance(data, Mapping) else None
    if not isinstance(entries, list) or not entries:
        raise error(f"{path}: needs a top-level '{top}:' list of {{{fields}}}")
    out = []
    for i, entry in enumerate(entries):
        where = f"{path}: {top}[{i}]"
        if not isinstance(entry, Mapping) or not isinstance(entry.get("class_name"), str):
            raise error(f"{where}: class_name is missing; each entry needs a class_name string")
        config = entry.get("config") or {}
        if not isinstance(config, Mapping):
            raise error(f"{where}: config must be a mapping, got {config!r}")
        out.append((where, entry, dict(config)))
    return out


def missing_methods(cls: type, names: tuple[str, ...]) -> list[str]:
    return [m for m in names if not callable(getattr(cls, m, None))]
