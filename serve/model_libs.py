"""verl's `model.external_lib`: modules imported before a model is built, for what they register on import (a model
class with transformers' Auto classes, an architecture with vLLM's ModelRegistry). Every process that builds one
imports them: the replicas (here), the train workers (actor, critic, reward model: app.trainer.launch), the
pre-flight checks that read the model's config (app.preflight.model_libs) and the pipelines' MLflow save
(app.pipeline.best_model)."""

from __future__ import annotations

import importlib
from typing import Iterable, Optional, Union

KEY = "actor_rollout_ref.model.external_lib"


def lib_names(value: Optional[Union[str, Iterable[str]]]) -> tuple[str, ...]:
    """The module names of one `external_lib` value: None, one name, or a list of them (as verl's
    import_external_libs takes)."""
    if not value:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


def import_model_libs(names: Iterable[str], key: str = KEY) -> None:
    """Import each module; ImportError naming the key and the module when one cannot be imported."""
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError as err:
            raise ImportError(
                f"{key}: cannot import {name!r} ({err}); it must be importable on every node (installed, or a module "
                "of the job's working directory)"
            ) from err
