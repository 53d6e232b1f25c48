"""Training engines: one sharded model + optimizer behind ``BaseEngine``. Imports nothing from Ray."""
from app.engine.base import BaseEngine, StepContext, StepResult, WeightSyncPayload
from app.engine.spec import DeepSpeedSpec, EngineSpec, OptimSpec

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


__all__ = ["BaseEngine", "DeepSpeedSpec", "EngineSpec", "OptimSpec", "StepContext", "StepResult", "WeightSyncPayload",
           "make_engine", "ENGINE_STRATEGIES"]
