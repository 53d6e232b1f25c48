"""The training-engine interface that roles program against.

An engine owns one model (sharded across the data-parallel ranks), its optimizer and its learning-rate schedule.
Roles (actor, reference, critic) never touch FSDP or DeepSpeed; they call these methods. Every method that
communicates must be called on all ranks.
"""

from __future__ import annotations

import abc
import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional

import torch

from app.batch import TensorBatch


@dataclass
class StepContext:
    """Per-call settings for ``forward_backward_step``.

    ``micro_batch_size`` / ``max_token_len`` override the engine's micro-batching for this call (e.g. the log-prob
    micro-batch size). ``loss_normalizer`` is the whole-mini-batch normaliser for ``algos.aggregation.agg_loss``,
    already divided by the data-parallel world size (gradients are averaged over ranks).
    """

    temperature: float = 1.0
    compute_entropy: bool = False
    entropy_requires_grad: bool = False  # False: entropy is computed without grad, for metrics only
    compute_sum_pi_squared: bool = False  # also "sum_pi_squared": sum_v pi_v^2 per token, without grad
    micro_batch_size: Optional[int] = None
    max_token_len: Optional[int] = None
    max_token_len_key: Optional[str] = None  # the config key of max_token_len, for errors (None: the spec's)
    use_dynamic_bsz: Optional[bool] = None
    loss_normalizer: Optional[float] = None
    extra: dict[str, Any] = field(default_factory=dict)


# loss_fn(model_outputs, micro_batch, ctx) -> (scalar loss to backpropagate, {metric name: (value, weight)})
# model_outputs: {"log_probs": (b, R) float32, "entropy": (b, R), "sum_pi_squared": (b, R)} for causal LMs (the last
# two when asked), {"values": (b, R)} for critics.
LossFn = Callable[[dict[str, torch.Tensor], TensorBatch, StepContext], tuple[torch.Tensor, dict[str, Any]]]
PreprocessFn = Callable[[TensorBatch, StepContext], TensorBatch]
# postprocess_fn(model_outputs, micro_batch, ctx) -> model_outputs to keep (e.g. drop entropy)
PostprocessFn = Callable[[dict[str, torch.Tensor], TensorBatch, StepContext], dict[str, torch.Tensor]]


@dataclass
class StepResult:
    """What ``forward_backward_step`` returns: per-sample outputs in the input order, and metrics.

    ``metrics[name]`` is the mean over micro-batches weighted by the weights the loss function returned (e.g. the
    number of kept tokens), so a token-mean metric equals the whole batch's token mean.
    """

    outputs: TensorBatch
    metrics: dict[str, float]
    loss: float  # sum of the micro-batch losses (= the mini-batch loss when losses are globally normalised)


