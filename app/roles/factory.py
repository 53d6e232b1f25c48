"""Engine specs and roles from the verl-named config sections of ``app.config.schema``.

``actor_rollout_ref.model`` + ``actor`` -> the actor engine; ``ref`` -> a reference engine, or none with LoRA (the
actor's engine without its adapter is the reference); ``critic`` -> a value-model engine.
"""

from __future__ import annotations

from typing import Any, Optional, Union

from app.config.schema import (
    ActorConfig,
    ActorRolloutRefConfig,
    CriticConfig,
    CriticModelConfig,
    DeepSpeedConfig,
    FSDPConfig,
    ModelConfig,
    RefConfig,
    RolloutConfig,
    RolloutCorrectionConfig,
)
from app.engine import BaseEngine, DeepSpeedSpec, EngineSpec, OptimSpec, make_engine
from app.roles.actor import Actor
from app.roles.critic import Critic
from app.roles.reference import Reference

ACTOR_TOKEN_BUDGET = "actor_rollout_ref.actor.ppo_max_token_len_per_gpu"  # named in a too-small budget's error


def _precision(fsdp_config: FSDPConfig) -> dict[str, Any]:
    mp = fsdp_config.mixed_precision
    return dict(
        model_dtype=fsdp_config.model_dtype,
        param_dtype=mp.param_dtype,
        reduce_dtype=mp.reduce_dtype,
        buffer_dtype=mp.buffer_dtype,
        param_offload=fsdp_config.param_offload,
        optimizer_offload=fsdp_config.optimizer_offload,
        fsdp_size=fsdp_config.fsdp_size,
        reshard_after_forward=fsdp_config.reshard_after_forward,
    )


def _deepspeed(ds_cfg: DeepSpeedConfig, train_batch_size: Optional[int]) -> DeepSpeedSpec:
    """``train_batch_size``: samples per optimiser step over all ranks (None: inference only)."""
    return DeepSpeedSpec(
        zero_stage=ds_cfg.zero_stage,
        offload_optimizer=ds_cfg.offload_optimizer,
        config_path=ds_cfg.config_path,
        train_batch_size=train_batch_size,
    )


def _lora(model_cfg: ModelConfig) -> dict[str, Any]:
    return dict(
        lora_rank=model_cfg.lora_rank,
        lora_alpha=model_cfg.lora_alpha,
        target_modules=model_cfg.target_modules,
        exclude_modules=model_cfg.exclude_modules,
    )


# the reference of a full fine-tuning run has no adapter (with LoRA the reference is the actor's engine); rank 0 leaves
# the other LoRA settings unused
_NO_LORA = dict(lora_rank=0, lora_alpha=0, target_modules=[], exclude_modules=None)


def _trained_engine_spec(
    model_cfg: Union[ModelConfig, CriticModelConfig],
    role_cfg: Union[ActorConfig, CriticConfig],
    fsdp_config: FSDPConfig,
    *,
    model_kind: str,
    device: str,
    seed: int,
    rollout_n: int,
    **extra: Any,
) -> EngineSpec:
    """An engine that trains: the model section plus the role's verl keys (optim, grad_clip, ppo_* batch sizes,
    use_torch_compile, deepspeed_config), which the actor and critic sections spell the same way, and the role's
    ``fsdp_config`` (verl keeps the actor's in ``actor``, the critic's in ``critic.model``)."""
    mini = role_cfg.ppo_mini_batch_size  # prompts per optimiser step (the critic's is filled in by validation)
    return EngineSpec(
        deepspeed=_deepspeed(role_cfg.deepspeed_config, mini * rollout_n if mini else None),
        model_path=model_cfg.path,
        model_kind=model_kind,
        trust_remote_code=model_cfg.trust_remote_code,
        model_overrides=dict(model_cfg.override_config),
        enable_gradient_checkpointing=model_cfg.enable_gradient_checkpointing,
        use_remove_padding=model_cfg.use_remove_padding,
        share_prompt_prefix=model_cfg.share_prompt_prefix,
        optim=OptimSpec.from_config(role_cfg.optim),
        grad_clip=role_cfg.grad_clip,
        micro_batch_size_per_gpu=role_cfg.ppo_micro_batch_size_per_gpu,
        use_dynamic_bsz=role_cfg.use_dynamic_bsz,
        max_token_len_per_gpu=role_cfg.ppo_max_token_len_per_gpu,
        ulysses_sequence_parallel_size=role_cfg.ulysses_sequence_parallel_size,
        device=device,
        seed=seed,
        compile_layers=role_cfg.use_torch_compile,
        **extra,
        **_precision(fsdp_config),
    )


def actor_engine_spec(
    model_cfg: ModelConfig, actor_cfg: ActorConfig, *, device: str = "auto", seed: int, rollout_n: int
) -> EngineSpec:
    return _trained_engine_spec(
        model_cfg,
        actor_cfg,
        actor_cfg.fsdp_config,
        model_kind="causal_lm",
        device=device,
        seed=seed,
        rollout_n=rollout_n,
        logits_chunk_size=actor_cfg.logits_chunk_size,
        max_token_len_key=ACTOR_TOKEN_BUDGET,
        **_lora(model_cfg),
    )


