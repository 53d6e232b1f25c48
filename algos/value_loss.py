"""Clipped value (critic) loss for PPO."""

from __future__ import annotations

import torch

from algos.aggregation import agg_loss
from algos.masked import masked_mean


def compute_value_loss(
    vpreds: torch.Tensor,
    values: torch.Tensor,
    returns: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    cliprange_value: float | None,
    loss_agg_mode: str,
    normalizer: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``0.5 * agg(max((vpred - R)^2, (clip(vpred, V_old - c, V_old + c) - R)^2))``.

    ``vpreds``: current critic output (with grad); ``values``: critic output at rollout time; ``returns``: targets;
    all ``(batch, response_len)``. ``cliprange_value`` is verl's ``critic.cliprange_value``; ``None`` disables the
    clip. Taking the max of the two errors makes the clip pessimistic: it only removes incentive to move the value
    further than ``c`` from the old value, never adds one. Metrics (detached): ``vf_clipfrac`` (fraction of kept
    tokens where the clipped error was the larger) and ``vpred_mean``.
    """
    err_unclipped = (vpreds - returns) ** 2
    if cliprange_value is None:
        losses = err_unclipped
        clipfrac = torch.zeros((), device=vpreds.device)
    else:
        if cliprange_value < 0:
            raise ValueError(f"critic.cliprange_value must be >= 0, got {cliprange_value!r}")
        vclipped = torch.clamp(vpreds, values - cliprange_value, values + cliprange_value)
        err_clipped = (vclipped - returns) ** 2
        losses = torch.maximum(err_unclipped, err_clipped)
        with torch.no_grad():
            clipfrac = masked_mean((err_clipped > err_unclipped).float(), response_mask)
    loss = 0.5 * agg_loss(losses, response_mask, loss_agg_mode, normalizer)
    with torch.no_grad():
        vpred_mean = masked_mean(vpreds.detach(), response_mask)
    return loss, {"vf_clipfrac": clipfrac.detach(), "vpred_mean": vpred_mean}
