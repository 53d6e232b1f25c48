"""Packed rows shared by the packed-attention tests: a plain packing and a shared-prompt layout of a few short
sequences, and the per-sequence path (the CPU's kernel) that every fused kernel is checked against."""

from __future__ import annotations

import torch

from app.engine.packed_attention import SHARED_PROMPT_LAYOUT, packed_sdpa_attention

HEADS, KV_HEADS, DIM = 6, 2, 8
LENGTHS = [5, 1, 7, 3]  # plain packing: four sequences
LAYOUT = ((5, (3, 0, 4)), (2, (1,)))  # shared prompts: 5 tokens with responses 3, 0, 4; 2 tokens with one of 1
CPU = torch.device("cpu")


def cu_of(lengths: list[int]) -> torch.Tensor:
    """``cu_seq_lens`` of sequences of these lengths packed back to back."""
    return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)


def total_tokens(metadata) -> int:
    """Tokens in the packed row that ``cu_seq_lens`` or a shared-prompt layout describes."""
    if isinstance(metadata, torch.Tensor):
        return int(metadata[-1])
    return sum(prompt + sum(responses) for prompt, responses in metadata)


class EvalLayer(torch.nn.Module):
    training = False


def per_sequence(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, metadata) -> torch.Tensor:
    """The per-sequence kernel's output ``(1, T, H, d)`` for query ``(1, H, T, d)`` (on a CPU, the default)."""
    kwargs = {SHARED_PROMPT_LAYOUT: metadata} if isinstance(metadata, tuple) else {"cu_seq_lens_q": metadata}
    return packed_sdpa_attention(EvalLayer(), q, k, v, None, **kwargs)[0]
