"""verl's interaction config file: `interaction:` a list of {name, class_name, config}. `class_name` names a
`BaseInteraction` subclass as `package.module.Class` or `package.module:Class`; it is built with its `config` plus
`name`. Without `name` the class name gives it, as in verl: `Gsm8kInteraction` -> `gsm8k`. The first entry is the
default for rows whose `extra_info["interaction_kwargs"]` names none."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.agents.config_file import AgentConfigError, import_class, missing_methods, read_entries
from app.agents.interaction_base import BaseInteraction

KEY = "actor_rollout_ref.rollout.multi_turn.interaction_config_path"
METHODS = ("start_interaction", "generate_response", "calculate_score", "finalize_interaction")


class InteractionConfigError(AgentConfigError):
    """The interaction config file, or a class it names, cannot be used; the message names the file and the entry."""


def default_name(class_name: str) -> str:
    """verl's name for an entry without one: the class's own name, lower case, less an `Interaction` suffix."""
    simple = class_name.replace(":", ".").rpartition(".")[2]
    return (simple.removesuffix("Interaction") or simple).lower()


def read_interaction_specs(path: str | Path) -> list[dict[str, Any]]:
    """The file's entries, checked for shape (no class imported): [{name, class_name, config, where}]."""
    specs, names = [], set()
    for where, entry, config in read_entries(
        path, KEY, "interaction", "name, class_name, config", InteractionConfigError
    ):
        name = entry.get("name")
        if name is None:
            name = default_name(entry["class_name"])
        if not isinstance(name, str) or not name:
            raise InteractionConfigError(f"{where}: name={name!r} must be a non-empty string")
        if name in names:
            raise InteractionConfigError(f"{where}: a second interaction named {name!r}; names must differ")
        names.add(name)
        specs.append(
            {
                "name": name,
                "class_name": entry["class_name"],
                "config": {**config, "name": name},
                "where": f"{where} ({name})",
            }
        )
    return specs


def check_interaction_config(path: str | Path) -> None:
    """Check the file and that every class it names imports and is an interaction, building none (config time)."""
    for spec in read_interaction_specs(path):
        _interaction_class(spec)


def load_interactions(path: str | Path) -> dict[str, BaseInteraction]:
    """{name: interaction} for every entry of the file, in file order (the first is the default)."""
    out = {}
    for spec in read_interaction_specs(path):
        cls = _interaction_class(spec)
        try:
            out[spec["name"]] = cls(config=spec["config"])
        except Exception as e:
            raise InteractionConfigError(
                f"{spec['where']}: {spec['class_name']}(config={spec['config']!r}) failed: {type(e).__name__}: {e}"
            ) from e
    return out


def _interaction_class(spec: dict[str, Any]) -> type:
    cls = import_class(spec["class_name"], spec["where"], InteractionConfigError)
    missing = missing_methods(cls, METHODS)
    if missing:
        raise InteractionConfigError(
            f"{spec['where']}: {spec['class_name']} lacks {missing}; "
            "subclass app.agents.interaction_base.BaseInteraction"
        )
    return cls
