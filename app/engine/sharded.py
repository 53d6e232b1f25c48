"""What the data-parallel engines (FSDP2, DeepSpeed) share: micro-batching and the forward/backward loop, the
collectives over ranks, LoRA switching, the per-tensor weight stream, the Hugging Face export and the extra
checkpoint state. A subclass wraps the model its own way and supplies the hooks below; roles see only ``BaseEngine``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from typing import Any, ContextManager, Iterator, Optional, Sequence

import torch
import torch.distributed as dist

from app.batch import TensorBatch
from app.engine import hf_model
from app.engine.base import BaseEngine, LossFn, PostprocessFn, PreprocessFn, StepContext, StepResult
from app.engine.distributed import reduce_op
from app.engine.forward import response_outputs
from app.engine.micro_batches import (
    check_budget,
    fixed_size_groups,
    num_bins_for_budget,
    restore_order,
    token_budget_groups,
)
from app.engine.packed_attention import PACKED_SDPA
from app.engine.sequence_parallel import KEY as SP_KEY
from app.engine.sequence_parallel import SequenceParallel
from app.engine.spec import EngineSpec
from app.engine.weight_stream import stream_sync_tensors

EXTRA_STATE = "engine_state.pt"


def resolve_auto_param_dtype(spec: EngineSpec, device: torch.device) -> EngineSpec:
    """``param_dtype="auto"`` (a config validation did not resolve it): decide for the device we run on."""
    if spec.param_dtype != "auto":
        return spec
    from app.engine.precision import cpu_has_native_bf16, resolve_auto_dtype

    return dataclasses.replace(spec, param_dtype=resolve_auto_dtype(device.type == "cuda", cpu_has_native_bf16())[0])


class ShardedEngine(BaseEngine):
    """Subclasses set ``spec``, ``device``, ``model``, ``optimizer`` (torch's; None for inference), ``lr_scheduler``
    and ``_attn_implementation``, and implement ``_gathered`` and, where they differ, the other hooks."""

    spec: EngineSpec
    device: torch.device
    model: Optional[torch.nn.Module] = None  # the Hugging Face (or peft) model, with its own parameter names
    optimizer: Optional[torch.optim.Optimizer] = None
    lr_scheduler: Optional[torch.optim.lr_scheduler.LRScheduler] = None
    _loss_fn: Optional[LossFn] = None
    _attn_implementation: Optional[str] = None
    _sp: Optional[SequenceParallel] = None  # this rank's Ulysses sequence-parallel group (None: off)

    # ------------------------------------------------------------------ hooks
    def _require_model(self) -> torch.nn.Module:
        if self.model is None:
            raise RuntimeError("engine used before init_model()")
        return self.model

    def _compute_module(self) -> torch.nn.Module:
        """What a forward calls (the model, or the wrapper whose hooks must run)."""
        return self._require_model()

    def _backward(self, loss: torch.Tensor, last_micro_batch: bool) -> None:
        loss.backward()

    def _on_device(self) -> ContextManager[None]:
        """Context around compute: parameters on the compute device."""
        return contextlib.nullcontext()

    def _after_forward_only(self) -> None:
        """Release what a forward without backward left gathered."""

    def _gathered(self, params: Sequence[torch.Tensor]) -> ContextManager[list[torch.Tensor]]:
        """Full copies of a few sharded parameters on every rank, freed on exit (collective)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ modes
    @contextlib.contextmanager
    def _mode(self, training: bool) -> Iterator[None]:
        self._require_model()
        self._compute_module().train(training)
        with self._on_device():
            yield

    def train_mode(self) -> ContextManager[None]:
        return self._mode(True)

    def eval_mode(self) -> ContextManager[None]:
        return self._mode(False)

    # ------------------------------------------------------------------ compute
    def set_loss_fn(self, loss_fn: LossFn) -> None:
        self._loss_fn = loss_fn

    def _micro_groups(self, batch: TensorBatch, ctx: StepContext) -> list[list[int]]:
        dynamic = self.spec.use_dynamic_bsz if ctx.use_dynamic_bsz is None else ctx.use_dynamic_bsz
        if dynamic:
            budget = ctx.max_token_len or self.spec.max_token_len_per_gpu
            key = ctx.max_token_len_key or ("max_token_len" if ctx.max_token_len else self.spec.max_token_len_key)
            if self._sp is not None:  # verl's meaning: the budget is per rank, a group holds size times as many
                budget, key = budget * self._sp.size, f"{key} (x{self._sp.size}: {SP_KEY})"
            lens = batch["attention_mask"].sum(dim=1).tolist()
            # every rank refuses together (one rank raising alone would leave the others in a collective)
            check_budget([int(self.all_reduce(torch.tensor(max(lens)), "max").item())], budget, key)
            count = num_bins_for_budget(lens, budget, key)
            # every rank must run the same number of forward/backward passes
            count = int(self.all_reduce(torch.tensor(count), "max").item())
            if count > len(lens):
                raise ValueError(
                    f"rank {self.dp_rank} has {len(lens)} samples but another rank needs {count} "
                    f"micro-batches for {key}={budget}: give every rank the same batch size"
                )
            return token_budget_groups(lens, budget, count, key)
        size = ctx.micro_batch_size or self.spec.micro_batch_size_per_gpu
        groups = fixed_size_groups(len(batch), size)
        counts = self.all_reduce(torch.tensor([len(groups), -len(groups)]), "max")
        if int(counts[0]) != -int(counts[1]):
            raise ValueError(
                f"ranks disagree on the number of micro-batches (rank {self.dp_rank}: {len(groups)} for "
                f"{len(batch)} samples, micro batch size {size}): give every rank the same batch size"
            )
        return groups

    def _shares_prompts(self) -> bool:
        """Shared-prompt packing needs the packed sdpa attention (flash-attention's varlen kernel cannot express it)."""
        return (
            self.spec.use_remove_padding and self.spec.share_prompt_prefix and self._attn_implementation == PACKED_SDPA
        )

    def forward_backward_step(
        self,
        batch: TensorBatch,
        ctx: Optional[StepContext] = None,
        forward_only: bool = False,
        preprocess_fn: Optional[PreprocessFn] = None,
        postprocess_fn: Optional[PostprocessFn] = None,
    ) -> StepResult:
        self._require_model()
        ctx = ctx or StepContext()
        if not forward_only and self._loss_fn is None:
            raise RuntimeError("forward_backward_step(forward_only=False) needs a loss: call set_loss_fn first")
        own = None
        if self._sp is not None:  # every rank of the group computes the group's samples together
            batch, own, response_width = self._sp.pool(batch)
        forward = response_outputs if self._sp is None else self._sp.response_outputs
        groups = self._micro_groups(batch, ctx)
        out_device = batch["input_ids"].device
        outputs: list[TensorBatch] = []
        sums: dict[str, float] = {}
        weights: dict[str, float] = {}
        loss_total = 0.0
        with self._on_device():
            module = self._compute_module()
            for index, group in enumerate(groups):
                micro = batch.index(group).to(self.device)
                if preprocess_fn is not None:
                    micro = preprocess_fn(micro, ctx)
                with torch.set_grad_enabled(not forward_only):
                    out = forward(
                        module,
                        micro,
                        model_kind=self.spec.model_kind,
                        remove_padding=self.spec.use_remove_padding,
                        share_prompts=self._shares_prompts(),
                        temperature=ctx.temperature,
                        compute_entropy=ctx.compute_entropy,
                        entropy_requires_grad=ctx.entropy_requires_grad and not forward_only,
                        chunk_size=self.spec.logits_chunk_size,
                        compute_sum_pi_squared=ctx.compute_sum_pi_squared,
                    )
                    if not forward_only:
                        loss, metrics = self._loss_fn(out, micro, ctx)
                        self._backward(loss, last_micro_batch=index == len(groups) - 1)
                        loss_total += float(loss.detach())
                        for name, value in metrics.items():
                            value, weight = value if isinstance(value, tuple) else (value, 1.0)
                            sums[name] = sums.get(name, 0.0) + float(value) * float(weight)
                            weights[name] = weights.get(name, 0.0) + float(weight)
                if postprocess_fn is not None:
                    out = postprocess_fn(out, micro, ctx)
                outputs.append(TensorBatch({k: v.detach().to(out_device) for k, v in out.items()}))
            if forward_only:
                self._after_forward_only()
        merged = TensorBatch.concat(outputs).index(restore_order(groups)) if len(groups) > 1 else outputs[0]
        metrics = {k: sums[k] / weights[k] if weights[k] else 0.0 for k in sums}
        if own is not None:
            # this rank's rows at its own response width; its share of the group's loss, so that sums and means
            # over ranks stay those without sequence parallelism
            merged = TensorBatch(
                {k: v[:, :response_width] if v.dim() >= 2 else v for k, v in merged.index(own).tensors.items()},
                dict(merged.meta),
            )
            loss_total /= self._sp.size
        return StepResult(outputs=merged, metrics=metrics, loss=loss_total)

    # ------------------------------------------------------------------ optimizer
    def _require_optimizer(self) -> torch.optim.Optimizer:
        if self.optimizer is None:
            raise RuntimeError("this engine has no optimizer (EngineSpec.optim is None: an inference-only model)")
        return self.optimizer

    def lr_scheduler_step(self) -> float:
        self._require_optimizer()
        self.lr_scheduler.step()
        return self.get_lr()

    def get_lr(self) -> float:
        return float(self._require_optimizer().param_groups[0]["lr"])

    # ------------------------------------------------------------------ data parallelism
    @property
    def dp_rank(self) -> int:
        return dist.get_rank() if dist.is_initialized() else 0

    @property
    def dp_world_size(self) -> int:
        return dist.get_world_size() if dist.is_initialized() else 1

    def all_reduce(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
        if self.dp_world_size == 1:
            return tensor.clone()
        work = tensor.detach().to(self.device, copy=True)
        dist.all_reduce(work, op=reduce_op(op))
        if op == "mean":
            work = work / self.dp_world_size
        return work.to(tensor.device)

    def shard_data(self, batch: TensorBatch) -> TensorBatch:
        world = self.dp_world_size
        if len(batch) % world:
            raise ValueError(f"batch of {len(batch)} samples cannot be split evenly over {world} ranks")
        return batch.chunk(world)[self.dp_rank]

    def unshard_data(self, batch: TensorBatch) -> TensorBatch:
        if self.dp_world_size == 1:
            return batch
        parts: list[Any] = [None] * self.dp_world_size
        dist.all_gather_object(parts, batch.to("cpu").tensors)
        device = next(iter(batch.tensors.values())).device if len(batch.keys()) else torch.device("cpu")
        return TensorBatch.concat([TensorBatch(p, dict(batch.meta)) for p in parts]).to(device)

    # ------------------------------------------------------------------ checkpoint side state
    def _save_extra_state(self, path: str) -> None:
        """Rank 0: what the sharded model/optimizer files do not hold (plain data, loadable weights-only)."""
        if self.dp_rank == 0:
            extra = {
                "lr_scheduler": self.lr_scheduler.state_dict() if self.lr_scheduler else None,
                "world_size": self.dp_world_size,
                "model_path": self.spec.model_path,
            }
            torch.save(extra, os.path.join(path, EXTRA_STATE))

    def _check_is_checkpoint(self, path: str) -> None:
        if not os.path.isfile(os.path.join(path, EXTRA_STATE)):
            raise FileNotFoundError(f"{path} is not an engine checkpoint (no {EXTRA_STATE})")

    def _load_extra_state(self, path: str) -> None:
        extra = torch.load(os.path.join(path, EXTRA_STATE), weights_only=True)  # plain data: no objects unpickled
        if self.lr_scheduler is not None and extra.get("lr_scheduler") is not None:
            self.lr_scheduler.load_state_dict(extra["lr_scheduler"])

    # ------------------------------------------------------------------ weights for rollout and export
    @property
    def has_adapter(self) -> bool:
        return self.spec.use_lora

    def _require_adapter(self, method: str) -> None:
        if not self.has_adapter:
            raise RuntimeError(f"{method}() needs a LoRA engine (actor_rollout_ref.model.lora_rank > 0)")

    @contextlib.contextmanager
    def disable_adapter(self) -> Iterator[None]:
        self._require_adapter("disable_adapter")
        # Flip only the LoRA layers' "disabled" flag. peft's own disable_adapter() also turns requires_grad off and
        # on again, and FSDP2 then reduces the next micro-batches' bf16 gradients without the fp32 cast and fails.
        from peft.tuners.lora import LoraLayer

        layers = [m for m in self._require_model().modules() if isinstance(m, LoraLayer)]
        previous = [layer._disable_adapters for layer in layers]
        for layer in layers:
            layer._disable_adapters = True
        try:
            yield
        finally:
            for layer, was in zip(layers, previous):
                layer._disable_adapters = was

    @property
    def _tied_embeddings(self) -> bool:
        return bool(getattr(self._require_model().config, "tie_word_embeddings", False))

    def get_per_tensor_param(
        self, dtype: Optional[torch.dtype] = None, merge_lora: bool = False
    ) -> Iterator[tuple[str, torch.Tensor]]:
        model = self._require_model()
        scaling = self.spec.lora_alpha / self.spec.lora_rank if self.has_adapter else None
        return stream_sync_tensors(
            model,
            self._gathered,
            adapter_only=self.has_adapter and not merge_lora,
            lora_scaling=scaling,
            tied_embeddings=self._tied_embeddings,
            dtype=dtype,
        )

    def lora_adapter_state(self, dtype: Optional[torch.dtype] = None) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
        """From the per-tensor stream; rank 0 keeps the tensors, the other ranks only take part in the gathers."""
        self._require_adapter("lora_adapter_state")
        keep = self.dp_rank == 0
        tensors = {name: t for name, t in self.get_per_tensor_param(dtype) if keep}
        config = hf_model.adapter_config_dict(self._require_model(), self.spec.model_path) if keep else {}
        return config, tensors

    def export_hf(self, path: str, dtype: Optional[torch.dtype] = None) -> None:
        keep = self.dp_rank == 0  # every rank takes part in the gathers; rank 0 keeps the merged weights and writes
        state = {name: t for name, t in self.get_per_tensor_param(dtype, merge_lora=True) if keep}
        if keep:
            hf_model.save_hf_folder(path, state, self.spec)
        dist.barrier()
