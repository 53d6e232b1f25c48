"""The engine's own settings, independent of where they came from.

Roles build an ``EngineSpec`` from the verl-named config sections (``actor_rollout_ref.model`` + ``actor``,
``ref``, ``critic``); see ``app.roles.factory``. Keeping the engine on this small dataclass means the engine never
depends on the config schema's layout, and a benchmark can build one by hand.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, Optional, Union

import torch

_DTYPES = {
    "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16,
    "fp16": torch.float16,
    "float16": torch.float16,
    "fp32": torch.float32,
    "float32": torch.float32,
}


def to_dtype(name: Union[str, torch.dtype], key: str = "dtype") -> torch.dtype:
    """``"bf16"``/``"fp32"``/... (verl spellings) -> torch dtype; ``key`` names the config key in the error."""
    if isinstance(name, torch.dtype):
        return name
    try:
        return _DTYPES[str(name).lower()]
    except KeyError:
        raise ValueError(f"{key}={name!r} is not a dtype; use one of {sorted(_DTYPES)}") from None


@dataclass
class OptimSpec:
    """AdamW and the learning-rate schedule (verl ``optim`` keys). No field has a default: the defaults are the config
    schema's (``app.config.schema.OptimConfig``), written once there, and ``from_config`` passes every key."""

    lr: float
    weight_decay: float
    betas: tuple[float, float]
    lr_warmup_steps: int  # -1: lr_warmup_steps_ratio * total_training_steps
    lr_warmup_steps_ratio: float
    warmup_style: Literal["constant", "cosine", "linear"]  # schedule after warm-up
    min_lr_ratio: float  # where the decay ends, as a fraction of lr
    lr_decay_steps_ratio: float  # the decay spans this last fraction of total_training_steps; the lr holds before it
    num_cycles: float  # cosine periods over the decay (0.5: one fall from lr to min_lr_ratio x lr)
    total_training_steps: int  # needed by cosine and by the warm-up ratio

    @classmethod
    def from_config(cls, optim) -> "OptimSpec":
        """From a validated ``optim`` section (``app.config.schema.OptimConfig``)."""
        return cls(
            lr=float(optim.lr),
            weight_decay=float(optim.weight_decay),
            betas=tuple(optim.betas),
            lr_warmup_steps=optim.lr_warmup_steps,
            lr_warmup_steps_ratio=optim.lr_warmup_steps_ratio,
            warmup_style=optim.warmup_style,
            min_lr_ratio=optim.min_lr_ratio,
            lr_decay_steps_ratio=optim.lr_decay_steps_ratio,
            num_cycles=optim.num_cycles,
            total_training_steps=optim.total_training_steps,
        )


@dataclass
class DeepSpeedSpec:
    """The DeepSpeed engine's own settings (``strategy=deepspeed``; the config's ``deepspeed_config`` section).

    ``train_batch_size``: samples per optimiser step over all ranks (verl's ``ppo_mini_batch_size`` x
    ``rollout.n``), from which the engine derives DeepSpeed's batch keys; None for an inference-only engine.
    ``config_path``: a user's DeepSpeed JSON, whose values win over the derived ones (see
    ``app.engine.deepspeed_config``).
    """

    # the deepspeed_config keys: no defaults here, theirs are the schema's (DeepSpeedConfig)
    zero_stage: int
    offload_optimizer: bool
    config_path: Optional[str]
    train_batch_size: Optional[int]


@dataclass
class EngineSpec:
    """Everything one engine (one model + optimizer) needs.

    The fields without a default are config keys (the comments name those spelt otherwise): their defaults are the
    schema's, written once there, and ``app.roles.factory`` passes every one. The defaulted fields are the engine's own.

    ``model_kind``: ``causal_lm`` gives response log-probs (and entropy); ``value`` is a value-head model
    (``AutoModelForTokenClassification`` with one label) giving per-response-token values.
    """

    model_path: str  # model.path
    trust_remote_code: bool
    model_overrides: Mapping[str, Any]  # model.override_config: Hugging Face config fields set after it is read
    # LoRA (peft); lora_rank 0 = full fine-tuning, the other three are then unused
    lora_rank: int
    lora_alpha: int
    target_modules: Union[str, list[str]]
    exclude_modules: Optional[str]  # regex over module names
    enable_gradient_checkpointing: bool
    use_remove_padding: bool
    # packed rows hold one copy of each distinct prompt, shared by its samples (needs the packed sdpa attention)
    share_prompt_prefix: bool
    # optimisation; optim None = inference only (a reference model), which has no grad_clip either (None)
    optim: Optional[OptimSpec]
    grad_clip: Optional[float]
    # micro-batching: a fixed number of samples (ppo_micro_batch_size_per_gpu; None: the whole batch in one forward),
    # or a token budget (use_dynamic_bsz, ppo_max_token_len_per_gpu)
    micro_batch_size_per_gpu: Optional[int]
    use_dynamic_bsz: bool
    max_token_len_per_gpu: int
    # Ulysses sequence parallelism: groups of this many ranks compute each packed row together (FSDP2 only)
    ulysses_sequence_parallel_size: int
    # FSDP2's shard groups (fsdp_config.fsdp_size): -1 (or the rank count or more) shards one copy over all ranks;
    # a divisor of the rank count shards a copy within each group of that many ranks and replicates it across groups
    # (hybrid sharding, HSDP)
    fsdp_size: int
    reshard_after_forward: bool  # fsdp_config: false keeps a layer's gathered weights until its backward (FSDP2)
    # tokens per logits chunk; None: sized to the device and vocabulary (app.engine.forward); a value model has none
    logits_chunk_size: Optional[int]
    # precision and memory (fsdp_config)
    model_dtype: str  # master weights (what the optimizer steps); frozen weights are kept in param_dtype
    param_dtype: str  # compute dtype
    reduce_dtype: str  # gradient reduction dtype
    buffer_dtype: str
    param_offload: bool
    optimizer_offload: bool
    # use_torch_compile: torch.compile each decoder layer's forward (fuses the many small element-wise ops; ~2x less
    # CPU work per step on a CPU, after a one-off compile of ~30-100 s)
    compile_layers: bool
    model_kind: Literal["causal_lm", "value"] = "causal_lm"
    device: Literal["auto", "cpu", "cuda"] = "auto"
    # read the weights on rank 0 only and broadcast them into the other ranks' shards (host memory: one copy per
    # node instead of one per rank); None: whenever there is more than one rank (FSDP engine)
    load_on_rank0: Optional[bool] = None
    # the config key of max_token_len_per_gpu, named in the error when a sequence exceeds the budget
    max_token_len_key: str = "ppo_max_token_len_per_gpu"
    seed: int = 0  # all ranks build identical fresh heads (critic score, LoRA) from this seed
    deepspeed: Optional[DeepSpeedSpec] = None  # strategy=deepspeed only
    extra: dict = field(default_factory=dict)

    @property
    def use_lora(self) -> bool:
        return self.lora_rank > 0
