"""Per-sequence attention for packed rows, registered as a transformers attention implementation.

Packed input is one row holding several sequences. transformers' own sdpa path handles that by building a
``T x T`` block-diagonal mask, which costs ``O(T^2)`` memory and compute for the whole packed row (32 sequences of
~200 tokens: 32x the attention work of the padded batch). Here each sequence attends only to itself: one causal
``scaled_dot_product_attention`` per sequence, located by ``cu_seq_lens_q`` (the keyword flash-attention's varlen
path also uses). Without ``cu_seq_lens_q`` (padded batches, generation) it is exactly transformers' sdpa.

GRPO samples ``n`` responses per prompt, and the prompt is often most of each sequence. A row can also be packed with
one copy of each prompt followed by its responses (``SHARED_PROMPT_LAYOUT``): each response attends to the shared
prompt as if it had its own copy, so outputs and gradients are those of the unshared row, for about ``1/n`` of the
prompt's compute.

On CUDA a packed row, plain or shared-prompt, is one call per layer instead of a Python loop over sequences:
PyTorch's own flash-attention varlen kernel (``torch.nn.attention.varlen.varlen_attn``, ``VARLEN``), or
FlexAttention with a block mask built once per forward from the packing metadata (``FLEX``).
``packed_attention_kernel`` makes the choice per device, as measured (docs/gpu_engine.md); FlexAttention and the
varlen kernel have no CPU backward.

On a CPU in bf16/fp16, PyTorch's flash-attention *backward* is ~10x its forward (150 ms against 13 ms for 32
sequences of ~170 tokens, 9 heads: a third of a SmolLM2 LoRA update). ``_FlashThenMathAttention`` keeps the flash
forward and computes the gradient with plain matmuls and an fp32 softmax instead (~75 ms), numerically the same
gradient at bf16 precision.
"""

from __future__ import annotations

import functools
import inspect
import math
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

PACKED_SDPA = "rayrl_packed_sdpa"
# the two ways to run a packed row's attention
FLEX = "flex"  # one flex_attention call per layer, document-causal block mask
VARLEN = "varlen"  # one varlen_attn call per layer (PyTorch's flash-attention varlen kernel; CUDA)
PER_SEQUENCE = "per_sequence"  # one sdpa call per sequence (per prompt with shared prompts)
# keyword the model forward passes down to the attention: a row packed with one copy of each prompt (packing.py)
SHARED_PROMPT_LAYOUT = "shared_prompt_layout"


def _segments_from_position_ids(position_ids: torch.Tensor) -> list[int]:
    """Boundaries of sequences in one packed row: a new sequence starts where the position does not continue."""
    pos = position_ids.view(-1)
    starts = torch.nonzero(pos[1:] != pos[:-1] + 1).view(-1) + 1
    return [0, *starts.tolist(), pos.numel()]


class _FlashThenMathAttention(torch.autograd.Function):
    """Attention of ``b`` sequences, ``q (b, H, Lq, d)``, ``k/v (b, KV, Lk, d)`` with ``H % KV == 0``: flash forward,
    matmul backward (recomputing the probabilities in fp32 from q and k). ``allowed`` ``(Lq, Lk)`` or
    ``(b, 1, Lq, Lk)`` bool says which keys each query sees; None is plain causal (``Lq == Lk``)."""

    @staticmethod
    def forward(
        ctx, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, allowed: torch.Tensor | None = None
    ) -> torch.Tensor:
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=allowed, is_causal=allowed is None, scale=scale, enable_gqa=q.shape[1] != k.shape[1]
        )
        ctx.save_for_backward(q, k, v, out, allowed)
        ctx.scale = scale
        return out

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        q, k, v, out, allowed = ctx.saved_tensors
        batch, heads, q_len, dim = q.shape
        kv_heads, k_len = k.shape[1], k.shape[2]
        group = heads // kv_heads
        acc = torch.promote_types(q.dtype, torch.float32)  # softmax and its gradient in at least fp32
        k_rep, v_rep = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        scores = torch.matmul(q, k_rep.transpose(-1, -2)).to(acc).mul_(ctx.scale)
        blocked = torch.ones(q_len, k_len, dtype=torch.bool, device=q.device).triu_(1) if allowed is None else ~allowed
        probs = torch.softmax(scores.masked_fill_(blocked, float("-inf")), dim=-1)
        grad_v = torch.matmul(probs.to(q.dtype).transpose(-1, -2), grad_out)
        grad_probs = torch.matmul(grad_out, v_rep.transpose(-1, -2)).to(acc)
        # softmax backward: dS = P * (dP - rowsum(dO * O)), since rowsum(P * dP) = rowsum(dO * O)
        row_dot = (grad_out.to(acc) * out.to(acc)).sum(dim=-1, keepdim=True)
        grad_scores = probs.mul_(grad_probs.sub_(row_dot)).mul_(ctx.scale).to(q.dtype)
        grad_q = torch.matmul(grad_scores, k_rep)
        grad_k = torch.matmul(grad_scores.transpose(-1, -2), q)
        # each kv head served `group` query heads: its gradient is the sum over them
        grad_k = grad_k.view(batch, kv_heads, group, k_len, dim).sum(dim=2)
        grad_v = grad_v.view(batch, kv_heads, group, k_len, dim).sum(dim=2)
        return grad_q, grad_k, grad_v, None, None


