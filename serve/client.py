"""What the trainer holds: a `RolloutClient` around the Serve handle, and the functions that deploy or find one.

The trainer talks to the rollout service only through this client (generate / update_weights / sleep / wake_up)
and the payload classes in `serve.types`.
"""

from __future__ import annotations

import concurrent.futures
import logging
import math
import os
import time
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Optional, Sequence, Union

import ray
from ray import serve
from ray.serve.exceptions import DeploymentUnavailableError

from serve.payload import DEFAULT_CHUNK_BYTES, encode_tensors, iter_encoded_chunks
from serve.replica_retry import RETRY_KEYS, FaultCounts, ReplicaRetryExhausted, RetryPolicy, replica_death
from serve.types import (
    FullWeights,
    LoraAdapter,
    MergedLora,
    PolicyVersionMismatch,
    RolloutSample,
    SamplingOptions,
    WirePayload,
)

if TYPE_CHECKING:
    from serve.deployment import ReplicaPlacement

DEPLOYMENT = "rollout"
logger = logging.getLogger(__name__)
# how often `RolloutClient.wait_until_running` asks Serve's controller (serve.run itself asks every 0.1 s)
STATUS_POLL_S = 0.5


class RolloutStartFailed(RuntimeError):
    """The rollout application's replicas could not start (Serve's DEPLOY_FAILED, with its message), or the
    application is gone."""


