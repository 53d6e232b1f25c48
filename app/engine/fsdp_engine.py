"""The FSDP2 engine: one Hugging Face model sharded with ``torch.distributed.fsdp.fully_shard``.

- Each decoder layer is one FSDP unit, the root holds embeddings, final norm and head (tied weights stay together).
- Mixed precision: master weights in ``model_dtype`` (fp32 by default; the optimizer steps these), compute in
  ``param_dtype`` (bf16 by default: on an AVX512-BF16/AMX CPU a bf16 matmul is ~4x fp32), gradients reduced in
  ``reduce_dtype``.
- Offload: with ``param_offload`` / ``optimizer_offload`` the parameters / optimizer state live on the CPU between
  uses (no-ops on a CPU device).
- gloo on CPU, NCCL on GPU; a process without a group gets a one-rank group.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import os
import shutil
from typing import Any, Iterator, Optional

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict, get_state_dict,
                                                     set_model_state_dict, set_state_dict)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor

from app.batch import TensorBatch
from app.engine import hf_model
from app.engine.base import BaseEngine, LossFn, PostprocessFn, PreprocessFn, StepContext, StepResult, \
    WeightSyncPayload
from app.engine.distributed import ensure_process_group, pick_device, reduce_op
from app.engine.forward import response_outputs
from app.engine.lr_schedule import build_lr_scheduler
from app.engine.lora_fast_path import use_fused_lora_forward
from app.engine.micro_batches import balanced_groups, fixed_size_groups, num_bins_for_budget, restore_order
from app.engine.packed_attention import PACKED_SDPA
from app.engine.spec import EngineSpec, to_dtype

_EXTRA_STATE = "engine_state.pt"
# tokenizer and generation files copied next to exported weights so the folder is a complete HF model
_HF_SIDE_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt",
                  "tokenizer.model", "added_tokens.json", "chat_template.jinja", "chat_template.json",
                  "generation_config.json")


@functools.cache
def _compiled_layer_forward():
    def layer_forward(layer: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        return type(layer).forward(layer, *args, **kwargs)

    return torch.compile(layer_forward, dynamic=True)


class FSDPEngine(BaseEngine):
    def __init__(self, spec: EngineSpec) -> None:
        self.device = pick_device(spec.device)
        if spec.param_dtype == "auto":  # a config validation did not resolve it: decide for the device we run on
            from app.config.precision import cpu_has_native_bf16, resolve_auto_dtype

            spec = dataclasses.replace(spec, param_dtype=resolve_auto_dtype(self.device.type == "cuda",
                                                                            cpu_has_native_bf16())[0])
        self.spec = spec
        self.model: Optional[torch.nn.Module] = None
        self.optimizer: Optional[torch.optim.Optimizer] = None
        self.lr_scheduler: Optional[torch.optim.lr_scheduler.LRScheduler] = None
        self._loss_fn: Optional[LossFn] = None
        self._attn_implementation: Optional[str] = None  # chosen for the device when the model is built

    # ------------------------------------------------------------------ lifecycle
    def init_model(self) -> None:
        spec = self.spec
        ensure_process_group(self.device.type)
        master_dtype = to_dtype(spec.model_dtype, "fsdp_config.model_dtype")
        # Weights the optimiser never steps (a LoRA base, an inference-only reference) are stored in the dtype they
        # are computed in: a wider copy would be cast down at every forward anyway and only cost memory.
        frozen_base = spec.use_lora or spec.optim is None
        load_dtype = to_dtype(spec.param_dtype, "fsdp_config.mixed_precision.param_dtype") if frozen_base \
            else master_dtype
        with torch.random.fork_rng(devices=[]):  # the caller's RNG stream is left untouched
            torch.manual_seed(spec.seed)  # identical fresh heads / adapters on every rank
            self._attn_implementation = hf_model.attention_implementation(self.device)
            model = hf_model.load_model(spec, load_dtype, self._attn_implementation)
            if spec.enable_gradient_checkpointing:
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            if spec.use_lora:
                model = hf_model.apply_lora(model, spec)
                use_fused_lora_forward(model)
        if spec.use_lora:  # adapters (and a value head) are what the optimiser steps: master dtype
            for p in model.parameters():
                if p.requires_grad:
                    p.data = p.data.to(master_dtype)
        buffer_dtype = to_dtype(spec.buffer_dtype, "fsdp_config.mixed_precision.buffer_dtype")
        for buf_owner in model.modules():
            for name, buf in buf_owner.named_buffers(recurse=False):
                if buf.is_floating_point():
                    setattr(buf_owner, name, buf.to(buffer_dtype))
        self.model = self._shard(model)
        self.model.to(self.device)
        if spec.optim is not None:
            trainable = [p for p in self.model.parameters() if p.requires_grad]
            self.optimizer = torch.optim.AdamW(trainable, lr=spec.optim.lr, betas=tuple(spec.optim.betas),
                                               weight_decay=spec.optim.weight_decay)
            self.lr_scheduler = build_lr_scheduler(self.optimizer, spec.optim)
        if spec.param_offload:
            self.to("cpu", model=True, optimizer=False)

    def _shard(self, model: torch.nn.Module) -> torch.nn.Module:
        spec = self.spec
        mesh = init_device_mesh(self.device.type, (dist.get_world_size(),))
        param_dtype = to_dtype(spec.param_dtype, "fsdp_config.mixed_precision.param_dtype")
        reduce_dtype = to_dtype(spec.reduce_dtype, "fsdp_config.mixed_precision.reduce_dtype")
        mp = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype, cast_forward_inputs=True)
        layer_names = hf_model.decoder_layer_class_names(model)
        # one rank: keep each layer's gathered (compute-dtype) weights from forward to backward instead of
        # re-gathering, i.e. re-copying and re-casting, them (costs one bf16 copy of the model)
        reshard = dist.get_world_size() > 1
        for module in model.modules():
            if type(module).__name__ in layer_names:
                fully_shard(module, mesh=mesh, mp_policy=mp, reshard_after_forward=reshard)
                if spec.compile_layers:
                    # compile forward, not __call__: FSDP's gather/reshard hooks stay eager and parameter names
                    # (state dicts, weight sync) stay unchanged. One compiled function takes the layer as an
                    # argument, so all layers share one graph instead of recompiling per layer instance.
                    module.forward = functools.partial(_compiled_layer_forward(), module)
        fully_shard(model, mesh=mesh, mp_policy=mp)
        return model

    def _require_model(self) -> torch.nn.Module:
        if self.model is None:
            raise RuntimeError("engine used before init_model()")
        return self.model

    @contextlib.contextmanager
    def _on_device(self) -> Iterator[None]:
        if self.spec.param_offload and self.device.type != "cpu":
            self.to("device", model=True, optimizer=False)
            try:
                yield
            finally:
                self.to("cpu", model=True, optimizer=False)
        else:
            yield

    @contextlib.contextmanager
    def train_mode(self) -> Iterator[None]:
        model = self._require_model()
        model.train()
        with self._on_device():
            yield

    @contextlib.contextmanager
    def eval_mode(self) -> Iterator[None]:
        model = self._require_model()
        model.eval()
        with self._on_device():
            yield

    # ------------------------------------------------------------------ compute
    def set_loss_fn(self, loss_fn: LossFn) -> None:
        self._loss_fn = loss_fn

    def _micro_groups(self, batch: TensorBatch, ctx: StepContext) -> list[list[int]]:
        dynamic = self.spec.use_dynamic_bsz if ctx.use_dynamic_bsz is None else ctx.use_dynamic_bsz
        if dynamic:
            budget = ctx.max_token_len or self.spec.max_token_len_per_gpu
            lens = batch["attention_mask"].sum(dim=1).tolist()
            count = num_bins_for_budget(lens, budget)
            # every rank must run the same number of forward/backward passes
            count = int(self.all_reduce(torch.tensor(count), "max").item())
            if count > len(lens):
                raise ValueError(f"rank {self.dp_rank} has {len(lens)} samples but another rank needs {count} "
                                 f"micro-batches for max_token_len={budget}: give every rank the same batch size")
            return balanced_groups(lens, count)
        size = ctx.micro_batch_size or self.spec.micro_batch_size_per_gpu
        groups = fixed_size_groups(len(batch), size)
        counts = self.all_reduce(torch.tensor([len(groups), -len(groups)]), "max")
        if int(counts[0]) != -int(counts[1]):
            raise ValueError(f"ranks disagree on the number of micro-batches (rank {self.dp_rank}: {len(groups)} for "
                             f"{len(batch)} samples, micro batch size {size}): give every rank the same batch size")
        return groups

    def _shares_prompts(self) -> bool:
        """Shared-prompt packing needs the packed sdpa attention (flash-attention's varlen kernel cannot express it)."""
        return (self.spec.use_remove_padding and self.spec.share_prompt_prefix
                and self._attn_implementation == PACKED_SDPA)

    def forward_backward_step(self, batch: TensorBatch, ctx: Optional[StepContext] = None, forward_only: bool = False,
                              preprocess_fn: Optional[PreprocessFn] = None,
                              postprocess_fn: Optional[PostprocessFn] = None) -> StepResult:
        model = self._require_model()
        ctx = ctx or StepContext()
        if not forward_only and self._loss_fn is None:
            raise RuntimeError("forward_backward_step(forward_only=False) needs a loss: call set_loss_fn first")
        groups = self._micro_groups(batch, ctx)
        out_device = batch["input_ids"].device
        outputs: list[TensorBatch] = []
        sums: dict[str, float] = {}
        weights: dict[str, float] = {}
        loss_total = 0.0
        with self._on_device():
            for group in groups:
                micro = batch.index(group).to(self.device)
                if preprocess_fn is not None:
                    micro = preprocess_fn(micro, ctx)
                with torch.set_grad_enabled(not forward_only):
                    out = response_outputs(model, micro, model_kind=self.spec.model_kind,
                                           remove_padding=self.spec.use_remove_padding,
                                           share_prompts=self._shares_prompts(),
                                           temperature=ctx.temperature, compute_entropy=ctx.compute_entropy,
                                           entropy_requires_grad=ctx.entropy_requires_grad and not forward_only,
                                           chunk_size=self.spec.logits_chunk_size)
                    if not forward_only:
                        loss, metrics = self._loss_fn(out, micro, ctx)
                        loss.backward()
                        loss_total += float(loss.detach())
                        for name, value in metrics.items():
                            value, weight = value if isinstance(value, tuple) else (value, 1.0)
                            sums[name] = sums.get(name, 0.0) + float(value) * float(weight)
                            weights[name] = weights.get(name, 0.0) + float(weight)
                if postprocess_fn is not None:
                    out = postprocess_fn(out, micro, ctx)
                outputs.append(TensorBatch({k: v.detach().to(out_device) for k, v in out.items()}))
            if forward_only:
                # without a backward to follow, FSDP would keep the root's (and, on one rank, every layer's)
                # gathered compute-dtype copy alive; drop them
                for module in model.modules():
                    if isinstance(module, FSDPModule):
                        module.reshard()
        merged = TensorBatch.concat(outputs).index(restore_order(groups)) if len(groups) > 1 else outputs[0]
        metrics = {k: sums[k] / weights[k] if weights[k] else 0.0 for k in sums}
        return StepResult(outputs=merged, metrics=metrics, loss=loss_total)

    # ------------------------------------------------------------------ optimizer
    def _require_optimizer(self) -> torch.optim.Optimizer:
        if self.optimizer is None:
            raise RuntimeError("this engine has no optimizer (EngineSpec.optim is None: an inference-only model)")
        return self.optimizer

    def optimizer_zero_grad(self) -> None:
        self._require_optimizer().zero_grad(set_to_none=True)

    def optimizer_step(self) -> float:
        optimizer = self._require_optimizer()
        params = [p for p in self._require_model().parameters() if p.grad is not None]
        if not params:
            raise RuntimeError("optimizer_step: no parameter has a gradient (was backward run?)")
        max_norm = self.spec.grad_clip if self.spec.grad_clip and self.spec.grad_clip > 0 else math.inf
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm=max_norm)
        if isinstance(norm, DTensor):
            norm = norm.full_tensor()
        grad_norm = float(norm)
        if not math.isfinite(grad_norm):
            # a step on inf/nan gradients would destroy the weights; skip it (the caller sees the norm)
            optimizer.zero_grad(set_to_none=True)
            return grad_norm
        if self.spec.optimizer_offload and self.device.type != "cpu":
            self.to("device", model=False, optimizer=True)
            optimizer.step()
            self.to("cpu", model=False, optimizer=True)
        else:
            optimizer.step()
        return grad_norm

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

    # ------------------------------------------------------------------ memory placement
    def to(self, device: str, model: bool = True, optimizer: bool = True) -> None:
        target = self.device if device in ("device", "cuda", "gpu") else torch.device(device)
        if model and self.model is not None:
            self.model.to(target)
        if optimizer and self.optimizer is not None:
            for state in self.optimizer.state.values():
                for key, value in state.items():
                    if isinstance(value, torch.Tensor):
                        state[key] = value.to(target)

    # ------------------------------------------------------------------ checkpoints
    def _state_options(self, **kwargs: Any) -> StateDictOptions:
        # with LoRA only the adapter trains; the frozen base is reloaded from the model path
        return StateDictOptions(ignore_frozen_params=self.spec.use_lora, **kwargs)

    def save_checkpoint(self, path: str) -> None:
        model = self._require_model()
        os.makedirs(path, exist_ok=True)
        if self.optimizer is not None:
            model_sd, optim_sd = get_state_dict(model, self.optimizer, options=self._state_options())
            state = {"model": model_sd, "optimizer": optim_sd}
        else:
            state = {"model": get_model_state_dict(model, options=self._state_options())}
        dcp.save(state, checkpoint_id=path)
        if self.dp_rank == 0:
            extra = {"lr_scheduler": self.lr_scheduler.state_dict() if self.lr_scheduler else None,
                     "world_size": self.dp_world_size, "model_path": self.spec.model_path}
            torch.save(extra, os.path.join(path, _EXTRA_STATE))
        dist.barrier()

    def load_checkpoint(self, path: str) -> None:
        model = self._require_model()
        if not os.path.isfile(os.path.join(path, _EXTRA_STATE)):
            raise FileNotFoundError(f"{path} is not an engine checkpoint (no {_EXTRA_STATE})")
        if self.optimizer is not None:
            model_sd, optim_sd = get_state_dict(model, self.optimizer, options=self._state_options())
            state = {"model": model_sd, "optimizer": optim_sd}
        else:
            state = {"model": get_model_state_dict(model, options=self._state_options())}
        dcp.load(state, checkpoint_id=path)
        # With LoRA the checkpoint holds only the adapter; the frozen base keys are absent by design, and dcp.load
        # above already failed if any adapter key the model has was missing from the checkpoint.
        load_options = self._state_options(strict=not self.spec.use_lora)
        if self.optimizer is not None:
            set_state_dict(model, self.optimizer, model_state_dict=state["model"],
                           optim_state_dict=state["optimizer"], options=load_options)
        else:
            set_model_state_dict(model, state["model"], options=load_options)
        extra = torch.load(os.path.join(path, _EXTRA_STATE), weights_only=True)  # plain data: no objects unpickled
        if self.lr_scheduler is not None and extra.get("lr_scheduler") is not None:
            self.lr_scheduler.load_state_dict(extra["lr_scheduler"])
        if self.spec.optimizer_offload and self.device.type != "cpu":
            self.to("cpu", model=False, optimizer=True)

    # ------------------------------------------------------------------ weights for rollout and export
    @property
    def has_adapter(self) -> bool:
        return self.spec.use_lora

    @contextlib.contextmanager
    def disable_adapter(self) -> Iterator[None]:
        if not self.has_adapter:
            raise RuntimeError("disable_adapter() needs a LoRA engine (actor_rollout_ref.model.lora_rank > 0)")
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

    def _full_state_dict(self, trainable_only: bool) -> dict[str, torch.Tensor]:
        """Unsharded weights on rank 0 (CPU); ``{}`` on other ranks. Collective."""
        options = StateDictOptions(full_state_dict=True, cpu_offload=True, ignore_frozen_params=trainable_only)
        return get_model_state_dict(self._require_model(), options=options)

    def state_dict_for_sync(self, dtype: Optional[torch.dtype] = None, merge_lora: bool = False) -> WeightSyncPayload:
        model = self._require_model()
        if self.has_adapter and merge_lora:
            state = self._full_state_dict(trainable_only=False)
            if self.dp_rank != 0:
                return WeightSyncPayload(kind="full", tensors={})
            return WeightSyncPayload(kind="full", tensors=self._hf_weights(state, dtype))
        if self.has_adapter:
            from peft import get_peft_model_state_dict

            state = self._full_state_dict(trainable_only=True)
            if self.dp_rank != 0:
                return WeightSyncPayload(kind="lora", tensors={}, adapter_config=None)
            tensors = get_peft_model_state_dict(model, state_dict=state)
            if dtype is not None:
                tensors = {k: v.to(dtype) for k, v in tensors.items()}
            return WeightSyncPayload(kind="lora", tensors=tensors,
                                     adapter_config=hf_model.adapter_config_dict(model, self.spec.model_path))
        state = self._full_state_dict(trainable_only=False)
        return WeightSyncPayload(kind="full", tensors=self._hf_weights(state, dtype) if self.dp_rank == 0 else {})

    @property
    def _tied_embeddings(self) -> bool:
        return bool(getattr(self._require_model().config, "tie_word_embeddings", False))

    def _hf_weights(self, state: dict[str, torch.Tensor], dtype: Optional[torch.dtype]) -> dict[str, torch.Tensor]:
        """The full state dict as a plain Hugging Face checkpoint: LoRA merged, in `dtype`, without a tied LM head.

        A tied `lm_head.weight` is the input embedding again (a sixth of SmolLM2-135M's bytes); transformers and
        vLLM both restore it from the embedding, so it is neither synced nor saved.
        """
        if self.has_adapter:
            from app.engine.lora_merge import merge_lora_state_dict

            state = merge_lora_state_dict(state, scaling=self.spec.lora_alpha / self.spec.lora_rank, dtype=dtype)
        elif dtype is not None:
            state = {k: v.to(dtype) for k, v in state.items()}
        if self._tied_embeddings:
            state.pop("lm_head.weight", None)
        return state

    def export_hf(self, path: str, dtype: Optional[torch.dtype] = None) -> None:
        state = self._full_state_dict(trainable_only=False)
        if self.dp_rank == 0:
            # Straight from the state dict to safetensors: building a second model to merge and save would hold
            # another full copy of the weights (the largest allocation of a LoRA run on a small machine).
            state = self._hf_weights(state, dtype)
            config = hf_model.load_config(self.spec)
            config.torch_dtype = next(iter(state.values())).dtype
            os.makedirs(path, exist_ok=True)
            config.save_pretrained(path)
            from huggingface_hub import save_torch_state_dict

            save_torch_state_dict(state, path)
            for name in _HF_SIDE_FILES:
                src = os.path.join(self.spec.model_path, name)
                if os.path.isfile(src):
                    shutil.copyfile(src, os.path.join(path, name))
        dist.barrier()
