"""Ulysses sequence parallelism: the ranks of one group compute one packed row together, each holding ``1/S`` of its
tokens (``ulysses_sequence_parallel_size = S``).

Outside attention every layer works token by token, so each rank runs the embeddings, projections, MLPs and LM head on
its own contiguous chunk of the packed row. Attention needs the whole sequence: an all-to-all before it trades the
chunk of all heads for the whole row of ``H/S`` heads (scatter heads, gather tokens), the packed attention runs
unchanged on those heads with the whole row's sequence boundaries, and the reverse all-to-all after it gives each rank
its chunk of all heads again. Key/value heads are repeated first when there are fewer than ``S`` of them (GQA), so each
rank gets the key/value heads its query heads read.

How a group shares its work: each rank holds its own samples, as without sequence parallelism (every rank generates its
own rollouts). ``pool`` gives every rank of a group the group's samples, the engine cuts micro-batches from them (verl's
meaning of the micro-batch size and token budget with sequence parallelism: per group), and every rank of the group
computes the same micro-batch: its chunk of the tokens, then the outputs gathered (``_GatherChunks``), then the same
loss on the whole micro-batch. A rank's gradient is its chunk's share of that loss, so the group's gradients sum to the
gradient of the loss of all its samples; FSDP averages over all ranks as without sequence parallelism, and the loss
normaliser the roles compute (over all ranks) stays right. The engine returns each rank its own rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from app.batch import TensorBatch, concat_padded
from app.engine.forward import lm_outputs, position_ids_of, value_model_logits
from app.engine.packed_attention import SHARED_PROMPT_LAYOUT
from app.engine.packing import pack_inputs

KEY = "ulysses_sequence_parallel_size"
_PREFIX = "rayrl_ulysses"
# attention implementation name -> the group its all-to-alls run over (every engine with the same S uses groups of the
# same ranks, so the latest one registered serves them all)
_GROUPS: dict[str, "SequenceParallel"] = {}


@dataclass
class SequenceParallel:
    """One rank's sequence-parallel group: ``size`` consecutive ranks, this rank at ``rank`` in it."""

    group: dist.ProcessGroup
    size: int
    rank: int
    kv_repeat: int = 1  # key/value heads are repeated this many times so that S divides them

    # ------------------------------------------------------------------ samples
    def pool(self, batch: TensorBatch) -> tuple[TensorBatch, slice, int]:
        """The group's samples, in group-rank order, re-padded to the widest prompt and response; this rank's rows
        in them; this rank's response width (its outputs are cut back to it)."""
        parts: list = [None] * self.size
        dist.all_gather_object(parts, (batch.to("cpu").tensors, _widths(batch)), group=self.group)
        # padding 0: a masked column, whose token id and position no output reads
        pooled = concat_padded([TensorBatch(t, dict(batch.meta)) for t, _ in parts], pad_token_id=0)
        start = sum(len(t["input_ids"]) for t, _ in parts[: self.rank])
        device = batch["input_ids"].device
        return pooled.to(device), slice(start, start + len(batch)), _widths(batch)[1]

    # ------------------------------------------------------------------ forward
    def response_outputs(
        self,
        model: torch.nn.Module,
        micro: TensorBatch,
        *,
        model_kind: str,
        remove_padding: bool,
        share_prompts: bool = False,
        temperature: float = 1.0,
        compute_entropy: bool = False,
        entropy_requires_grad: bool = False,
        chunk_size: Optional[int] = None,
        compute_sum_pi_squared: bool = False,
    ) -> dict[str, torch.Tensor]:
        """``app.engine.forward.response_outputs`` for a micro-batch every rank of the group holds: this rank runs
        its chunk of the packed row; the outputs of all chunks are gathered, so every rank returns the whole
        micro-batch's ``(b, R)`` outputs."""
        if not remove_padding:
            raise ValueError(f"{KEY}={self.size} splits the packed row: it needs model.use_remove_padding=true")
        input_ids, attention_mask = micro["input_ids"], micro["attention_mask"]
        # the row's length a multiple of the group, so that each rank takes an equal contiguous chunk
        p = pack_inputs(
            input_ids,
            attention_mask,
            position_ids_of(micro),
            micro["responses"].shape[1],
            share_prompts=share_prompts,
            length_multiple=self.size,
        )
        ids, positions = p.input_ids, p.position_ids
        if p.prompt_layout is not None:
            varlen = {SHARED_PROMPT_LAYOUT: p.prompt_layout}
        else:
            cu, longest = p.cu_seqlens, p.max_seqlen
            varlen = dict(cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=longest, max_length_k=longest)
        chunk = ids.shape[1] // self.size
        lo = self.rank * chunk
        # outputs in packed order, so each chunk's are contiguous: counts[r] of them in rank r's chunk
        order = torch.argsort(p.output_index, stable=True)
        ordered = p.output_index[order]
        bounds = torch.arange(1, self.size + 1, device=ordered.device) * chunk
        ends = torch.searchsorted(ordered, bounds).tolist()
        counts = [e - s for s, e in zip([0, *ends[:-1]], ends)]
        first = sum(counts[: self.rank])
        local = ordered[first : first + counts[self.rank]] - lo
        inputs = dict(input_ids=ids[:, lo : lo + chunk], position_ids=positions[:, lo : lo + chunk], **varlen)
        if model_kind == "causal_lm":
            logits = model(logits_to_keep=local, use_cache=False, **inputs).logits[0]
            labels = p.labels[order][first : first + counts[self.rank]]
            outs = lm_outputs(
                logits,
                labels,
                temperature=temperature,
                compute_entropy=compute_entropy,
                entropy_requires_grad=entropy_requires_grad,
                chunk_size=chunk_size,
                compute_sum_pi_squared=compute_sum_pi_squared,
            )
        else:
            outs = {"values": value_model_logits(model, **inputs)[0, local, 0].float()}
        restore = torch.argsort(order)  # packed order -> output order
        return {k: p.scatter(_GatherChunks.apply(v, counts, self.rank, self.group)[restore]) for k, v in outs.items()}


