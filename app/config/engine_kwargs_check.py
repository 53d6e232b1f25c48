"""`actor_rollout_ref.rollout.engine_kwargs.vllm` (verl's key): more arguments for vLLM's EngineArgs, passed to every
replica's engine. An argument the replica sets itself from another key is refused here, naming that key; whether the
rest are arguments of the installed vLLM is checked before Ray starts (app.preflight.vllm_engine_kwargs)."""

from __future__ import annotations

from app.config.errors import ConfigError
from app.config.schema import TrainerRunConfig
from serve.types import VLLM_ARGS_FROM_CONFIG, VLLM_CPU_ONLY_ARGS

KEY = "actor_rollout_ref.rollout.engine_kwargs.vllm"


def check_vllm_engine_kwargs(cfg: TrainerRunConfig) -> None:
    rollout = cfg.actor_rollout_ref.rollout
    kwargs = rollout.engine_kwargs.vllm
    if not kwargs:
        return
    if rollout.name == "hf":
        raise ConfigError(f"{KEY}={dict(kwargs)!r}: rollout.name=hf generates with transformers, not vLLM")
    for name, value in kwargs.items():
        if name in VLLM_ARGS_FROM_CONFIG and not (cfg.trainer.device == "cuda" and name in VLLM_CPU_ONLY_ARGS):
            raise ConfigError(
                f"{KEY}.{name}={value!r}: the replica sets this vLLM argument itself; {VLLM_ARGS_FROM_CONFIG[name]}"
            )