class RolloutClient:
    """Trainer-side view of one rollout application. Cheap to pickle: it holds names, not handles."""

    def __init__(self, app_name: str, rollout: Any):
        self.app_name = app_name
        self.rollout = rollout  # the RolloutConfig (duck-typed): sampling defaults, replicas, max_num_seqs
        self._handle = None
        self.faults = FaultCounts()  # replica deaths this client met, and the calls it resent

    def __getstate__(self):
        return {"app_name": self.app_name, "rollout": self.rollout, "_handle": None, "faults": FaultCounts()}

    def retry_policy(self) -> RetryPolicy:
        """How often and for how long a call whose replica died is resent (`rollout.replica_retry_*`)."""
        return RetryPolicy.from_rollout_config(self.rollout)

    def take_faults(self) -> tuple[set[str], int]:
        """(the replicas seen dying, the calls resent) since the last call."""
        return self.faults.take()

    def wait_until_running(self) -> None:
        """Return once every replica of the application serves (Serve's RUNNING); `RolloutStartFailed` if they cannot
        start. For an application deployed with `deploy_rollout(..., wait=False)`; at once for any other."""
        while True:
            status = serve.status().applications.get(self.app_name)
            if status is None:
                raise RolloutStartFailed(f"the rollout application {self.app_name!r} is no longer deployed")
            if status.status == "RUNNING":
                return
            if status.status == "DEPLOY_FAILED":  # Serve's message ends with the replica constructor's exception
                lines = [line.strip() for line in (status.message or "").splitlines() if line.strip()]
                raise RolloutStartFailed(
                    f"the rollout application {self.app_name!r} failed to start: "
                    f"{lines[-1] if lines else 'Serve gave no reason'} (Serve's controller log has the traceback)"
                )
            time.sleep(STATUS_POLL_S)  # Serve offers no call that blocks until an application runs; serve.run polls too

    @property
    def handle(self):
        if self._handle is None:
            self._handle = serve.get_deployment_handle(DEPLOYMENT, self.app_name)
        return self._handle

    # ------------------------------------------------------------------ sampling
    def sampling(self, *, validation: bool = False, max_tokens: Optional[int] = None, **overrides) -> SamplingOptions:
        """Options from the config (`val_kwargs` when `validation`), with keyword overrides, e.g. seed=1."""
        base = SamplingOptions.from_rollout_config(self.rollout, validation=validation, max_tokens=max_tokens)
        return SamplingOptions(**{**base.__dict__, **overrides}) if overrides else base

    def _chunks(self, num_prompts: int, n: int) -> list[tuple[int, int]]:
        """[start, stop) slices: at least one per replica, none over what one engine schedules at once."""
        replicas = max(1, self.rollout.replicas)
        per_engine = max(1, self.rollout.max_num_seqs // n)
        size = max(1, min(math.ceil(num_prompts / replicas), per_engine))
        return [(s, min(s + size, num_prompts)) for s in range(0, num_prompts, size)]

    def generate_iter(
        self,
        prompt_token_ids: Sequence[Sequence[int]],
        *,
        expect_version: int,
        sampling: Optional[SamplingOptions] = None,
        validation: bool = False,
    ) -> Iterator[list[RolloutSample]]:
        """Like `generate`, but yields each chunk's samples as soon as that chunk finishes (any order)."""
        if sampling is None:
            sampling = self.sampling(validation=validation)
        prompts = [list(map(int, p)) for p in prompt_token_ids]
        retry = self.retry_policy()

        def run_chunk(a: int, b: int) -> list[RolloutSample]:
            # each chunk on its own: a replica that dies takes only its chunks with it, and only those are resent
            def call(timeout_s: Optional[float]) -> list[RolloutSample]:
                return _result(self.handle.generate.remote(prompts[a:b], sampling, expect_version, a), timeout_s)

            return retry.run(call, f"generate of prompts [{a}, {b}) at policy version {expect_version}", self.faults)

        chunks = self._chunks(len(prompts), sampling.n)
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(chunks))) as pool:
            futures = [pool.submit(run_chunk, a, b) for a, b in chunks]
            for future in concurrent.futures.as_completed(futures):
                yield future.result()

    def generate(
        self,
        prompt_token_ids: Sequence[Sequence[int]],
        *,
        expect_version: int,
        sampling: Optional[SamplingOptions] = None,
        validation: bool = False,
    ) -> list[RolloutSample]:
        """`n` samples for every prompt, sorted by (prompt_index, sample_index).

        `prompt_token_ids`: one list of token ids per prompt (already chat-templated, no padding).
        `sampling`: None takes `actor_rollout_ref.rollout.*`, or its `val_kwargs` when `validation=True`.
        `expect_version`: the policy version the caller believes the replicas serve; any replica serving another
        raises `PolicyVersionMismatch` (message names both versions). The batch is split into chunks that Serve
        spreads over the replicas. A chunk whose replica dies is sent again at the same version, within
        `rollout.replica_retry_max` / `replica_retry_timeout_s` (`ReplicaRetryExhausted` past them); the other chunks
        are not (docs/fault_tolerance.md).
        """
        samples = [
            s
            for chunk in self.generate_iter(
                prompt_token_ids, expect_version=expect_version, sampling=sampling, validation=validation
            )
            for s in chunk
        ]
        samples.sort(key=lambda s: (s.prompt_index, s.sample_index))
        return samples

    # ------------------------------------------------------------------ weights
    def update_weights(
        self, version: int, payload: Union[FullWeights, LoraAdapter, MergedLora], chunk_bytes: int = DEFAULT_CHUNK_BYTES
    ) -> dict[str, int]:
        """Send `payload` through the object store to every replica as policy `version`.

        Full fine-tuning: `FullWeights(state_dict)` with HF names. LoRA: `LoraAdapter(adapter_config, adapter
        state dict)` in peft format; each version becomes a new adapter in vLLM. `MergedLora(...)`: the same adapter,
        which each replica folds into its model folder's base weights (vLLM then runs no LoRA kernels). Returns
        {replica: version} for every replica (all equal to `version`); a replica that dies meanwhile is replaced, and
        its replacement serves
        `version` before this returns (`_broadcast_version`).
        """
        wire = to_wire(payload, chunk_bytes)
        return self._broadcast_version("update_weights", version, wire)

    def replica_versions(self) -> dict[str, int]:
        """{replica tag: policy version} for every live replica."""
        out = self.handle.broadcast("policy_version").results()
        return {r["replica"]: r["version"] for r in out}

    def weights_checksums(self) -> list[dict]:
        """One entry per live replica: {replica, node_id (the Ray node it runs on), version, weights_from_node (the
        node that put its last synced payload; None before any), digest (of the engine's weights: equal digests,
        equal weights), weights_sum (float64 sum of the last full weights it loaded, comparable with
        `serve.payload.weights_sum` of the tensors the trainer sent; None before any)}."""
        return self.handle.broadcast("weights_checksum").results()

    def _broadcast_version(self, method: str, version: int, wire: WirePayload) -> dict[str, int]:
        """`method(version, wire)` on every replica; returns once as many replicas as the first broadcast reached
        all serve `version`.

        A replica that dies during the sync is replaced; its replacement replays the policy store, and the sync is
        sent again (as `ensure_version`, which loads nothing on a replica that already serves `version`) to the
        live replicas, and to any replica that came back on another version. Within the retry bounds; past them an
        error says which replicas hold which version."""
        retry = self.retry_policy()
        what = f"{method}(version={version})"
        deadline = time.monotonic() + retry.timeout_s
        methods = iter([method])  # then ensure_version
        reached: list[int] = []  # replicas the first broadcast reached, the dead ones included

        def send(timeout_s: Optional[float]) -> None:
            try:
                response = self.handle.broadcast(next(methods, "ensure_version"), version, wire)
                results = response.results(timeout_s=timeout_s, return_exceptions=True)
            except DeploymentUnavailableError:
                results = []  # no replica runs right now: the replacements replay the store or get a resend
            if not reached:
                reached.append(max(1, len(results)))
            errors = [r for r in results if isinstance(r, BaseException)]
            final = [e for e in errors if replica_death(e) is None]
            if final:
                cause = getattr(final[0], "cause", None) or final[0]  # a RayTaskError's str() is its traceback
                raise RuntimeError(f"{what} failed on a replica: {type(cause).__name__}: {cause}") from final[0]
            if errors:
                raise errors[0]  # a replica died: resent by the retry policy

        retry.run(send, what, self.faults)
        while True:
            versions = self._wait_for_replica_versions(reached[0], deadline)
            stale = {r: v for r, v in versions.items() if v != version}
            if not stale and len(versions) >= reached[0]:
                return versions
            if time.monotonic() >= deadline:
                raise ReplicaRetryExhausted(
                    f"{what}: replicas {versions} (of {reached[0]}) do not all serve version {version} after "
                    f"replica_retry_timeout_s={retry.timeout_s:g}; raise {RETRY_KEYS}"
                )
            if stale:
                logger.warning("%s: replicas %s came back on other versions; sending the sync again", what, stale)
                retry.run(send, what, self.faults)

    def _wait_for_replica_versions(self, count: int, deadline: float) -> dict[str, int]:
        """{replica: version} once `count` replicas answer, or what answers at `deadline`."""
        while True:
            try:
                versions = self.replica_versions()
            except Exception as err:  # a replica dying or none running: the controller is replacing it
                if replica_death(err) is None and not isinstance(err, DeploymentUnavailableError):
                    raise
                versions = {}
            if len(versions) >= count or time.monotonic() >= deadline:
                return versions
            time.sleep(0.5)

    # ------------------------------------------------------------------ colocated GPU placement
    def sleep(self, level: int = 1) -> None:
        """Free the engines' GPU memory (weights offloaded at level 1) while the trainer uses the GPUs."""
        self.handle.broadcast("sleep", level).results()

    def wake_up(self) -> None:
        self.handle.broadcast("wake_up").results()


