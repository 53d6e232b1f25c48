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
import functools
import math
import os
from typing import Any, Iterator, Optional, Sequence

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_model_state_dict,
    set_state_dict,
)
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor

from app.engine import hf_model, sequence_parallel
from app.engine.distributed import ensure_process_group, pick_device
from app.engine.lora_fast_path import use_fused_lora_forward
from app.engine.lr_schedule import build_lr_scheduler
from app.engine.sharded import ShardedEngine, resolve_auto_param_dtype
from app.engine.spec import EngineSpec, to_dtype


@functools.cache
def _compiled_layer_forward():
    def layer_forward(layer: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        return type(layer).forward(layer, *args, **kwargs)

    return torch.compile(layer_forward, dynamic=True)


def frozen_base_params(model: torch.nn.Module) -> set[torch.nn.Parameter]:
    """The parameters no optimiser steps (a LoRA model's base weights)."""
    return {p for p in model.parameters() if not p.requires_grad}


def _to_meta(model: torch.nn.Module) -> None:
    """Move every parameter to the meta device, keeping shared parameters (tied embeddings) shared: ``Module.to``
    gives each module its own new parameter when the tensor type changes."""
    owners: dict[int, list[tuple[torch.nn.Module, str]]] = {}
    for module in model.modules():
        for name, param in module._parameters.items():
            if param is not None:
                owners.setdefault(id(param), []).append((module, name))
    model.to("meta")
    for refs in owners.values():
        first_module, first_name = refs[0]
        for module, name in refs[1:]:
            module._parameters[name] = first_module._parameters[first_name]


def sharding_mesh(device_type: str, world_size: int, fsdp_size: int) -> DeviceMesh:
    """FSDP2's device mesh. ``fsdp_size`` -1, or the rank count or more (verl's meaning): one copy of the model
    sharded over every rank. A smaller divisor of the rank count: hybrid sharding, each group of ``fsdp_size``
    consecutive ranks (one node's GPUs, where it equals their count) shards a copy, and gradients are all-reduced
    across the groups, so the parameter gathers stay within a group."""
    if fsdp_size < 0 or fsdp_size >= world_size:
        return init_device_mesh(device_type, (world_size,))
    if fsdp_size == 0 or world_size % fsdp_size:
        raise ValueError(f"fsdp_size={fsdp_size} must be -1 or divide the {world_size} ranks")
    return init_device_mesh(device_type, (world_size // fsdp_size, fsdp_size), mesh_dim_names=("replicate", "shard"))


class FSDPEngine(ShardedEngine):
    def __init__(self, spec: EngineSpec) -> None:
        self.device = pick_device(spec.device)
        self.spec = resolve_auto_param_dtype(spec, self.device)
        self.model: Optional[torch.nn.Module] = None
        self.optimizer: Optional[torch.optim.Optimizer] = None
        self.lr_scheduler: Optional[torch.optim.lr_scheduler.LRScheduler] = None
        self._attn_implementation: Optional[str] = None  # chosen for the device when the model is built

    # ------------------------------------------------------------------ lifecycle
    def init_model(self) -> None:
        spec = self.spec
        ensure_process_group(self.device.type)
        master_dtype = to_dtype(spec.model_dtype, "fsdp_config.model_dtype")
        # Weights the optimiser never steps (a LoRA base, an inference-only reference) are stored in the dtype they
        # are computed in: a wider copy would be cast down at every forward anyway and only cost memory.
        frozen_base = spec.use_lora or spec.optim is None
        load_dtype = (
            to_dtype(spec.param_dtype, "fsdp_config.mixed_precision.param_dtype") if frozen_base else master_dtype
        )
        from_rank0 = self._loads_on_rank0()
        reads_weights = not from_rank0 or dist.get_rank() == 0
        with torch.random.fork_rng(devices=[]):  # the caller's RNG stream is left untouched
            torch.manual_seed(spec.seed)  # identical fresh heads / adapters on every rank
            self._attn_implementation = hf_model.attention_implementation(self.device)
            self._sp, attention = sequence_parallel.prepare(
                spec.ulysses_sequence_parallel_size,
                self.device.type,
                spec.use_remove_padding,
                spec.compile_layers,
                hf_model.load_config(spec),
                self._attn_implementation,
            )
            if reads_weights:
                model = hf_model.load_model(spec, load_dtype, attention)
            else:  # its weights come from rank 0 once the model is sharded
                model = hf_model.build_empty_model(spec, load_dtype, attention)
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
        if from_rank0:
            self.model = self._shard_from_rank0(model)
        else:
            self.model = self._shard(model)
            self.model.to(self.device)
        if spec.optim is not None:
            trainable = [p for p in self.model.parameters() if p.requires_grad]
            self.optimizer = torch.optim.AdamW(
                trainable, lr=spec.optim.lr, betas=tuple(spec.optim.betas), weight_decay=spec.optim.weight_decay
            )
            self.lr_scheduler = build_lr_scheduler(self.optimizer, spec.optim)
        if spec.param_offload:
            self.to("cpu", model=True, optimizer=False)

    def _loads_on_rank0(self) -> bool:
        if self.spec.load_on_rank0 is not None:
            return self.spec.load_on_rank0
        return dist.get_world_size() > 1

    def _shard_from_rank0(self, model: torch.nn.Module) -> torch.nn.Module:
        """Shard ``model`` (rank 0: the loaded weights; other ranks: a skeleton from ``build_empty_model``) and fill
        every rank's shards from rank 0's weights, one tensor at a time. Rank 0 keeps one host copy of the weights
        (its state dict) until they are spread; the other ranks never hold more than their shards and one tensor."""
        full_state = model.state_dict() if dist.get_rank() == 0 else {}  # views of the weights: no copy
        buffers = dict(model.named_buffers())  # real on every rank, persistent or not
        if dist.get_rank() == 0:
            _to_meta(model)  # `full_state` keeps the weights alive; the module lets go of them
        model = self._shard(model)
        model.to_empty(device=self.device)
        with torch.no_grad():
            for name, buf in model.named_buffers():
                buf.copy_(buffers[name])
        options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
        set_model_state_dict(model, full_state, options=options)
        return model

    def _shard(self, model: torch.nn.Module) -> torch.nn.Module:
        spec = self.spec
        mesh = sharding_mesh(self.device.type, dist.get_world_size(), spec.fsdp_size)
        param_dtype = to_dtype(spec.param_dtype, "fsdp_config.mixed_precision.param_dtype")
        reduce_dtype = to_dtype(spec.reduce_dtype, "fsdp_config.mixed_precision.reduce_dtype")
        mp = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype, cast_forward_inputs=True)
        layer_names = hf_model.decoder_layer_class_names(model)
        multi_rank = dist.get_world_size() > 1
        # Each layer's gathered (compute-dtype) weights are kept from its forward to its backward, not gathered again,
        # where fsdp_config.reshard_after_forward=false asks (one all-gather fewer, one gathered layer more each) and
        # always on one rank, where gathering is a copy and cast (one compute-dtype copy of what FSDP manages)
        reshard = multi_rank and spec.reshard_after_forward
        # one rank, LoRA: the frozen base has nothing to shard, and FSDP would only gather it into a second copy
        # of the model for the whole update; left out of FSDP, the layers compute with the stored weights themselves
        ignored = frozen_base_params(model) if spec.use_lora and not multi_rank else set()
        for module in model.modules():
            if type(module).__name__ in layer_names:
                fully_shard(module, mesh=mesh, mp_policy=mp, reshard_after_forward=reshard, ignored_params=ignored)
                if spec.compile_layers:
                    # compile forward, not __call__: FSDP's gather/reshard hooks stay eager and parameter names
                    # (state dicts, weight sync) stay unchanged. One compiled function takes the layer as an
                    # argument, so all layers share one graph instead of recompiling per layer instance.
                    module.forward = functools.partial(_compiled_layer_forward(), module)
        fully_shard(model, mesh=mesh, mp_policy=mp, ignored_params=ignored)
        return model

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

    # ------------------------------------------------------------------ hooks of ShardedEngine
    def _backward(self, loss: torch.Tensor, last_micro_batch: bool) -> None:
        if dist.get_world_size() == 1:
            # one rank: gathering is a copy (and cast) of the whole model per micro-batch; keep the gathered weights
            # until the last micro-batch of the update has run its backward, then free them as usual
            self._require_model().set_reshard_after_backward(last_micro_batch)
        loss.backward()

    def _after_forward_only(self) -> None:
        # without a backward to follow, FSDP would keep the root's (and, on one rank, every layer's) gathered
        # compute-dtype copy alive; drop them
        for module in self._require_model().modules():
            if isinstance(module, FSDPModule):
                module.reshard()

    @contextlib.contextmanager
    def _gathered(self, params: Sequence[torch.Tensor]) -> Iterator[list[torch.Tensor]]:
        yield [p.full_tensor() if isinstance(p, DTensor) else p for p in params]

    def local_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        for name, param in self._require_model().named_parameters():
            yield name, param.to_local() if isinstance(param, DTensor) else param

    # ------------------------------------------------------------------ optimizer
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
        self._save_extra_state(path)
        dist.barrier()

    def load_checkpoint(self, path: str) -> None:
        model = self._require_model()
        self._check_is_checkpoint(path)
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
            set_state_dict(
                model,
                self.optimizer,
                model_state_dict=state["model"],
                optim_state_dict=state["optimizer"],
                options=load_options,
            )
        else:
            set_model_state_dict(model, state["model"], options=load_options)
        self._load_extra_state(path)
        if self.spec.optimizer_offload and self.device.type != "cpu":
            self.to("cpu", model=False, optimizer=True)

    # ------------------------------------------------------------------ weights for rollout and export
    # lora_adapter_state and export_hf gather through torch's state-dict API (one collective, straight to rank 0's
    # CPU), faster than ShardedEngine's per-tensor stream, which get_per_tensor_param still offers
    def _full_state_dict(self, trainable_only: bool) -> dict[str, torch.Tensor]:
        """Unsharded weights on rank 0 (CPU); ``{}`` on other ranks. Collective."""
        options = StateDictOptions(full_state_dict=True, cpu_offload=True, ignore_frozen_params=trainable_only)
        return get_model_state_dict(self._require_model(), options=options)

    def lora_adapter_state(self, dtype: Optional[torch.dtype] = None) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
        from peft import get_peft_model_state_dict

        self._require_adapter("lora_adapter_state")
        model = self._require_model()
        state = self._full_state_dict(trainable_only=True)
        if self.dp_rank != 0:
            return {}, {}
        tensors = get_peft_model_state_dict(model, state_dict=state)
        if dtype is not None:
            tensors = {k: v.to(dtype) for k, v in tensors.items()}
        return hf_model.adapter_config_dict(model, self.spec.model_path), tensors

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
            hf_model.save_hf_folder(path, state, self.spec)
        dist.barrier()
