"""The DeepSpeed engine (``strategy=deepspeed``): one Hugging Face model under ZeRO stage 2 or 3.

- DeepSpeed's config is derived from the spec and merged with the user's JSON (``app.engine.deepspeed_config``).
- The optimizer is torch's AdamW and the schedule ours, as in the FSDP engine, so both take the same step; ZeRO
  partitions the AdamW state and gradients (stage 3: the parameters too) and can keep the state on the CPU.
- Micro-batches are ours (``ShardedEngine``): each backward tells DeepSpeed whether it ends the mini-batch, and the
  loss is already normalised over the whole mini-batch, so DeepSpeed neither counts micro-steps nor divides it.
- ``deepspeed`` is imported only when such an engine is built: the FSDP path never needs the package.
"""

from __future__ import annotations

import contextlib
import math
import os
from typing import Any, Iterator, Optional, Sequence

import torch
import torch.distributed as dist

from app.engine import hf_model
from app.engine.deepspeed_config import batch_keys, derived_config, load_user_config, merge_user_config
from app.engine.distributed import ensure_process_group, pick_device
from app.engine.lora_fast_path import use_fused_lora_forward
from app.engine.lr_schedule import build_lr_scheduler
from app.engine.sharded import ShardedEngine, resolve_auto_param_dtype
from app.engine.spec import EngineSpec

_TAG = "deepspeed"  # DeepSpeed's sub-folder of the checkpoint folder


def engine_config(spec: EngineSpec, world_size: int) -> dict[str, Any]:
    """The JSON DeepSpeed gets for ``spec`` on ``world_size`` ranks (the user's file merged in)."""
    ds = spec.deepspeed
    if ds is None:
        raise ValueError(
            "a DeepSpeed engine needs EngineSpec.deepspeed (app.roles.factory builds it from the role's "
            "deepspeed_config section)"
        )
    trains = spec.optim is not None
    batch = batch_keys(
        ds.train_batch_size if trains else None,
        spec.micro_batch_size_per_gpu,
        world_size,
        use_dynamic_bsz=spec.use_dynamic_bsz,
    )
    derived = derived_config(
        zero_stage=ds.zero_stage,
        offload_optimizer=ds.offload_optimizer,
        trains=trains,
        grad_clip=spec.grad_clip,
        param_dtype=spec.param_dtype,
        batch=batch,
    )
    if not ds.config_path:
        return merge_user_config(derived, {}, source="", trains=trains)
    user = load_user_config(ds.config_path)
    return merge_user_config(derived, user, source=f"deepspeed_config.config_path={ds.config_path}", trains=trains)


