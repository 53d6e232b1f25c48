"""The rollout service as the trainer's ranks drive it: which policy version it serves, what one weight sync sends
and how, and (colocated GPU placement) when vLLM gives its memory back.

What one sync sends, by the engine's model and `rollout.lora_sync`:
- full fine-tuning: every weight, streamed one gathered tensor at a time (`FullWeights`);
- LoRA with `lora_sync=adapter`: the adapter alone, in the rollout dtype (`LoraAdapter`; vLLM applies it with its LoRA
  kernels);
- LoRA with `lora_sync=merged`: the adapter alone, in float32 (`MergedLora`); each replica folds it into the base
  weights of its own model folder (`serve.lora_fold`), so a few MB travel instead of every merged weight (540 MB for
  SmolLM2-135M in fp32). A model folder without safetensors files has nothing to fold into: the trainer then merges
  and streams full weights itself, as vLLM would receive them either way. With `rollout.lora_fold_dtype` either fold
  rounds the weights the adapter wraps to that dtype first.

Every rank builds the payload (the gathers are collective); rank 0's tensors are sent, and the other ranks read their
stream to the end so that their gathers run alongside rank 0's.
"""

from __future__ import annotations

from typing import Any, Iterator, Optional, Protocol, Union

import torch

from app.engine import BaseEngine
from app.trainer.collectives import RankGroup
from serve.lora_fold import adapter_pairs, checkpoint_files
from serve.types import FullWeights, LoraAdapter, MergedLora


class RolloutService(Protocol):
    """What the loop needs from the rollout deployment (`serve.RolloutClient`)."""

    def generate(
        self, prompt_token_ids: list[list[int]], *, expect_version: int, validation: bool = False
    ) -> list[Any]: ...
    # payload: FullWeights (its tensors a one-pass stream of (name, tensor) that must be read to the end: every rank's
    # gathers advance with it), LoraAdapter or MergedLora
    def update_weights(self, version: int, payload: Any) -> Any: ...
    def replica_versions(self) -> dict[str, int]: ...
    def sleep(self) -> None: ...
    def wake_up(self) -> None: ...
    # (replicas seen dying, calls resent) since the last call
    def take_faults(self) -> tuple[set[str], int]: ...


def rollout_payload(
    engine: BaseEngine,
    *,
    lora_sync: str,
    model_path: str,
    dtype: torch.dtype,
    fold_round_to: Optional[torch.dtype] = None,
) -> Union[FullWeights, LoraAdapter, MergedLora]:
    """What one sync sends (see the module docstring), built from the engine's per-tensor stream or its LoRA adapter
    state: the one place where the engine's weights become `serve.types` payloads. Every rank calls it (and reads a
    `FullWeights` stream to the end): the gathers are collective. `fold_round_to`: `rollout.lora_fold_dtype`."""
    if not engine.has_adapter:
        return FullWeights(tensors=engine.get_per_tensor_param(dtype=dtype))
    if lora_sync == "adapter":
        adapter_config, tensors = engine.lora_adapter_state(dtype=dtype)
        return LoraAdapter(adapter_config=adapter_config, tensors=tensors)
    if checkpoint_files(model_path):
        # dtype None: the trainer's own float32 tensors, which each replica's fold starts from
        adapter_config, tensors = engine.lora_adapter_state(dtype=None)
        return MergedLora(
            adapter_config=adapter_config,
            tensors=tensors,
            dtype=_dtype_name(dtype),
            round_to=fold_round_to and _dtype_name(fold_round_to),
        )
    stream = engine.get_per_tensor_param(dtype=dtype, merge_lora=True)
    if fold_round_to is None:
        return FullWeights(tensors=stream)
    wrapped = set(adapter_pairs(engine.lora_adapter_state(dtype=None)[1]))  # merged weight names, as a fold's
    return FullWeights(tensors=_rounded(stream, wrapped, fold_round_to, dtype))


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _rounded(
    stream: Iterator[tuple[str, torch.Tensor]], names: set[str], round_to: torch.dtype, dtype: torch.dtype
) -> Iterator[tuple[str, torch.Tensor]]:
    """The trainer's merged stream with the weights in `names` rounded to `round_to` and back to `dtype`, as the
    replicas' fold rounds them (`serve.lora_fold.fold`); the merge was computed in float32 either way."""
    for name, tensor in stream:
        yield name, tensor.to(round_to).to(dtype) if name in names else tensor


class RolloutSync:
    """Every rank calls each method together (they hold barriers); rank 0 alone talks to the service.

    `sleeps`: colocated GPU placement with `rollout.free_cache_engine`: vLLM frees its memory while the trainer runs.
    """

    def __init__(
        self,
        service: RolloutService,
        ranks: RankGroup,
        engine: BaseEngine,
        *,
        lora_sync: str,
        model_path: str,
        dtype: torch.dtype,
        sleeps: bool,
        fold_round_to: Optional[torch.dtype] = None,
    ) -> None:
        self.service, self.ranks, self.engine = service, ranks, engine
        self.lora_sync, self.model_path, self.dtype = lora_sync, model_path, dtype
        self.fold_round_to = fold_round_to
        self.sleeps = sleeps
        self.asleep = False

    def served_version(self) -> int:
        """The version every replica serves; they agree after any completed sync."""
        versions = set(self.service.replica_versions().values())
        if len(versions) != 1:
            raise RuntimeError(f"rollout replicas disagree on the policy version: {sorted(versions)}")
        return versions.pop()

    def push(self, version: int) -> None:
        """Send the engine's weights (or LoRA adapter) as `version`; every rank returns once the service has it."""
        self.wake_up()
        payload = rollout_payload(
            self.engine,
            lora_sync=self.lora_sync,
            model_path=self.model_path,
            dtype=self.dtype,
            fold_round_to=self.fold_round_to,
        )
        if self.ranks.rank == 0:
            self.service.update_weights(version, payload)
        elif isinstance(payload, FullWeights):
            for _ in payload.tensors:  # the gathers rank 0 runs while it sends
                pass
        self.ranks.barrier()

    def release_memory(self) -> None:
        """After a rollout, when `sleeps`: every rank has finished sampling before the engines release their memory."""
        if not self.sleeps:
            return
        self.ranks.barrier()
        if self.ranks.rank == 0:
            self.service.sleep()
        self.ranks.barrier()
        self.asleep = True

    def wake_up(self) -> None:
        """Before the next rollout or sync: a no-op unless `release_memory` put the engines to sleep."""
        if not self.asleep:
            return
        if self.ranks.rank == 0:
            self.service.wake_up()
        self.ranks.barrier()
        self.asleep = False

    def fault_metrics(self) -> dict[str, float]:
        """Rollout replicas that died under this step's calls (each counted once, whichever ranks met it) and the
        calls resent to their replacements (`serve.replica_retry`). Collective."""
        dead, resent = self.service.take_faults()
        return {
            "rollout/replica_restarts": float(len(self.ranks.union(dead))),
            "rollout/retried_requests": self.ranks.sum(float(resent)),
        }
