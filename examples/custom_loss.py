"""A policy loss of your own: `actor_rollout_ref.actor.policy_loss.loss_mode=examples.custom_loss:clipped_pg`.

The trainer imports `module:function` and calls it per micro-batch with (batch, response_len) tensors; it returns the
scalar loss and a dict of 0-d metric tensors (logged as `actor/<name>`). Aggregate with `agg_loss` and its
`normalizer`, so that cutting the mini-batch into micro-batches does not change the gradient.
"""

from __future__ import annotations

import torch

from algos.aggregation import agg_loss
from algos.catalog import PolicyLossTraits
from algos.masked import masked_mean


def clipped_pg(old_log_prob, log_prob, advantages, response_mask, *, loss_agg_mode, config, normalizer=None):
    """Policy gradient weighted by the ratio clipped to [1 - low, 1 + high], the weight held constant (CISPO-like)."""
    with torch.no_grad():
        ratio = torch.exp((log_prob - old_log_prob).clamp(-20.0, 20.0))
        weight = ratio.clamp(1.0 - config.low, 1.0 + config.high)
    losses = -weight * advantages * log_prob
    loss = agg_loss(losses, response_mask, loss_agg_mode, normalizer)
    metrics = {
        "pg_clipfrac": masked_mean((weight != ratio).float(), response_mask),
        "ppo_kl": masked_mean(old_log_prob - log_prob, response_mask).detach(),
        "pg_clipfrac_lower": torch.zeros((), device=loss.device),
    }
    return loss, metrics


# each token's loss is A_t times a factor that does not depend on A_t's size, so importance weights may scale it
clipped_pg.traits = PolicyLossTraits(linear_in_advantage=True)