class DeepSpeedEngine(ShardedEngine):
    def __init__(self, spec: EngineSpec) -> None:
        if spec.ulysses_sequence_parallel_size != 1:
            raise ValueError(
                f"ulysses_sequence_parallel_size={spec.ulysses_sequence_parallel_size}: "
                "strategy=deepspeed has no sequence parallelism here; use strategy=fsdp2 or set it to 1"
            )
        self.device = pick_device(spec.device)
        self.spec = resolve_auto_param_dtype(spec, self.device)
        self.ds: Optional[Any] = None  # deepspeed.DeepSpeedEngine
        self.model: Optional[torch.nn.Module] = None
        self.optimizer: Optional[torch.optim.Optimizer] = None
        self.lr_scheduler: Optional[torch.optim.lr_scheduler.LRScheduler] = None
        self._attn_implementation: Optional[str] = None
        self.config: dict[str, Any] = {}

    # ------------------------------------------------------------------ lifecycle
    def init_model(self) -> None:
        spec = self.spec
        if self.device.type == "cpu":
            os.environ.setdefault("DS_ACCELERATOR", "cpu")  # read when deepspeed is first imported
        ensure_process_group(self.device.type)
        # DeepSpeed insists on LOCAL_RANK (torchrun and Ray Train set it); a process group made otherwise (a test's
        # spawn, a lone process) runs on one node, where the local rank is the rank
        os.environ.setdefault("LOCAL_RANK", str(dist.get_rank()))
        import deepspeed

        self.config = engine_config(spec, dist.get_world_size())
        with torch.random.fork_rng(devices=[]):  # the caller's RNG stream is left untouched
            torch.manual_seed(spec.seed)  # identical fresh heads / adapters on every rank
            self._attn_implementation = hf_model.attention_implementation(self.device)
            # fp32: with bf16/fp16 on, DeepSpeed casts the module and keeps fp32 masters in the optimizer
            model = hf_model.load_model(spec, torch.float32, self._attn_implementation)
            if spec.enable_gradient_checkpointing:
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            if spec.use_lora:
                model = hf_model.apply_lora(model, spec)
                if self.zero_stage != 3:
                    # the fused forward reads lora_A/B weights without calling their modules, whose hooks are
                    # what gathers ZeRO-3's partitioned parameters
                    use_fused_lora_forward(model)
        optimizer = None
        if spec.optim is not None:
            trainable = [p for p in model.parameters() if p.requires_grad]
            optimizer = torch.optim.AdamW(
                trainable, lr=spec.optim.lr, betas=tuple(spec.optim.betas), weight_decay=spec.optim.weight_decay
            )
            # on the client optimizer: ZeRO steps its param groups, so the schedule's lr is the one applied
            self.lr_scheduler = build_lr_scheduler(optimizer, spec.optim)
        self.ds, _, _, _ = deepspeed.initialize(
            model=model, optimizer=optimizer, config=self.config, dist_init_required=False
        )
        self.optimizer = optimizer
        self.model = self.ds.module

    @property
    def zero_stage(self) -> int:
        return int(self.config.get("zero_optimization", {}).get("stage", 0))

    def local_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        for name, param in self._require_model().named_parameters():
            # ZeRO-3 keeps this rank's flat partition; the parameter itself is empty outside a gather
            yield name, param.ds_tensor if self.zero_stage == 3 else param

    # ------------------------------------------------------------------ hooks of ShardedEngine
    def _compute_module(self) -> torch.nn.Module:
        return self.ds  # its forward runs DeepSpeed's bookkeeping (ZeRO-3 prefetch) around the model's

    def _backward(self, loss: torch.Tensor, last_micro_batch: bool) -> None:
        # gradients are reduced (and a step may follow) only after the mini-batch's last micro-batch
        self.ds.set_gradient_accumulation_boundary(last_micro_batch)
        self.ds.backward(loss, scale_wrt_gas=False)  # already normalised over the whole mini-batch

    @contextlib.contextmanager
    def _gathered(self, params: Sequence[torch.Tensor]) -> Iterator[list[torch.Tensor]]:
        if self.zero_stage != 3:  # stages 0-2 keep whole parameters on every rank
            yield list(params)
            return
        import deepspeed

        with deepspeed.zero.GatheredParameters(list(params), modifier_rank=None):
            yield [p.data for p in params]

    # ------------------------------------------------------------------ optimizer
    def optimizer_zero_grad(self) -> None:
        self._require_optimizer()
        self.ds.optimizer.zero_grad(set_to_none=True)

    def optimizer_step(self) -> float:
        """DeepSpeed clips to ``gradient_clipping`` and skips the step on a non-finite norm (reported as inf)."""
        self._require_optimizer()
        self.ds.step()
        norm = self.ds.get_global_grad_norm()
        return float(norm) if norm is not None else math.nan

    # ------------------------------------------------------------------ memory placement
    def to(self, device: str, model: bool = True, optimizer: bool = True) -> None:
        if self.device.type == "cpu":
            return  # everything already lives on the CPU
        raise NotImplementedError(
            "DeepSpeedEngine.to: moving state by hand is not supported; offload with "
            "deepspeed_config.offload_optimizer (or offload_param in the JSON's "
            "zero_optimization)"
        )

    # ------------------------------------------------------------------ checkpoints
    def save_checkpoint(self, path: str) -> None:
        self._require_model()
        os.makedirs(path, exist_ok=True)
        # with LoRA only the adapter trains; the frozen base is reloaded from the model path
        self.ds.save_checkpoint(path, tag=_TAG, exclude_frozen_parameters=self.spec.use_lora)
        self._save_extra_state(path)
        dist.barrier()

    def load_checkpoint(self, path: str) -> None:
        self._require_model()
        self._check_is_checkpoint(path)
        loaded, _ = self.ds.load_checkpoint(
            path,
            tag=_TAG,
            load_module_strict=not self.spec.use_lora,
            load_optimizer_states=self.optimizer is not None,
            load_lr_scheduler_states=False,
        )
        if loaded is None:
            raise FileNotFoundError(f"{path} holds no DeepSpeed checkpoint (no {_TAG}/ folder)")
        self._load_extra_state(path)