def _attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float | None,
    dropout_p: float,
    allowed: torch.Tensor | None = None,
) -> torch.Tensor:
    """Attention ``(b, H, Lq, d)``: causal, or as ``allowed`` ``(Lq, Lk)`` / ``(b, 1, Lq, Lk)`` says."""
    if (
        q.device.type == "cpu"
        and q.dtype in (torch.bfloat16, torch.float16)
        and dropout_p == 0.0
        and torch.is_grad_enabled()
        and (q.requires_grad or k.requires_grad or v.requires_grad)
    ):
        return _FlashThenMathAttention.apply(q, k, v, scale if scale is not None else q.shape[-1] ** -0.5, allowed)
    return F.scaled_dot_product_attention(
        q,
        k,
        v,
        attn_mask=allowed,
        is_causal=allowed is None,
        dropout_p=dropout_p,
        scale=scale,
        enable_gqa=q.shape[1] != k.shape[1],
    )


def _causal_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None, dropout_p: float
) -> torch.Tensor:
    """One sequence's causal attention ``(1, H, L, d)``."""
    return _attention(q, k, v, scale, dropout_p)


@functools.lru_cache(maxsize=64)
def _response_block(prompt_len: int, lengths: tuple[int, ...], device: torch.device):
    """Index tensors that lay one prompt's responses, packed back to back, out as a padded batch and back.

    Returns ``gather`` ``(n, Lmax)``: the packed position of each response token (padding repeats a real position,
    whose copies are masked as keys and dropped as queries); ``unpad`` ``(sum(lengths),)``: where each
    real token sits in the flattened ``(n * Lmax)`` batch; ``allowed`` ``(n, 1, Lmax, prompt_len + Lmax)``: response
    token j sees the whole prompt and its own tokens 0..j, never padding. Cached: every layer asks for the same.
    """
    longest = max(lengths)
    starts = torch.tensor([0, *lengths], device=device).cumsum(0)[:-1]
    lens = torch.tensor(lengths, device=device)
    step = torch.arange(longest, device=device)
    real = step < lens[:, None]  # (n, Lmax)
    gather = torch.where(real, starts[:, None] + step, starts[:, None].clamp(max=max(sum(lengths) - 1, 0)))
    unpad = (torch.arange(len(lengths), device=device)[:, None] * longest + step).masked_select(real)
    own = (step[None, :] <= step[:, None])[None] & real[:, None, :]  # (n, Lmax query, Lmax key)
    allowed = torch.cat([torch.ones(len(lengths), longest, prompt_len, dtype=torch.bool, device=device), own], dim=2)
    return gather, unpad, allowed[:, None]


