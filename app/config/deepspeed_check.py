"""`strategy=deepspeed` checked on the driver: the user's DeepSpeed JSON is read and merged with what our keys
derive, exactly as each engine will, so a conflicting batch key or a missing file stops the run before any worker
starts; FSDP-only settings that the DeepSpeed engine would ignore are refused."""

from __future__ import annotations

from typing import Any, Iterator

from app.config.errors import ConfigError
from app.config.ranks import ranks_named
from app.config.schema import FSDPConfig, TrainerRunConfig


def _deepspeed_roles(cfg: TrainerRunConfig, needs_critic: bool) -> Iterator[tuple[str, Any, FSDPConfig, str]]:
    """(role path, role section, its fsdp_config, that section's path) for each role on DeepSpeed."""
    actor = cfg.actor_rollout_ref.actor
    if actor.strategy == "deepspeed":
        yield "actor_rollout_ref.actor", actor, actor.fsdp_config, "actor_rollout_ref.actor.fsdp_config"
        ref = cfg.actor_rollout_ref.ref  # the reference follows the actor's strategy
        yield "actor_rollout_ref.actor", None, ref.fsdp_config, "actor_rollout_ref.ref.fsdp_config"
    if needs_critic and cfg.critic.strategy == "deepspeed":
        yield "critic", cfg.critic, cfg.critic.model.fsdp_config, "critic.model.fsdp_config"


def deepspeed_role_paths(cfg: TrainerRunConfig) -> list[str]:
    """The roles that run on DeepSpeed, as config paths: the actor's (with its reference) and the critic's where the
    estimator trains a critic."""
    from algos.catalog import estimator_traits

    needs_critic = estimator_traits(cfg.algorithm.adv_estimator).needs_critic
    return list(dict.fromkeys(path for path, *_ in _deepspeed_roles(cfg, needs_critic)))


def check_deepspeed(cfg: TrainerRunConfig, needs_critic: bool) -> None:
    from app.engine.deepspeed_config import (
        DeepSpeedConfigError,
        batch_keys,
        derived_config,
        load_user_config,
        merge_user_config,
    )

    n, workers = cfg.actor_rollout_ref.rollout.n, cfg.trainer.num_workers
    for path, role, fsdp, fsdp_path in _deepspeed_roles(cfg, needs_critic):
        for name in ("param_offload", "optimizer_offload"):
            if getattr(fsdp, name):
                raise ConfigError(
                    f"{fsdp_path}.{name}=true is an FSDP setting and {path}.strategy=deepspeed ignores it; use "
                    f"{path}.deepspeed_config.offload_optimizer (parameters: zero_optimization.offload_param in the "
                    f"JSON of {path}.deepspeed_config.config_path, with zero_stage=3)"
                )
        if fsdp.fsdp_size != -1:
            raise ConfigError(
                f"{fsdp_path}.fsdp_size={fsdp.fsdp_size} is FSDP's hybrid sharding and {path}.strategy=deepspeed "
                "ignores it; DeepSpeed ZeRO partitions over every rank here"
            )
        if not fsdp.reshard_after_forward:
            raise ConfigError(
                f"{fsdp_path}.reshard_after_forward=false is an FSDP setting and {path}.strategy=deepspeed ignores it "
                "(ZeRO-3's own: stage3_max_reuse_distance in the JSON of deepspeed_config.config_path)"
            )
        if role is None:
            continue
        if role.use_torch_compile:
            raise ConfigError(f"{path}.use_torch_compile=true is not supported with {path}.strategy=deepspeed")
        ds = role.deepspeed_config
        if not ds.config_path:
            _check_reference_sync(cfg, path, ds.zero_stage)
            continue
        key = f"{path}.deepspeed_config.config_path"
        micro = role.ppo_micro_batch_size_per_gpu
        explain = (
            f"{path}.ppo_mini_batch_size={role.ppo_mini_batch_size} x actor_rollout_ref.rollout.n={n} "
            f"samples over {ranks_named(cfg.trainer)}, micro-batches of "
            + (
                f"{path}.use_dynamic_bsz=true (the whole share)"
                if role.use_dynamic_bsz
                else f"{path}.ppo_micro_batch_size_per_gpu={micro}"
            )
        )
        try:
            user = load_user_config(ds.config_path, key)
            batch = batch_keys(role.ppo_mini_batch_size * n, micro, workers, use_dynamic_bsz=role.use_dynamic_bsz)
            derived = derived_config(
                zero_stage=ds.zero_stage,
                offload_optimizer=ds.offload_optimizer,
                trains=True,
                grad_clip=role.grad_clip,
                param_dtype=fsdp.mixed_precision.param_dtype,
                batch=batch,
            )
            merged = merge_user_config(
                derived, user, source=f"{key}={ds.config_path}", trains=True, explain=explain, optim_key=f"{path}.optim"
            )
        except DeepSpeedConfigError as exc:
            raise ConfigError(str(exc)) from exc
        _check_reference_sync(cfg, path, int(merged.get("zero_optimization", {}).get("stage", 0)))


def _check_reference_sync(cfg: TrainerRunConfig, path: str, zero_stage: int) -> None:
    """A moving reference (ref.sync_ref_model) is kept in every checkpoint, which DeepSpeed cannot write for an
    inference-only ZeRO-3 engine (it has no checkpoint engine without an optimizer)."""
    if path == "actor_rollout_ref.actor" and cfg.actor_rollout_ref.ref.sync_ref_model and zero_stage == 3:
        raise ConfigError(
            "actor_rollout_ref.ref.sync_ref_model=true with DeepSpeed ZeRO-3 (actor_rollout_ref.actor"
            ".deepspeed_config): the moving reference must be checkpointed, and DeepSpeed saves no inference-only "
            "ZeRO-3 engine; use zero_stage=2 or strategy=fsdp2"
        )
