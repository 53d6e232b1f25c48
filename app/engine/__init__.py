"""Training engines: one sharded model + optimizer behind ``BaseEngine``. Imports nothing from Ray.

Names load on first use, so the config checks that reuse a torch-free module of this package (``precision``,
``deepspeed_config``) do not import torch with the engines.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.engine.base import BaseEngine
    from app.engine.spec import EngineSpec

_EXPORTS = {
    "BaseEngine": "app.engine.base",
    "StepContext": "app.engine.base",
    "StepResult": "app.engine.base",
    "DeepSpeedSpec": "app.engine.spec",
    "EngineSpec": "app.engine.spec",
    "OptimSpec": "app.engine.spec",
}

ENGINE_STRATEGIES = ("fsdp", "fsdp2", "deepspeed")


def make_engine(strategy: str, spec: EngineSpec) -> BaseEngine:
    """The engine for ``actor.strategy`` / ``critic.strategy`` (``fsdp`` and ``fsdp2`` both mean FSDP2 here)."""
    if strategy in ("fsdp", "fsdp2"):
        from app.engine.fsdp_engine import FSDPEngine

        return FSDPEngine(spec)
    if strategy == "deepspeed":  # imported here: only this strategy needs the deepspeed package
        from app.engine.deepspeed_engine import DeepSpeedEngine

        return DeepSpeedEngine(spec)
    raise ValueError(f"strategy={strategy!r} has no engine; use one of {ENGINE_STRATEGIES}")


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'app.engine' has no attribute {name!r}")


__all__ = [
    "BaseEngine",
    "DeepSpeedSpec",
    "EngineSpec",
    "OptimSpec",
    "StepContext",
    "StepResult",
    "make_engine",
    "ENGINE_STRATEGIES",
]