def _shared_prompt_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    layout: tuple[tuple[int, tuple[int, ...]], ...],
    scale: float | None,
    dropout_p: float,
) -> list[torch.Tensor]:
    """Attention for a row packed as ``[prompt][response 1]..[response n]`` per prompt (``layout``: the prompt
    length and the response lengths of each prompt, in packed order). The prompt attends causally to itself; each
    response to the whole prompt and causally to itself, never to its siblings, exactly as if it were packed
    after its own copy of the prompt. The siblings' gradients meet in the one prompt computation.

    A prompt's responses run as one padded batch ``(n, H, Lmax, d)`` against ``[prompt keys, own keys]``: one
    attention call per prompt instead of one per response, whose fixed cost dominated at GRPO's short responses."""
    lengths = [n for prompt, responses in layout for n in (prompt, sum(responses))]
    if sum(lengths) != query.shape[2]:
        raise ValueError(f"shared-prompt layout covers {sum(lengths)} tokens, the packed row has {query.shape[2]}")
    qs, ks, vs = query.split(lengths, dim=2), key.split(lengths, dim=2), value.split(lengths, dim=2)
    parts = []
    for i, (prompt_len, responses) in enumerate(layout):
        qp, kp, vp, qr, kr, vr = qs[2 * i], ks[2 * i], vs[2 * i], qs[2 * i + 1], ks[2 * i + 1], vs[2 * i + 1]
        parts.append(_causal_attention(qp, kp, vp, scale, dropout_p))
        if not sum(responses):
            continue
        gather, unpad, allowed = _response_block(prompt_len, tuple(responses), query.device)
        n, longest = gather.shape

        def batched(x: torch.Tensor, prefix: torch.Tensor | None) -> torch.Tensor:
            """(1, h, R, d) packed responses -> (n, h, Lmax, d), after ``prefix`` (1, h, P, d) when given."""
            rows = x[0][:, gather].transpose(0, 1)
            return rows if prefix is None else torch.cat([prefix.expand(n, -1, -1, -1), rows], dim=2)

        out = _attention(batched(qr, None), batched(kr, kp), batched(vr, vp), scale, dropout_p, allowed)
        heads, dim = out.shape[1], out.shape[3]
        parts.append(out.transpose(0, 1).reshape(heads, n * longest, dim)[:, unpad].unsqueeze(0))
    return parts


