"""Self-imitation (Oh et al., 2018, "Self-Imitation Learning"): the policy imitates its own earlier answers that scored
well, replayed in a later update.

A replayed answer is treated as a sample of the update with a fixed advantage ``coef`` on every token. Its loss is
``coef * agg(-log_prob)``: what PPO's clipped loss gives a sample whose ratio is 1 (its old policy is the current
one), so its gradient is the policy gradient ``-coef * grad log_prob``, and ``coef`` reads on the scale of the run's
advantages. The ``normalizer`` is the update's (``algos.aggregation``): a replayed answer weighs what a sample of the
mini-batch weighs.
"""

from __future__ import annotations

import torch

from algos.aggregation import agg_loss
from algos.masked import masked_mean


def self_imitation_loss(
    log_prob: torch.Tensor,
    replay_mask: torch.Tensor,
    coef: float,
    loss_agg_mode: str,
    normalizer: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Loss and detached stats of the replayed answers.

    Args:
        log_prob: ``(batch, response_len)`` the current policy's log-probs of the response tokens.
        replay_mask: ``(batch, response_len)`` 1 on the tokens of replayed answers, 0 elsewhere (fresh samples and
            padding).
        coef: the advantage every replayed token gets (>= 0).
        loss_agg_mode, normalizer: as for the policy loss (``algos.aggregation.agg_loss``).

    Returns:
        the scalar loss, and ``self_imitation_nll``: the mean negative log-prob of the replayed tokens (0 when
        there are none).
    """
    if coef < 0:
        raise ValueError(f"self-imitation coef must be >= 0, got {coef}")
    nll = -log_prob
    loss = coef * agg_loss(nll, replay_mask, loss_agg_mode, normalizer)
    return loss, {"self_imitation_nll": float(masked_mean(nll.detach(), replay_mask))}
