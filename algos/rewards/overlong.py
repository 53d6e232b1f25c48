"""DAPO's soft overlong punishment: a penalty that grows linearly over the last `buffer_len` tokens of the budget.

verl: `reward_model.overlong_buffer.{enable,len,penalty_factor}`. With a response budget `L_max` and a buffer
`L_cache`, a response of length `|y|` gets

    0                                    if |y| <= L_max - L_cache
    (L_max - L_cache - |y|) / L_cache * penalty_factor   inside the buffer (down to -penalty_factor at |y| = L_max)

added to its score, so the policy learns to finish before the hard cut instead of being told nothing by a truncated,
unscored answer.
"""

from __future__ import annotations

from typing import Sequence

import torch


def overlong_penalty(
    response_lengths: Sequence[int] | torch.Tensor, max_response_length: int, buffer_len: int, penalty_factor: float
) -> torch.Tensor:
    """`(batch,)` the penalty (<= 0) for each response length; see the module docstring for the formula.

    Args:
        response_lengths: `(batch,)` generated tokens per response.
        max_response_length: the generation budget `L_max` (data.max_response_length).
        buffer_len: `L_cache`, tokens before `L_max` where the penalty ramps up; 0 < buffer_len <= L_max.
        penalty_factor: the penalty at `L_max`, as a positive number.
    """
    if not 0 < buffer_len <= max_response_length:
        raise ValueError(f"overlong buffer length {buffer_len} must lie in (0, {max_response_length}]")
    lengths = torch.as_tensor(response_lengths, dtype=torch.float32).reshape(-1)
    exceed = lengths - (max_response_length - buffer_len)
    return torch.clamp(-exceed / buffer_len * penalty_factor, max=0.0)