def _read_varlen_parameters() -> frozenset[str] | None:
    """The parameter names of this torch's ``varlen_attn``; None where torch (before 2.9) has none. Read once at
    import: inside a compiled layer a constant costs nothing, where a call here would break the graph."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    return frozenset(inspect.signature(varlen_attn).parameters)


_VARLEN_PARAMETERS = _read_varlen_parameters()


def varlen_kernel_available() -> bool:
    """Whether this torch has ``torch.nn.attention.varlen.varlen_attn`` (2.9 and later)."""
    return _VARLEN_PARAMETERS is not None


# the flash-attention kernel behind varlen_attn runs on Ampere and newer GPUs (compute capability 8.0) in half precision
_FLASH_MIN_CAPABILITY = (8, 0)
_FLASH_DTYPES = (torch.bfloat16, torch.float16)
_flash_capable_gpus: dict[int, bool] = {}  # per GPU index; filled when the model is built, outside compiled code


def _flash_capable(device: torch.device) -> bool:
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _flash_capable_gpus:
        _flash_capable_gpus[index] = torch.cuda.get_device_capability(index) >= _FLASH_MIN_CAPABILITY
    return _flash_capable_gpus[index]


def packed_attention_kernel(device: torch.device, dtype: torch.dtype = torch.bfloat16) -> str:
    """``VARLEN`` on a CUDA GPU of compute capability 8.0 or newer, in bf16/fp16, where torch has the kernel; else
    ``PER_SEQUENCE`` (docs/gpu_engine.md has the measurements: on an H200 the varlen kernel was the fastest and
    FlexAttention the slowest; on a CPU neither fused kernel has a backward). ``FLEX`` stays a tested alternative that
    benchmarks select (`bench/engine_mfu.py --attention flex`)."""
    if device.type == "cuda" and dtype in _FLASH_DTYPES and varlen_kernel_available() and _flash_capable(device):
        return VARLEN
    return PER_SEQUENCE


def _token_groups_from_cu(cu: torch.Tensor, total: int, device: torch.device):
    """Per packed token: its sequence (group), its segment (the same) and whether later segments share it (never)."""
    tokens = torch.arange(total, device=device)
    doc = torch.searchsorted(cu[1:].to(device=device, dtype=torch.long), tokens, right=True)
    return doc, doc, torch.zeros(total, dtype=torch.bool, device=device)


def _token_groups_from_layout(layout: tuple[tuple[int, tuple[int, ...]], ...], device: torch.device):
    """Per packed token of a shared-prompt row: its prompt group, its segment (the prompt or one response) and
    whether it is a prompt token (which every response of the group sees)."""
    seg_lens = [n for prompt, responses in layout for n in (prompt, *responses)]
    group_lens = [prompt + sum(responses) for prompt, responses in layout]
    is_prompt = [flag for prompt, responses in layout for flag in (True, *([False] * len(responses)))]
    seg_lens_t = torch.tensor(seg_lens, device=device)
    group = torch.repeat_interleave(torch.arange(len(layout), device=device), torch.tensor(group_lens, device=device))
    segment = torch.repeat_interleave(torch.arange(len(seg_lens), device=device), seg_lens_t)
    shared = torch.repeat_interleave(torch.tensor(is_prompt, device=device), seg_lens_t)
    return group, segment, shared


def packed_mask_mod(group: torch.Tensor, segment: torch.Tensor, shared: torch.Tensor):
    """FlexAttention ``mask_mod`` of a packed row: query ``q`` sees key ``k`` when both belong to the same group,
    ``k`` comes no later than ``q`` and ``k`` is either in ``q``'s own segment or a shared (prompt) token. Plain
    packing: group = segment = sequence, nothing shared (document-causal). Shared prompts: a prompt sees itself
    causally, a response the whole prompt and itself causally, never a sibling response."""

    def mask_mod(b, h, q, k):
        return (group[q] == group[k]) & (k <= q) & (shared[k] | (segment[q] == segment[k]))

    return mask_mod


def packed_mask_mod_for(metadata, total: int, device: torch.device):
    """``packed_mask_mod`` from ``cu_seq_lens`` (a tensor) or a shared-prompt layout (a tuple)."""
    if isinstance(metadata, torch.Tensor):
        return packed_mask_mod(*_token_groups_from_cu(metadata, total, device))
    return packed_mask_mod(*_token_groups_from_layout(metadata, device))


class _LastBlockMask:
    """The block mask of the forward in progress, built once per forward (and again only if a checkpointed layer
    recomputes after another forward): every layer gets the same ``cu_seq_lens`` tensor, or an equal layout tuple
    (FSDP's input casting rebuilds containers, so a layout is compared by value; a tensor by identity, no sync)."""

    def __init__(self) -> None:
        self.key = None
        self.mask = None

    def _same(self, metadata, total: int, device: torch.device) -> bool:
        if self.key is None or self.key[1:] != (total, device):
            return False
        if isinstance(metadata, torch.Tensor):
            return self.key[0] is metadata
        return isinstance(self.key[0], tuple) and self.key[0] == metadata

    def get(self, metadata, total: int, device: torch.device):
        from torch.nn.attention.flex_attention import create_block_mask

        key = (metadata, total, device)
        if not self._same(metadata, total, device):
            mask_mod = packed_mask_mod_for(metadata, total, device)
            self.mask = create_block_mask(mask_mod, None, None, total, total, device=device)
            self.key = key
        return self.mask


_block_masks = _LastBlockMask()


@functools.cache
def _compiled_flex_attention():
    from torch.nn.attention.flex_attention import flex_attention

    # compiled, FlexAttention is a fused kernel; eager it materialises every score (a debugging path). Dynamic:
    # every micro-batch packs another number of tokens, and one compilation must serve them all
    return torch.compile(flex_attention, dynamic=True)


def flex_packed_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, metadata, scale: float | None, compiled: bool = True
) -> torch.Tensor:
    """Attention of one packed row ``(1, H, T, d)`` as ``packed_mask_mod`` says, in one ``flex_attention`` call.
    ``metadata``: ``cu_seq_lens`` or a shared-prompt layout. ``compiled=False`` runs FlexAttention eagerly (CPU
    tests: exact, forward only)."""
    from torch.nn.attention.flex_attention import flex_attention

    total = query.shape[2]
    block_mask = _block_masks.get(metadata, total, query.device)
    attend = _compiled_flex_attention() if compiled else flex_attention
    return attend(query, key, value, block_mask=block_mask, scale=scale, enable_gqa=query.shape[1] != key.shape[1])


