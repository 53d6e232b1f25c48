"""verl's `*.model.external_lib`: the modules import on the driver before Ray starts, in the child process of the
checks that read a model's config (which then sees what they register). The train workers and the replicas import
them again (serve.model_libs)."""

from __future__ import annotations

from typing import Iterator

from app.config.schema import TrainerRunConfig
from app.preflight.errors import PreflightError
from app.preflight.model_sections import model_sections
from serve.model_libs import import_model_libs, lib_names


def model_libs(cfg: TrainerRunConfig) -> Iterator[tuple[str, tuple[str, ...]]]:
    """(key, module names) of each model section that names external libs (a critic's or reward model's even where
    the run has none: a name given is imported, so a misspelt one is never silently ignored)."""
    for key, model in model_sections(cfg):
        names = lib_names(model.external_lib)
        if names:
            yield f"{key}.external_lib", names


def check_model_libs(cfg: TrainerRunConfig) -> None:
    for key, names in model_libs(cfg):
        try:
            import_model_libs(names, key)
        except ImportError as err:
            raise PreflightError(str(err)) from None
