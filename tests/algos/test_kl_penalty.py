"""KL estimators, exact full-vocabulary KL, in-reward penalty and KL controllers."""

import math

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from algos.catalog import KL_KINDS, LOG_PROB_KL_KINDS
from algos.kl import apply_kl_penalty_to_rewards, full_kl, kl_penalty
from algos.kl_controller import AdaptiveKLController, FixedKLController, make_kl_controller

HYP = settings(max_examples=30, deadline=None)


@pytest.mark.parametrize(
    "kinds, expected",
    [
        (("kl", "k1"), 1.0),  # x = log_prob - ref = -1 - (-2) = 1
        (("abs",), 1.0),
        (("mse", "k2"), 0.5),  # x^2 / 2
        (("low_var_kl", "k3"), math.exp(-1.0) + 1.0 - 1.0),  # exp(-x) + x - 1
    ],
)
def test_estimators_hand_computed(kinds, expected):
    for kind in kinds:
        out = kl_penalty(torch.tensor([[-1.0]]), torch.tensor([[-2.0]]), kind)
        assert out.item() == pytest.approx(expected, rel=1e-6), kind


def test_low_var_kl_is_clamped_to_ten():
    # x = -30: exp(30) - 30 - 1 would be ~1e13; verl bounds one token's k3 at 10.
    assert kl_penalty(torch.tensor([-31.0]), torch.tensor([-1.0]), "low_var_kl").item() == 10.0


def test_straight_through_keeps_value_and_takes_k2_gradient():
    log_prob = torch.tensor([-1.0, -0.5], requires_grad=True)
    ref = torch.tensor([-2.0, -0.25])
    out = kl_penalty(log_prob, ref, "k3+")
    assert torch.allclose(out, kl_penalty(log_prob, ref, "k3"))
    (grad,) = torch.autograd.grad(out.sum(), log_prob)
    assert torch.allclose(grad, (log_prob - ref).detach())  # d(x^2/2)/dx = x


def test_full_and_unknown_kinds_are_explained():
    with pytest.raises(ValueError, match="full_kl"):
        kl_penalty(torch.zeros(1), torch.zeros(1), "full")
    with pytest.raises(ValueError, match="unknown KL kind 'k4'.*low_var_kl"):
        kl_penalty(torch.zeros(1), torch.zeros(1), "k4")
    assert "full" in KL_KINDS and "full" not in LOG_PROB_KL_KINDS


@pytest.mark.parametrize("kind", LOG_PROB_KL_KINDS)
def test_every_listed_log_prob_kind_is_accepted_and_zero_on_policy(kind):
    # Identical distributions: every estimator is 0.
    assert not kl_penalty(torch.full((2, 3), -1.5), torch.full((2, 3), -1.5), kind).any()


def test_full_kl_hand_computed():
    # p = softmax(0, 0) = (1/2, 1/2), q = softmax(0, ln 3) = (1/4, 3/4):
    # KL = 1/2 ln(2) + 1/2 ln(2/3) = 1/2 ln(4/3).
    out = full_kl(torch.tensor([[[0.0, 0.0]]]), torch.tensor([[[0.0, math.log(3.0)]]]))
    assert out.shape == (1, 1) and out.item() == pytest.approx(0.5 * math.log(4 / 3), rel=1e-6)


@HYP
@given(seed=st.integers(0, 2**16), vocab=st.integers(2, 12))
def test_k1_and_k3_average_to_the_exact_kl(seed, vocab):
    # Under y ~ p, E[k1] = E[k3] = KL(p || q). Summing the estimators over the whole vocabulary weighted by p gives
    # the expectation exactly, so it must equal full_kl (as long as k3's clamp at 10 is not reached).
    gen = torch.Generator().manual_seed(seed)
    z, w = torch.randn(2, vocab, dtype=torch.float64, generator=gen)
    logp, logq = torch.log_softmax(z, -1), torch.log_softmax(w, -1)
    assume(bool(((logq - logp).exp() < 12).all()))
    exact = full_kl(z[None], w[None]).item()
    for kind in ("k1", "k3"):
        expectation = (logp.exp() * kl_penalty(logp, logq, kind)).sum().item()
        assert expectation == pytest.approx(exact, rel=1e-9, abs=1e-12), kind


def test_apply_kl_penalty_to_rewards_hand_computed():
    scores = torch.tensor([[0.0, 0.0, 1.0], [0.0, 2.0, 0.0]])
    old = torch.tensor([[-1.0, -1.0, -1.0], [-1.0, -1.0, -1.0]])
    ref = torch.tensor([[-2.0, -1.0, -1.5], [-1.5, -1.5, -7.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]])
    rewards, m = apply_kl_penalty_to_rewards(scores, old, ref, mask, kl_coef=0.1, kind="kl")
    # k1 per kept token: row 0 [1, 0], row 1 [0.5, 0.5]; rewards = scores - 0.1 * kl; masked tokens keep their score.
    assert torch.allclose(rewards, torch.tensor([[-0.1, 0.0, 1.0], [-0.05, 1.95, 0.0]]))
    # Mean over responses of per-response token-mean KL: mean(0.5, 0.5).
    assert m == {"reward_kl_penalty": pytest.approx(0.5), "reward_kl_penalty_coeff": 0.1}


def test_fixed_controller_never_changes():
    ctrl = make_kl_controller("fixed", kl_coef=0.05, target_kl=0.1, horizon=100)
    ctrl.update(current_kl=100.0, n_steps=1000)
    assert isinstance(ctrl, FixedKLController) and ctrl.value == 0.05


def test_adaptive_controller_hand_computed():
    ctrl = make_kl_controller("adaptive", kl_coef=0.1, target_kl=0.1, horizon=100)
    assert isinstance(ctrl, AdaptiveKLController)
    # KL twice the target: error 1.0 clipped to 0.2; x(1 + 0.2 * 10 / 100) = x1.02.
    ctrl.update(current_kl=0.2, n_steps=10)
    assert ctrl.value == pytest.approx(0.102)
    # KL half the target: error -0.5 clipped to -0.2; x(1 - 0.2 * 10 / 100) = x0.98.
    ctrl.update(current_kl=0.05, n_steps=10)
    assert ctrl.value == pytest.approx(0.102 * 0.98)
    # On target: unchanged.
    ctrl.update(current_kl=0.1, n_steps=10)
    assert ctrl.value == pytest.approx(0.102 * 0.98)


def test_controller_config_errors_name_the_key():
    with pytest.raises(ValueError, match=r"algorithm\.kl_ctrl\.type='pid'.*adaptive.*fixed|fixed.*adaptive"):
        make_kl_controller("pid", kl_coef=0.1, target_kl=0.1, horizon=100)
    with pytest.raises(ValueError, match=r"algorithm\.kl_ctrl\.horizon"):
        make_kl_controller("adaptive", kl_coef=0.1, target_kl=0.1, horizon=0)
    with pytest.raises(ValueError, match=r"algorithm\.kl_ctrl\.target_kl"):
        make_kl_controller("adaptive", kl_coef=0.1, target_kl=0, horizon=100)