@dataclass(frozen=True)
class VarlenArgs:
    """Where each query segment and its keys lie for one varlen call: segment ``i``'s queries are packed rows
    ``cu_q[i]:cu_q[i+1]`` and its keys rows ``cu_k[i]:cu_k[i+1]`` of the key tensor, which is the packed keys
    themselves (``key_index`` None) or the packed keys gathered by ``key_index``. Causal alignment is bottom-right:
    the last query sees every key of its segment (flash-attention's rule when a segment has more keys than queries)."""

    cu_q: torch.Tensor  # (segments + 1,) int32
    cu_k: torch.Tensor  # (segments + 1,) int32
    max_q: int
    max_k: int
    key_index: Optional[torch.Tensor]  # (keys,) int64 packed positions, or None: the keys are the packed row


@functools.lru_cache(maxsize=16)
def varlen_args_for_layout(layout: tuple[tuple[int, tuple[int, ...]], ...], device: torch.device) -> VarlenArgs:
    """``VarlenArgs`` of a shared-prompt row ``[prompt][response 1]..[response n]`` per prompt: the prompt is one
    segment whose keys are itself; each response is a segment whose keys are its prompt's followed by its own, so
    with bottom-right causal alignment it sees the whole prompt and itself causally, never a sibling. Only the
    prompt's keys and values are copied (once per response); its queries, and every layer's other work, stay
    computed once. Cached: every layer asks for the same."""
    q_lens, k_lens, index = [], [], []
    start = 0
    for prompt_len, responses in layout:
        prompt = torch.arange(start, start + prompt_len)
        q_lens.append(prompt_len)
        k_lens.append(prompt_len)
        index.append(prompt)
        offset = start + prompt_len
        for n in responses:
            if n == 0:  # an empty response has no query; a zero-length segment would be a no-op
                continue
            q_lens.append(n)
            k_lens.append(prompt_len + n)
            index += [prompt, torch.arange(offset, offset + n)]
            offset += n
        start = offset

    def cumulative(lens: list[int]) -> torch.Tensor:
        return torch.tensor([0, *lens]).cumsum(0).to(device=device, dtype=torch.int32)

    return VarlenArgs(cumulative(q_lens), cumulative(k_lens), max(q_lens), max(k_lens), torch.cat(index).to(device))


def torch_varlen_causal(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_q: torch.Tensor,
    cu_k: torch.Tensor,
    max_q: int,
    max_k: int,
    scale: float | None,
) -> torch.Tensor:
    """Causal ``varlen_attn`` of ``q (T, H, d)`` against ``k/v (Tk, KV, d)`` -> ``(T, H, d)``, across the torch
    versions that have it: 2.9-2.10 take ``is_causal`` and equal head counts, later ones ``window_size`` (``(-1, 0)``
    is causal), ``enable_gqa`` and ``scale``."""
    params = _VARLEN_PARAMETERS
    kwargs: dict = {"window_size": (-1, 0)} if "window_size" in params else {"is_causal": True}
    if k.shape[1] != q.shape[1]:
        if "enable_gqa" in params:
            kwargs["enable_gqa"] = True
        else:  # query head h reads key/value head h // group, as repeat_interleave lays them out
            group = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    if scale is not None:
        if "scale" in params:
            kwargs["scale"] = scale
        elif not math.isclose(scale, q.shape[-1] ** -0.5):  # the kernel's fixed scale is 1/sqrt(d)
            q = q * (scale * q.shape[-1] ** 0.5)
    return torch.nn.attention.varlen.varlen_attn(q, k, v, cu_q, cu_k, max_q, max_k, **kwargs)