def ref_engine_spec(
    model_cfg: ModelConfig, ref_cfg: RefConfig, actor_cfg: ActorConfig, *, device: str = "auto"
) -> EngineSpec:
    """An inference-only copy of the initial policy (full fine-tuning only)."""
    return EngineSpec(
        model_path=model_cfg.path,
        model_kind="causal_lm",
        trust_remote_code=model_cfg.trust_remote_code,
        model_overrides=dict(model_cfg.override_config),
        use_remove_padding=model_cfg.use_remove_padding,
        share_prompt_prefix=model_cfg.share_prompt_prefix,
        optim=None,
        grad_clip=None,
        enable_gradient_checkpointing=False,  # inference only: no backward, no step
        micro_batch_size_per_gpu=ref_cfg.log_prob_micro_batch_size_per_gpu,
        use_dynamic_bsz=actor_cfg.use_dynamic_bsz,
        max_token_len_per_gpu=actor_cfg.ppo_max_token_len_per_gpu,
        ulysses_sequence_parallel_size=ref_cfg.ulysses_sequence_parallel_size,
        logits_chunk_size=actor_cfg.logits_chunk_size,
        device=device,
        compile_layers=actor_cfg.use_torch_compile,
        max_token_len_key=ACTOR_TOKEN_BUDGET,
        deepspeed=_deepspeed(actor_cfg.deepspeed_config, None),
        **_NO_LORA,
        **_precision(ref_cfg.fsdp_config),
    )


def critic_engine_spec(critic_cfg: CriticConfig, *, device: str = "auto", seed: int, rollout_n: int) -> EngineSpec:
    if not critic_cfg.model.path:
        raise ValueError("critic.model.path is empty (validate() fills it from actor_rollout_ref.model.path)")
    return _trained_engine_spec(
        critic_cfg.model,
        critic_cfg,
        critic_cfg.model.fsdp_config,
        model_kind="value",
        device=device,
        seed=seed,
        rollout_n=rollout_n,
        logits_chunk_size=None,
        max_token_len_key="critic.ppo_max_token_len_per_gpu",
        # verl's critic LoRA keys: adapters on the value model's layers, its fresh value head trained whole
        lora_rank=critic_cfg.model.lora_rank,
        lora_alpha=critic_cfg.model.lora_alpha,
        target_modules=critic_cfg.model.target_modules,
        exclude_modules=None,
    )


def build_actor(
    arr_cfg: ActorRolloutRefConfig,
    *,
    device: str = "auto",
    seed: int,
    rollout_correction: Optional[RolloutCorrectionConfig] = None,
) -> Actor:
    """``arr_cfg``: the ``actor_rollout_ref`` section; ``rollout_correction``: ``algorithm.rollout_correction`` (None:
    no importance weights); ``seed``: ``trainer.seed``. Initialises the engine (collective: call on all ranks)."""
    actor_cfg = arr_cfg.actor
    engine = make_engine(
        actor_cfg.strategy,
        actor_engine_spec(arr_cfg.model, actor_cfg, device=device, seed=seed, rollout_n=arr_cfg.rollout.n),
    )
    engine.init_model()
    return Actor(
        engine,
        actor_cfg,
        rollout_n=arr_cfg.rollout.n,
        seed=seed,
        rollout_correction=rollout_correction,
        **_log_prob_batching(arr_cfg.rollout, "actor_rollout_ref.rollout"),
    )


def build_reference(
    arr_cfg: ActorRolloutRefConfig, actor_engine: Optional[BaseEngine] = None, *, device: str = "auto"
) -> Reference:
    """LoRA: the actor's engine with the adapter disabled. Otherwise a new inference-only engine."""
    batching = _log_prob_batching(arr_cfg.ref, "actor_rollout_ref.ref")
    if actor_engine is not None and actor_engine.has_adapter:
        return Reference(actor_engine, disable_adapter=True, **batching)
    engine = make_engine(
        arr_cfg.actor.strategy, ref_engine_spec(arr_cfg.model, arr_cfg.ref, arr_cfg.actor, device=device)
    )
    engine.init_model()
    return Reference(engine, **batching)


def _log_prob_batching(section: Union[RolloutConfig, RefConfig], name: str) -> dict[str, Any]:
    """A log-prob pass's micro-batching from verl's ``rollout`` / ``ref`` keys (None: the actor engine's); ``name``:
    the section's dotted key, for a token budget's error message."""
    return dict(
        log_prob_micro_batch_size=section.log_prob_micro_batch_size_per_gpu,
        log_prob_use_dynamic_bsz=section.log_prob_use_dynamic_bsz,
        log_prob_max_token_len=section.log_prob_max_token_len_per_gpu,
        log_prob_max_token_len_key=f"{name}.log_prob_max_token_len_per_gpu",
    )


def build_critic(
    critic_cfg: CriticConfig,
    *,
    rollout_n: int,
    device: str = "auto",
    seed: int,
    response_budget: Optional[int] = None,
) -> Critic:
    """``response_budget``: ``data.max_response_length``, the critic's seq-mean-token-sum-norm divisor per answer
    (verl's critic divides by the horizon it pads to; there is no critic key for it)."""
    engine = make_engine(
        critic_cfg.strategy, critic_engine_spec(critic_cfg, device=device, seed=seed, rollout_n=rollout_n)
    )
    engine.init_model()
    return Critic(engine, critic_cfg, rollout_n=rollout_n, seed=seed, loss_scale_factor=response_budget)
