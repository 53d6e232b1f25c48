"""`ray_kwargs.ray_init` names only ray.init's arguments: verl passes the section to ray.init as it is, and a misspelt
name would otherwise fail inside ray.init, or be lost where the run joins a cluster already up."""

from __future__ import annotations

import difflib
import inspect
from typing import Any, Mapping

from app.config.schema import TrainerRunConfig
from app.preflight.errors import PreflightError

KEY = "ray_kwargs.ray_init"


def ray_init_arguments(ray_init: Mapping[str, Any]) -> dict[str, Any]:
    """The user's ray.init arguments without the unset ones (verl's default `num_cpus: null`); a PreflightError names
    one that ray.init does not take."""
    import ray

    known = [name for name, p in inspect.signature(ray.init).parameters.items() if p.kind is not p.VAR_KEYWORD]
    given = {name: value for name, value in ray_init.items() if value is not None}
    for name in given:
        if name not in known:
            near = difflib.get_close_matches(name, known, n=1)
            hint = f"; did you mean {near[0]}?" if near else ""
            raise PreflightError(f"{KEY}.{name}: ray.init has no argument {name!r}{hint}")
    return given


def check_ray_init(cfg: TrainerRunConfig) -> None:
    ray_init_arguments(cfg.ray_kwargs.ray_init)
