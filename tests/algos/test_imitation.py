"""`algos.imitation.self_imitation_loss`: a replayed answer is a sample with advantage `coef` and ratio 1."""

from __future__ import annotations

import pytest
import torch
from support import policy_loss_config

from algos.catalog import POLICY_LOSSES
from algos.imitation import self_imitation_loss

# two rows of three response tokens; row 0 is replayed (its last token is padding), row 1 is a fresh sample
LOG_PROB = torch.tensor([[-1.0, -2.0, -0.3], [-0.5, -0.7, -0.9]])
REPLAY_MASK = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])


def test_the_loss_is_coef_times_the_replayed_tokens_nll_over_the_updates_normaliser():
    # seq-mean-token-sum-norm over a mini-batch of 2 rows at a factor of 4: normaliser 8. Row 0's kept NLL sums to
    # 1 + 2 = 3, so the loss is 0.5 * 3 / 8; the padding (-0.3) and the fresh row count nowhere
    loss, stats = self_imitation_loss(LOG_PROB, REPLAY_MASK, 0.5, "seq-mean-token-sum-norm", normalizer=8.0)
    assert float(loss) == pytest.approx(0.5 * 3 / 8)
    assert stats == {"self_imitation_nll": pytest.approx(1.5)}  # (1 + 2) / 2 replayed tokens


def test_its_gradient_is_the_policy_gradient_of_an_on_policy_sample_with_advantage_coef():
    coef = 0.7
    log_prob = LOG_PROB.clone().requires_grad_(True)
    self_imitation_loss(log_prob, REPLAY_MASK, coef, "token-mean", normalizer=5.0)[0].backward()
    imitation_grad = log_prob.grad.clone()

    log_prob = LOG_PROB.clone().requires_grad_(True)
    vanilla = POLICY_LOSSES.get("vanilla")
    pg_loss, _ = vanilla(
        log_prob.detach(),  # old = current: ratio 1, inside the clip range
        log_prob,
        coef * REPLAY_MASK,
        REPLAY_MASK,
        loss_agg_mode="token-mean",
        config=policy_loss_config(),
        normalizer=5.0,
    )
    pg_loss.backward()
    assert torch.allclose(imitation_grad, log_prob.grad)
    assert imitation_grad[0, 0] == pytest.approx(-coef / 5.0)  # d/dlogp of coef * (-logp) / 5


def test_no_replayed_token_gives_a_zero_loss_and_a_negative_coef_is_refused():
    loss, stats = self_imitation_loss(LOG_PROB, torch.zeros_like(REPLAY_MASK), 1.0, "token-mean", normalizer=3.0)
    assert float(loss) == 0.0 and stats == {"self_imitation_nll": 0.0}
    with pytest.raises(ValueError, match="coef must be >= 0"):
        self_imitation_loss(LOG_PROB, REPLAY_MASK, -0.1, "token-mean")
