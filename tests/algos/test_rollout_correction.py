"""Truncated importance weights of the proximal over the sampler's policy, and the decoupled PPO objective they give."""

import math

import pytest
import torch
from support import policy_loss_config

from algos.catalog import POLICY_LOSSES, policy_loss_traits
from algos.policy_loss import vanilla
from algos.rollout_correction import rollout_is_weights

LN2 = math.log(2.0)


def test_token_weights_are_the_ratio_truncated_at_the_threshold_and_zero_at_padding():
    # per token old - sampler = ln 2, 0, -ln 2, ln 4 (then padding): ratios 2, 1, 0.5, 4 -> 4 truncated at 3
    old = torch.tensor([[LN2, 0.0, -LN2, 2 * LN2, 5.0]])
    sampler = torch.zeros(1, 5)
    mask = torch.tensor([[1, 1, 1, 1, 0]])
    weights, m = rollout_is_weights(old, sampler, mask, level="token", threshold=3.0)
    torch.testing.assert_close(weights, torch.tensor([[2.0, 1.0, 0.5, 3.0, 0.0]]))
    assert float(m["rollout_is_mean"]) == pytest.approx((2 + 1 + 0.5 + 3) / 4)
    assert float(m["rollout_is_sq_mean"]) == pytest.approx((4 + 1 + 0.25 + 9) / 4)
    assert float(m["rollout_is_ratio_fraction_high"]) == pytest.approx(1 / 4)  # only the 4 was cut


def test_sequence_weights_are_the_product_of_the_token_ratios_on_every_token():
    # row 0: ratios 2 and 0.5 -> product 1; row 1: 2 * 2 = 4 -> truncated at 2; the padded token's log-prob gap
    # (7.0) must not count
    old = torch.tensor([[LN2, -LN2, 0.0], [LN2, LN2, 7.0]])
    sampler = torch.zeros(2, 3)
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]])
    weights, m = rollout_is_weights(old, sampler, mask, level="sequence", threshold=2.0)
    torch.testing.assert_close(weights, torch.tensor([[1.0, 1.0, 0.0], [2.0, 2.0, 0.0]]))
    assert float(m["rollout_is_ratio_fraction_high"]) == pytest.approx(0.5)  # row 1's two tokens


def test_weights_carry_no_gradient_and_bad_arguments_are_refused():
    old = torch.zeros(1, 2, requires_grad=True)
    weights, _ = rollout_is_weights(old, torch.zeros(1, 2), torch.ones(1, 2), level="token", threshold=2.0)
    assert not weights.requires_grad
    with pytest.raises(ValueError, match="token"):
        rollout_is_weights(old, torch.zeros(1, 2), torch.ones(1, 2), level="geometric", threshold=2.0)
    with pytest.raises(ValueError, match="threshold"):
        rollout_is_weights(old, torch.zeros(1, 2), torch.ones(1, 2), level="token", threshold=0.0)


def test_scaled_advantages_give_the_decoupled_objective_computed_by_hand():
    # An off-policy batch: the sampler drew tokens with log-probs `behaviour`; the proximal policy (`old`, the PPO
    # ratio's anchor) and the current one (`log_prob`) have moved since. By hand, per token:
    #   w = min(pi_old / pi_behaviour, 2)          ratios 2, 0.5, 1.5  -> w = 2, 0.5, 1.5
    #   r = pi / pi_old                            ratios 1.1, 1.5, 0.5
    #   l = w * max(-A r, -A clip(r, 0.8, 1.2))    with A = 1, 1, -1:
    #     token 0: 2   * max(-1.1, -1.1)  = -2.2
    #     token 1: 0.5 * max(-1.5, -1.2)  = -0.6
    #     token 2: 1.5 * max( 0.5,  0.8)  =  1.2  (dual clip bound 3 * 1 = 3 not reached)
    #   token-mean: (-2.2 - 0.6 + 1.2) / 3
    behaviour = torch.zeros(1, 3)
    old = torch.tensor([[LN2, -LN2, math.log(1.5)]])
    log_prob = (old + torch.tensor([[math.log(1.1), math.log(1.5), math.log(0.5)]])).requires_grad_()
    advantages = torch.tensor([[1.0, 1.0, -1.0]])
    mask = torch.ones(1, 3)
    weights, _ = rollout_is_weights(old, behaviour, mask, level="token", threshold=2.0)
    loss, metrics = vanilla(
        old,
        log_prob,
        advantages * weights,
        mask,
        loss_agg_mode="token-mean",
        config=policy_loss_config(clip_ratio=0.2, clip_ratio_c=3.0),
    )
    assert float(loss.detach()) == pytest.approx((-2.2 - 0.6 + 1.2) / 3, rel=1e-6)
    # weighting does not change which tokens count as clipped: token 1 (r 1.5 > 1.2, A > 0) and token 2 (r 0.5 < 0.8,
    # A < 0) took the clipped term
    assert float(metrics["pg_clipfrac"]) == pytest.approx(2 / 3)


def test_only_losses_linear_in_the_advantage_are_marked_so():
    linear = {name for name in POLICY_LOSSES.names() if policy_loss_traits(name).linear_in_advantage}
    assert linear == {"vanilla", "gspo", "gpg", "reinforce", "cispo"}
