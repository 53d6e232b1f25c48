"""Per-sequence attention for packed rows, registered as a transformers attention implementation.

Packed input is one row holding several sequences. transformers' own sdpa path handles that by building a
``T x T`` block-diagonal mask, which costs ``O(T^2)`` memory and compute for the whole packed row (32 sequences of
~200 tokens: 32x the attention work of the padded batch). Here each sequence attends only to itself: one causal
``scaled_dot_product_attention`` per sequence, located by ``cu_seq_lens_q`` (the keyword flash-attention's varlen
path also uses). Without ``cu_seq_lens_q`` (padded batches, generation) it is exactly transformers' sdpa.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

PACKED_SDPA = "rayrl_packed_sdpa"


def _segments_from_position_ids(position_ids: torch.Tensor) -> list[int]:
    """Boundaries of sequences in one packed row: a new sequence starts where the position does not continue."""
    pos = position_ids.view(-1)
    starts = torch.nonzero(pos[1:] != pos[:-1] + 1).view(-1) + 1
    return [0, *starts.tolist(), pos.numel()]


def packed_sdpa_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                          attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                          **kwargs):
    """query ``(1, heads, T, d)``, key/value ``(1, kv_heads, T, d)`` -> ``((1, T, heads, d), None)``."""
    cu = kwargs.get("cu_seq_lens_q")
    if cu is None and attention_mask is None and query.shape[0] == 1 and kwargs.get("position_ids") is not None \
            and query.shape[2] > 1:
        bounds = _segments_from_position_ids(kwargs["position_ids"])
    elif cu is not None:
        bounds = cu.tolist()
    else:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    if query.shape[0] != 1:
        raise ValueError(f"packed attention expects one packed row, got batch {query.shape[0]}")
    lengths = [e - s for s, e in zip(bounds[:-1], bounds[1:])]
    if sum(lengths) != query.shape[2]:
        raise ValueError(f"sequence boundaries cover {sum(lengths)} tokens, the packed row has {query.shape[2]}")
    dropout_p = dropout if module.training else 0.0
    gqa = query.shape[1] != key.shape[1]
    # torch.split (not one slice per sequence): its backward is a single concatenation, whereas n slices would
    # each scatter into a zero-filled full-size gradient, O(n * T) per layer
    parts = [F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout_p, scale=scaling,
                                            enable_gqa=gqa)
             for q, k, v in zip(query.split(lengths, dim=2), key.split(lengths, dim=2), value.split(lengths, dim=2))
             if q.shape[2] > 0]
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