def varlen_packed_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    metadata,
    scale: float | None,
    max_len: int | None = None,
    attend=None,
) -> torch.Tensor:
    """Attention of one packed row, query ``(1, H, T, d)``, key/value ``(1, KV, T, d)``, in one varlen call ->
    ``(1, T, H, d)``. ``metadata``: ``cu_seq_lens`` (``max_len``: its longest sequence, else computed) or a
    shared-prompt layout. ``attend``: the kernel (default ``torch_varlen_causal``; tests pass a reference)."""
    q, k, v = (x[0].transpose(0, 1) for x in (query, key, value))  # (T, heads, d): HF's own layout, no copy
    if isinstance(metadata, torch.Tensor):
        cu = metadata.to(torch.int32)
        longest = max_len if max_len is not None else int((cu[1:] - cu[:-1]).max())
        args = VarlenArgs(cu, cu, longest, longest, None)
    else:
        args = varlen_args_for_layout(metadata, query.device)
        k, v = k.index_select(0, args.key_index), v.index_select(0, args.key_index)
    attend = attend or torch_varlen_causal
    return attend(q, k, v, args.cu_q, args.cu_k, args.max_q, args.max_k, scale).unsqueeze(0)


def packed_sdpa_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs,
):
    """query ``(1, heads, T, d)``, key/value ``(1, kv_heads, T, d)`` -> ``((1, T, heads, d), None)``."""
    layout = kwargs.get(SHARED_PROMPT_LAYOUT)
    cu = kwargs.get("cu_seq_lens_q")
    metadata = layout if layout is not None else cu
    dropout_p = dropout if module.training else 0.0
    packed = metadata is not None and dropout_p == 0.0
    kernel = packed_attention_kernel(query.device, query.dtype) if packed else PER_SEQUENCE
    if kernel != PER_SEQUENCE:
        if query.shape[0] != 1:
            raise ValueError(f"packed attention expects one packed row, got batch {query.shape[0]}")
        if kernel == VARLEN:
            return varlen_packed_attention(query, key, value, metadata, scaling, kwargs.get("max_length_q")), None
        out = flex_packed_attention(query, key, value, metadata, scaling)
        return out.transpose(1, 2).contiguous(), None
    if layout is not None:
        if query.shape[0] != 1:
            raise ValueError(f"packed attention expects one packed row, got batch {query.shape[0]}")
        parts = _shared_prompt_attention(query, key, value, layout, scaling, dropout_p)
        out = torch.cat(parts, dim=2) if len(parts) > 1 else parts[0]
        return out.transpose(1, 2).contiguous(), None
    if (
        cu is None
        and attention_mask is None
        and query.shape[0] == 1
        and kwargs.get("position_ids") is not None
        and query.shape[2] > 1
    ):
        bounds = _segments_from_position_ids(kwargs["position_ids"])
    elif cu is not None:
        bounds = cu.tolist()
    else:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    if query.shape[0] != 1:
        raise ValueError(f"packed attention expects one packed row, got batch {query.shape[0]}")
    lengths = [e - s for s, e in zip(bounds[:-1], bounds[1:])]
    if sum(lengths) != query.shape[2]:
        raise ValueError(f"sequence boundaries cover {sum(lengths)} tokens, the packed row has {query.shape[2]}")
    # torch.split (not one slice per sequence): its backward is a single concatenation, whereas n slices would
    # each scatter into a zero-filled full-size gradient, O(n * T) per layer
    parts = [
        _causal_attention(q, k, v, scaling, dropout_p)
        for q, k, v in zip(query.split(lengths, dim=2), key.split(lengths, dim=2), value.split(lengths, dim=2))
        if q.shape[2] > 0
    ]
    out = torch.cat(parts, dim=2) if len(parts) > 1 else parts[0]
    return out.transpose(1, 2).contiguous(), None


def packed_sdpa_mask(*args, attention_mask: torch.Tensor | None = None, **kwargs):
    """No mask for packed rows (the attention separates the sequences); transformers' sdpa mask otherwise."""
    if attention_mask is None:
        return None
    return sdpa_mask(*args, attention_mask=attention_mask, **kwargs)


def register_packed_attention() -> str:
    """Make ``PACKED_SDPA`` a valid ``attn_implementation``; idempotent. Returns the name."""
    if PACKED_SDPA not in ALL_ATTENTION_FUNCTIONS:
        ALL_ATTENTION_FUNCTIONS.register(PACKED_SDPA, packed_sdpa_attention)
        ALL_MASK_ATTENTION_FUNCTIONS.register(PACKED_SDPA, packed_sdpa_mask)
    return PACKED_SDPA