def to_wire(
    payload: Union[FullWeights, LoraAdapter, MergedLora], chunk_bytes: int = DEFAULT_CHUNK_BYTES
) -> WirePayload:
    """`ray.put` the payload's tensors as safetensors chunks; the refs travel, the bytes stay in the object store
    of this node (named in the payload) until a replica on another node pulls them."""
    node = ray.get_runtime_context().get_node_id()
    if isinstance(payload, FullWeights):
        tensors = payload.tensors
        pairs = tensors.items() if isinstance(tensors, Mapping) else tensors
        refs, nbytes = [], 0
        for chunk in iter_encoded_chunks(pairs, chunk_bytes):  # each chunk to the object store as soon as it fills
            refs.append(ray.put(chunk))
            nbytes += chunk.nbytes
        return WirePayload("full", refs, nbytes, source_node=node)
    if isinstance(payload, (LoraAdapter, MergedLora)):
        chunks = encode_tensors(payload.tensors, chunk_bytes=1 << 62)  # one chunk: one adapter file
        merged = isinstance(payload, MergedLora)
        return WirePayload(
            "merged_lora" if merged else "lora",
            [ray.put(c) for c in chunks],
            sum(c.nbytes for c in chunks),
            adapter_config=_jsonable(dict(payload.adapter_config)),
            dtype=payload.dtype if merged else None,
            round_to=payload.round_to if merged else None,
            source_node=node,
        )
    raise TypeError(
        f"update_weights payload must be FullWeights, LoraAdapter or MergedLora, got {type(payload).__name__}"
    )


def _jsonable(config: dict) -> dict:
    """peft configs hold sets and enums; adapter_config.json needs plain JSON values."""
    import enum
    import json

    def convert(value):
        if isinstance(value, enum.Enum):
            return value.value
        if isinstance(value, (set, frozenset, tuple)):
            return [convert(v) for v in value]
        if isinstance(value, list):
            return [convert(v) for v in value]
        if isinstance(value, dict):
            return {str(k): convert(v) for k, v in value.items()}
        return value

    out = convert(config)
    json.dumps(out)  # fail here, in the trainer, rather than in a replica
    return out


