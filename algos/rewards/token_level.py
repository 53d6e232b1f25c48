"""Turning one scalar score per response into a token-level reward tensor."""

from __future__ import annotations

from typing import Sequence

import torch


def scores_to_token_rewards(
    scores: Sequence[float] | torch.Tensor,
    response_lengths: Sequence[int] | torch.Tensor,
    response_len: int,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Place each score on its response's last real token.

    Args:
        scores: ``(batch,)`` one score per response.
        response_lengths: ``(batch,)`` number of real tokens in each right-padded response; 0 means an empty response,
            which receives no reward (it has no token to carry it).
        response_len: width of the padded response tensor.

    Returns:
        ``(batch, response_len)`` zeros except ``out[i, response_lengths[i] - 1] = scores[i]``.
    """
    scores_t = torch.as_tensor(scores, dtype=dtype).reshape(-1)
    lengths = torch.as_tensor(response_lengths, dtype=torch.long).reshape(-1)
    if scores_t.numel() != lengths.numel():
        raise ValueError(f"{scores_t.numel()} scores but {lengths.numel()} response lengths")
    if lengths.numel() and (int(lengths.min()) < 0 or int(lengths.max()) > response_len):
        raise ValueError(f"response lengths must lie in [0, {response_len}], got {lengths.tolist()}")
    out = torch.zeros(scores_t.numel(), response_len, dtype=dtype)
    has_tokens = lengths > 0
    rows = torch.nonzero(has_tokens, as_tuple=True)[0]
    out[rows, lengths[rows] - 1] = scores_t[rows]
    return out