def build(size: int, device_type: str) -> Optional[SequenceParallel]:
    """This rank's group of ``size`` consecutive ranks (None for 1). Collective: every rank calls it."""
    if size == 1:
        return None
    world = dist.get_world_size()
    if size < 1 or world % size:
        raise ValueError(f"{KEY}={size}: the {world} ranks do not split into groups of {size}")
    mesh = init_device_mesh(device_type, (world // size, size), mesh_dim_names=("dp", "sp"))
    return SequenceParallel(group=mesh.get_group("sp"), size=size, rank=mesh.get_local_rank("sp"))


def prepare(
    size: int, device_type: str, use_remove_padding: bool, compile_layers: bool, model_config, attention: str
) -> tuple[Optional[SequenceParallel], str]:
    """The engine's hook: this rank's group (None for ``size`` 1) and the attention implementation its model is
    built with (``attention`` itself without sequence parallelism). Collective: every rank calls it."""
    if size > 1 and compile_layers:  # compiled layers around the all-to-alls are not checked against eager ones
        raise ValueError(f"{KEY}={size} runs the layers eagerly: set use_torch_compile=false or {KEY}=1")
    sp = build(size, device_type)
    if sp is None:
        return None, attention
    if not use_remove_padding:
        raise ValueError(f"{KEY}={size} splits packed rows across ranks: it needs use_remove_padding=true")
    check_heads(model_config, sp)
    return sp, attention_name(attention, sp)


def check_heads(model_config, sp: SequenceParallel) -> None:
    """Each rank attends with ``H/S`` query heads: refuse a model whose heads ``S`` does not divide; set how many
    times the key/value heads are repeated so that ``S`` divides them too."""
    heads = model_config.num_attention_heads
    kv_heads = getattr(model_config, "num_key_value_heads", None) or heads
    if heads % sp.size:
        raise ValueError(
            f"{KEY}={sp.size}: the model has {heads} attention heads, which {sp.size} ranks cannot "
            f"share evenly; use a size that divides {heads}"
        )
    # the fewest copies of each key/value head that S divides; H is a multiple of them (S and KV both divide H)
    sp.kv_repeat = sp.size // math.gcd(kv_heads, sp.size)


def attention_name(inner: str, sp: SequenceParallel) -> str:
    """Register (once) and return an attention implementation that runs ``inner`` between the all-to-alls
    (after ``check_heads``: the name holds the group size and the key/value repeat)."""
    name = f"{_PREFIX}{sp.size}x{sp.kv_repeat}_{inner}"
    _GROUPS[name] = sp
    if name not in ALL_ATTENTION_FUNCTIONS:

        def attention(module, query, key, value, attention_mask, **kwargs):
            return _ulysses_attention(name, inner, module, query, key, value, attention_mask, **kwargs)

        ALL_ATTENTION_FUNCTIONS.register(name, attention)
        if inner in ALL_MASK_ATTENTION_FUNCTIONS:
            ALL_MASK_ATTENTION_FUNCTIONS.register(name, ALL_MASK_ATTENTION_FUNCTIONS[inner])
    return name


def _ulysses_attention(
    name: str,
    inner: str,
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: Optional[torch.Tensor],
    **kwargs,
):
    """query ``(1, H, T/S, d)``, key/value ``(1, KV, T/S, d)`` of this rank's chunk -> ``((1, T/S, H, d), None)``."""
    sp = _GROUPS[name]
    if attention_mask is not None:
        raise ValueError(f"{KEY}={sp.size} runs packed rows only (no attention mask)")
    if sp.kv_repeat > 1:
        key, value = key.repeat_interleave(sp.kv_repeat, dim=1), value.repeat_interleave(sp.kv_repeat, dim=1)
    # (1, h, T/S, d) -> (1, h/S, T, d): scatter heads, gather tokens
    query, key, value = (_AllToAll.apply(x, 1, 2, sp.group) for x in (query, key, value))
    out, _ = ALL_ATTENTION_FUNCTIONS[inner](module, query, key, value, None, **kwargs)
    # (1, T, H/S, d) -> (1, T/S, H, d): scatter tokens, gather heads
    return _AllToAll.apply(out, 1, 2, sp.group), None


def _all_to_all(x: torch.Tensor, scatter_dim: int, gather_dim: int, group: dist.ProcessGroup) -> torch.Tensor:
    """Rank ``j`` gets part ``j`` of ``x`` along ``scatter_dim`` from every rank, joined in rank order along
    ``gather_dim``."""
    size = dist.get_world_size(group)
    send = torch.stack(x.chunk(size, dim=scatter_dim)).contiguous()
    received = torch.empty_like(send)
    dist.all_to_all_single(received, send, group=group)
    return torch.cat(received.unbind(0), dim=gather_dim)


class _AllToAll(torch.autograd.Function):
    """``_all_to_all`` whose gradient is the reverse exchange."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, scatter_dim: int, gather_dim: int, group: dist.ProcessGroup) -> torch.Tensor:
        ctx.dims, ctx.group = (scatter_dim, gather_dim), group
        return _all_to_all(x, scatter_dim, gather_dim, group)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        scatter_dim, gather_dim = ctx.dims
        return _all_to_all(grad.contiguous(), gather_dim, scatter_dim, ctx.group), None, None, None


class _GatherChunks(torch.autograd.Function):
    """Every rank's ``(counts[r], ...)`` piece joined in rank order. Every rank computes the same loss from the
    joined outputs, so the gradient each rank needs for its piece is its own slice of the joined gradient."""

    @staticmethod
    def forward(ctx, local: torch.Tensor, counts: list[int], rank: int, group: dist.ProcessGroup) -> torch.Tensor:
        ctx.start, ctx.count = sum(counts[:rank]), counts[rank]
        longest = max(counts)
        padded = local.new_zeros((longest, *local.shape[1:]))
        padded[: local.shape[0]] = local
        pieces = [torch.empty_like(padded) for _ in counts]
        dist.all_gather(pieces, padded.contiguous(), group=group)
        return torch.cat([piece[:n] for piece, n in zip(pieces, counts)])

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return grad[ctx.start : ctx.start + ctx.count], None, None, None


def _widths(batch: TensorBatch) -> tuple[int, int]:
    """(prompt columns, response columns) of the verl row layout."""
    response = batch["responses"].shape[1]
    return batch["input_ids"].shape[1] - response, response