def _result(response, timeout_s: Optional[float] = None):
    """The response's value; a TimeoutError after `timeout_s` (None: no limit) cancels the request first."""
    try:
        return response.result(timeout_s=timeout_s)
    except TimeoutError:
        response.cancel()
        raise
    except PolicyVersionMismatch:
        raise
    except ray.exceptions.RayTaskError as err:
        cause = getattr(err, "cause", None)
        if isinstance(cause, PolicyVersionMismatch):
            raise PolicyVersionMismatch(cause.expected, cause.actual, cause.replica) from None
        raise


# ---------------------------------------------------------------------- deploy / find
def deploy_rollout(
    rollout: Any,
    model_path: Union[str, os.PathLike],
    app_name: str,
    *,
    trust_remote_code: bool,
    tokenizer_path: Optional[str] = None,
    max_lora_rank: Optional[int] = None,
    route_prefix: Optional[str] = "/",
    seed: int = 0,
    placement: Optional["ReplicaPlacement"] = None,
    wait: bool = True,
    chat_template: Optional[str] = None,
    hf_overrides: Optional[Mapping[str, Any]] = None,
    external_libs: Sequence[str] = (),
) -> RolloutClient:
    """Deploy the rollout application `app_name` for `rollout` (a `RolloutConfig`) and return its client.

    Blocks until every replica's engine is up and serving policy version 0 (the weights at `model_path`); with
    `wait=False`, only until Serve holds the application, so that the caller can start other work while the replicas
    start (`RolloutClient.wait_until_running` then waits for them, or raises `RolloutStartFailed`).
    `trust_remote_code` is `actor_rollout_ref.model.trust_remote_code`; `tokenizer_path` is
    `actor_rollout_ref.model.tokenizer_path` (None: the model folder's tokenizer). `max_lora_rank` enables LoRA (each
    `update_weights(LoraAdapter)` then adds an adapter). The HTTP proxy binds to
    `rollout.http_host:rollout.http_port` (127.0.0.1 by default) if Serve is not running yet; `route_prefix=None`
    serves no HTTP for this application. `placement`: what each replica holds (None: one CPU bundle,
    `ReplicaPlacement.on_cpu`). `chat_template`: the OpenAI chat route's template (`model.custom_chat_template`;
    None: the tokenizer's). `hf_overrides`: Hugging Face config fields each engine sets on the model's config
    (`model.override_config`). `external_libs`: modules each replica imports before building its engine
    (`model.external_lib`). Requires `ray.init` first.
    """
    from serve.deployment import build_rollout_app
    from serve.instance import start_serve

    RetryPolicy.from_rollout_config(rollout)  # a bad retry bound fails here, before any replica starts
    start_serve(rollout)
    app = build_rollout_app(
        rollout,
        str(model_path),
        trust_remote_code=trust_remote_code,
        tokenizer_path=tokenizer_path,
        max_lora_rank=max_lora_rank,
        seed=seed,
        served_model_name=app_name,
        placement=placement,
        chat_template=chat_template,
        hf_overrides=hf_overrides,
        external_libs=external_libs,
    )
    serve.run_many([serve.RunTarget(app, name=app_name, route_prefix=route_prefix)], wait_for_applications_running=wait)
    return RolloutClient(app_name, rollout)


def get_rollout_client(app_name: str, rollout: Any) -> RolloutClient:
    """The client of an application deployed elsewhere (e.g. inside a Ray Train worker)."""
    status = serve.status().applications.get(app_name)
    if status is None:
        raise LookupError(f"no Serve application named {app_name!r}; deploy it with deploy_rollout first")
    return RolloutClient(app_name, rollout)


def wait_for_replicas(app_name: str, count: int, timeout_s: float = 300.0, exclude: Sequence[str] = ()) -> list[str]:
    """Block until `count` replicas of the app run, none of them in `exclude`; returns their tags."""
    deadline = time.monotonic() + timeout_s
    handle = serve.get_deployment_handle(DEPLOYMENT, app_name)
    tags: list[str] = []
    while time.monotonic() < deadline:
        try:
            tags = [r["replica"] for r in handle.broadcast("policy_version").results(timeout_s=30)]
        except Exception:
            tags = []
        if len(tags) >= count and not set(tags) & set(exclude):
            return tags
        time.sleep(1.0)
    raise TimeoutError(f"{app_name}: wanted {count} replicas not in {list(exclude)}, have {tags}")