class BaseEngine(abc.ABC):
    """One model + optimizer + LR schedule, data-parallel over ``dp_world_size`` ranks."""

    # ------------------------------------------------------------------ lifecycle
    @abc.abstractmethod
    def init_model(self) -> None:
        """Load the model from the spec's path, wrap it for data parallelism, build optimizer and scheduler."""

    @abc.abstractmethod
    def train_mode(self) -> contextlib.AbstractContextManager:
        """Context: model in training mode (gradient checkpointing on), parameters on the compute device."""

    @abc.abstractmethod
    def eval_mode(self) -> contextlib.AbstractContextManager:
        """Context: model in eval mode, parameters on the compute device."""

    # ------------------------------------------------------------------ compute
    @abc.abstractmethod
    def forward_backward_step(
        self,
        batch: TensorBatch,
        ctx: Optional[StepContext] = None,
        forward_only: bool = False,
        preprocess_fn: Optional[PreprocessFn] = None,
        postprocess_fn: Optional[PostprocessFn] = None,
    ) -> StepResult:
        """Cut ``batch`` into micro-batches, run the model on each and, unless ``forward_only``, backpropagate the
        loss of the function given to ``set_loss_fn`` (gradients accumulate; the loss must be normalised over the
        whole batch, see ``StepContext.loss_normalizer``). Returns outputs in the input row order."""

    @abc.abstractmethod
    def set_loss_fn(self, loss_fn: LossFn) -> None:
        """The loss ``forward_backward_step`` backpropagates."""

    @abc.abstractmethod
    def optimizer_zero_grad(self) -> None: ...

    @abc.abstractmethod
    def optimizer_step(self) -> float:
        """Clip gradients to ``grad_clip``, step (skipped when the norm is not finite); returns the pre-clip norm."""

    @abc.abstractmethod
    def lr_scheduler_step(self) -> float:
        """Advance the schedule by one training step; returns the new learning rate."""

    @abc.abstractmethod
    def get_lr(self) -> float: ...

    # ------------------------------------------------------------------ data parallelism
    @property
    @abc.abstractmethod
    def dp_rank(self) -> int: ...

    @property
    @abc.abstractmethod
    def dp_world_size(self) -> int: ...

    @abc.abstractmethod
    def shard_data(self, batch: TensorBatch) -> TensorBatch:
        """This rank's contiguous share of a batch every rank holds (size must divide by the world size)."""

    @abc.abstractmethod
    def unshard_data(self, batch: TensorBatch) -> TensorBatch:
        """Concatenation, in rank order, of every rank's ``batch`` (all ranks get it)."""

    @abc.abstractmethod
    def all_reduce(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
        """Sum / mean / max of ``tensor`` over the data-parallel ranks (returns a new tensor)."""

    # ------------------------------------------------------------------ memory placement
    @abc.abstractmethod
    def to(self, device: str, model: bool = True, optimizer: bool = True) -> None:
        """Move the (sharded) parameters and/or optimizer state to ``"cpu"`` or the compute device."""

    # ------------------------------------------------------------------ weights
    @abc.abstractmethod
    def save_checkpoint(self, path: str) -> None:
        """All ranks write model, optimizer and scheduler state into the folder ``path``."""

    @abc.abstractmethod
    def load_checkpoint(self, path: str) -> None: ...

    @abc.abstractmethod
    def disable_adapter(self) -> contextlib.AbstractContextManager:
        """Context: the base model without the LoRA adapter (the reference policy). Raises without LoRA."""

    @abc.abstractmethod
    def local_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """This rank's piece of every weight, by name, in the engine's own layout (an FSDP2 shard, a ZeRO-3
        partition, or the whole tensor): the tensors the model computes from, so writing into one changes the model.
        Two engines of the same model and layout give pieces that match one to one (the reference's sync)."""

    @abc.abstractmethod
    def get_per_tensor_param(
        self, dtype: Optional[torch.dtype] = None, merge_lora: bool = False
    ) -> Iterator[tuple[str, torch.Tensor]]:
        """The weights the rollout engine loads, as (name, full CPU tensor) pairs in ``dtype`` (None: the training
        dtype): every weight under its Hugging Face name (a tied ``lm_head`` left out: the receiver restores it from
        the embedding), or with LoRA the adapter alone under peft's names, or with LoRA and ``merge_lora`` every
        weight with the adapter folded in (the rollout engine then needs no LoRA support).

        One tensor at a time (verl's per-tensor weight sync), on every rank: each is gathered when it is reached, so
        no rank holds more than one parameter (a merged LoRA linear: three) gathered at once. Collective: every rank
        consumes it all."""

    @abc.abstractmethod
    def lora_adapter_state(self, dtype: Optional[torch.dtype] = None) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
        """The LoRA adapter as peft saves it, gathered on rank 0: (the content of ``adapter_config.json``, the
        tensors of ``adapter_model.safetensors`` under peft's names, on the CPU in ``dtype``; None: the training
        dtype). Other ranks get ``({}, {})``. Collective. Raises without LoRA."""

    @abc.abstractmethod
    def export_hf(self, path: str, dtype: Optional[torch.dtype] = None) -> None:
        """Write a Hugging Face model folder (LoRA merged into the weights) from rank 0."""

    @property
    @abc.abstractmethod
    def has_adapter(self) -> bool: ...
