"""Policy losses: hand-computed clip behaviour, gradient direction, metrics, and config handling."""

import dataclasses
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from support import policy_loss_config

from algos.aggregation import LOSS_AGG_MODES, loss_normalizer
from algos.catalog import POLICY_LOSSES
from algos.policy_loss import (
    cispo,
    clip_cov,
    geo_mean,
    gspo,
    kl_cov,
    reinforce,
    resolve_loss_agg_mode,
    vanilla,
)
from algos.policy_loss_config import PolicyLossConfig
from app.config.schema import ActorConfig

HYP = settings(max_examples=30, deadline=None)

# the aggregation every call states (the loss functions take no default: actor.loss_agg_mode's is the schema's);
# gspo and geo_mean run verl's forced seq-mean-token-mean
TOKEN_MEAN = {"loss_agg_mode": "token-mean"}
SEQ_MEAN = {"loss_agg_mode": "seq-mean-token-mean"}


def test_vanilla_hand_computed_clip_and_dual_clip():
    ratios = torch.tensor([[1.5, 0.5, 0.5, 5.0]])
    adv = torch.tensor([[1.0, 1.0, -1.0, -1.0]])
    old = torch.zeros(1, 4)
    log_prob = ratios.log().requires_grad_()
    loss, m = vanilla(old, log_prob, adv, torch.ones(1, 4), loss_agg_mode="token-mean", config=policy_loss_config())
    # Per token, max(-A r, -A clip(r, 0.8, 1.2)), then for A<0 min(., 3 * -A):
    #   A=+1 r=1.5: max(-1.5, -1.2) = -1.2 (clipped)      A=+1 r=0.5: max(-0.5, -0.8) = -0.5
    #   A=-1 r=0.5: max(0.5, 0.8) = 0.8 (clipped)         A=-1 r=5.0: max(5, 1.2) = 5 -> dual clip min(5, 3) = 3
    assert loss.item() == pytest.approx((-1.2 - 0.5 + 0.8 + 3.0) / 4, rel=1e-6)
    assert m["pg_clipfrac"].item() == 0.5  # tokens 0 and 2
    assert m["pg_clipfrac_lower"].item() == 0.25  # token 3
    assert m["ppo_kl"].item() == pytest.approx(-math.log(1.5 * 0.5 * 0.5 * 5.0) / 4, rel=1e-6)
    loss.backward()
    # Only the unclipped token has a gradient: d(-A r)/d log r = -A r = -0.5, / 4 tokens.
    assert torch.allclose(log_prob.grad, torch.tensor([[0.0, -0.125, 0.0, 0.0]]))
    assert all(not v.requires_grad for v in m.values())


def test_vanilla_asymmetric_clip_uses_clip_ratio_high():
    log_prob = torch.tensor([[math.log(1.25)]], requires_grad=True)
    args = (torch.zeros(1, 1), log_prob, torch.ones(1, 1), torch.ones(1, 1))
    # Symmetric 0.2: ratio 1.25 > 1.2 is clipped, no gradient.
    loss, _ = vanilla(*args, loss_agg_mode="token-mean", config=policy_loss_config(clip_ratio=0.2))
    assert torch.autograd.grad(loss, log_prob)[0].item() == 0.0
    # clip_ratio_high 0.28 (DAPO clip-higher): 1.25 < 1.28 is inside, gradient -A r = -1.25.
    loss, m = vanilla(*args, **TOKEN_MEAN, config=policy_loss_config(clip_ratio=0.2, clip_ratio_high=0.28))
    assert torch.autograd.grad(loss, log_prob)[0].item() == pytest.approx(-1.25)
    assert m["pg_clipfrac"].item() == 0.0


def test_gspo_hand_computed_sequence_ratio_token_gradient():
    log_prob = torch.tensor([[0.1, 0.3, 9.0]], requires_grad=True)  # last token is padding
    mask = torch.tensor([[1, 1, 0]])
    adv = torch.tensor([[1.0, 1.0, 1.0]])
    loss, m = gspo(torch.zeros(1, 3), log_prob, adv, mask, **SEQ_MEAN, config=policy_loss_config(clip_ratio=0.5))
    # Sequence ratio = exp(mean(0.1, 0.3)) = exp(0.2) on every kept token, inside [0.5, 1.5]:
    # seq-mean-token-mean of -A s = -exp(0.2). d/dlogp_t = -A s / 2 tokens for each kept token.
    s = math.exp(0.2)
    assert loss.item() == pytest.approx(-s, rel=1e-6)
    loss.backward()
    assert torch.allclose(log_prob.grad, torch.tensor([[-s / 2, -s / 2, 0.0]]))
    assert m["pg_clipfrac"].item() == 0.0 and m["ppo_kl"].item() == pytest.approx(-0.2)


def test_gspo_clips_on_the_sequence_ratio():
    # GSPO's tiny clip range (3e-4 / 4e-4 in the paper): a sequence ratio of exp(0.2) is clipped on all tokens even
    # though the first token's own ratio exp(0.1) is also out of range - the decision is per sequence.
    log_prob = torch.tensor([[0.1, 0.3]], requires_grad=True)
    cfg = policy_loss_config(clip_ratio_low=3e-4, clip_ratio_high=4e-4)
    loss, m = gspo(torch.zeros(1, 2), log_prob, torch.ones(1, 2), torch.ones(1, 2), **SEQ_MEAN, config=cfg)
    assert loss.item() == pytest.approx(-(1 + 4e-4), rel=1e-6)
    assert m["pg_clipfrac"].item() == 1.0
    assert torch.autograd.grad(loss, log_prob)[0].abs().sum().item() == 0.0


def test_reinforce_hand_computed():
    log_prob = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    loss, m = reinforce(
        torch.tensor([[-1.5, -2.0]]),
        log_prob,
        torch.tensor([[2.0, -1.0]]),
        torch.ones(1, 2),
        loss_agg_mode="token-mean",
    )
    # mean(-A * logp) = mean(2, -2) = 0; gradient -A / 2 = [-1, 0.5]; ppo_kl = mean(old - new) = mean(-0.5, 0).
    assert loss.item() == 0.0 and m["ppo_kl"].item() == -0.25
    loss.backward()
    assert log_prob.grad.tolist() == [[-1.0, 0.5]]


def test_gpg_is_plain_policy_gradient_whatever_the_old_policy():
    assert POLICY_LOSSES.get("gpg") is reinforce
    log_prob = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    adv = torch.tensor([[2.0, 1.0]])
    # old = log_prob - 5: ratio e^5, which PPO would clip to zero gradient; GPG has no ratio at all.
    gpg = POLICY_LOSSES.get("gpg")
    loss, _ = gpg(log_prob.detach() - 5.0, log_prob, adv, torch.ones(1, 2), **TOKEN_MEAN, normalizer=8.0)
    # sum(-A * logp) / normalizer = (2 + 2) / 8; d/dlogp = -A / normalizer = [-2/8, -1/8].
    assert loss.item() == 0.5
    loss.backward()
    assert log_prob.grad.tolist() == [[-0.25, -0.125]]


def test_cispo_clips_the_weight_which_carries_no_gradient():
    log_prob = torch.tensor([[-1.0, -2.0, -0.5]], requires_grad=True)
    ratios = torch.tensor([[1.5, 0.5, 1.1]])
    adv = torch.tensor([[1.0, 1.0, -1.0]])
    loss, m = cispo(
        log_prob.detach() - ratios.log(),
        log_prob,
        adv,
        torch.ones(1, 3),
        loss_agg_mode="token-mean",
        config=policy_loss_config(),
    )
    # Weights clip(r, 0.8, 1.2) = [1.2, 0.8, 1.1]; per token -w * A * logp = [1.2, 1.6, -0.55], mean 2.25 / 3.
    assert loss.item() == pytest.approx(0.75, rel=1e-6)
    loss.backward()
    # Gradient -w * A / 3 on every token, the clipped ones included (PPO would give tokens 0 and 1 none). Were the
    # weight differentiable, token 2 would get -A r (1 + logp) / 3 = 1.1 * 0.5 / 3 instead of 1.1 / 3.
    assert torch.allclose(log_prob.grad, torch.tensor([[-0.4, -0.8 / 3, 1.1 / 3]]))
    assert m["pg_clipfrac"].item() == pytest.approx(2 / 3)
    assert m["ppo_kl"].item() == pytest.approx(-math.log(1.5 * 0.5 * 1.1) / 3, rel=1e-6)


def test_geo_mean_takes_the_geometric_mean_of_pessimistically_clipped_ratios():
    log_ratio = torch.tensor([[0.1, 0.5, -0.6], [0.5, -0.6, 7.0]])  # row 1's last token is padding
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    adv = torch.tensor([[1.0, 1.0, 1.0], [-1.0, -1.0, -1.0]])
    log_prob = torch.full((2, 3), -1.0, requires_grad=True)
    loss, m = geo_mean(log_prob.detach() - log_ratio, log_prob, adv, mask, **SEQ_MEAN, config=policy_loss_config())
    # Clip range [-0.2, 0.2], on the pessimistic side only:
    #   row 0, A > 0 keeps min(x, clip(x)): [0.1, 0.2, -0.6], mean -0.1 -> loss -A e^-0.1
    #   row 1, A < 0 keeps max(x, clip(x)): [0.5, -0.2],      mean 0.15 -> loss -A e^0.15
    # Mean over the responses: (-e^-0.1 + e^0.15) / 2 (a mean of the token ratios would give another number).
    r0, r1 = math.exp(-0.1), math.exp(0.15)
    assert loss.item() == pytest.approx((-r0 + r1) / 2, rel=1e-6)
    loss.backward()
    # d/dx_t = -A * ratio / (tokens in the row) / (2 rows) where the raw log-ratio was kept, 0 where it was clipped.
    assert torch.allclose(log_prob.grad, torch.tensor([[-r0 / 6, 0.0, -r0 / 6], [r1 / 4, 0.0, 0.0]]))
    # Tokens outside [-0.2, 0.2]: row 0's 0.5 and -0.6 (A > 0), row 1's 0.5 and -0.6 (A < 0), of 5 kept tokens.
    assert m["pg_clipfrac"].item() == pytest.approx(0.4) and m["pg_clipfrac_lower"].item() == pytest.approx(0.4)


# One response for the covariance modes: A is centred (mean 0) and log_prob = -4 + [1, 1, -3, 1] (mean -4), so the
# tokens' covariance terms (A - 0) * (log_prob + 4) are [2, 2, 6, -2].
_COV_ADV = torch.tensor([[2.0, 2.0, -2.0, -2.0]])
_COV_LOG_PROB = torch.tensor([[-3.0, -3.0, -7.0, -3.0]])


def test_clip_cov_zeroes_tokens_whose_covariance_is_in_range_and_that_ppo_kept():
    log_prob = _COV_LOG_PROB.clone().requires_grad_()
    ratios = torch.tensor([[1.0, 1.5, 1.0, 1.0]])
    cfg = policy_loss_config(clip_cov_ratio=0.5)  # up to 2 of the 4 tokens, those with a term in (1, 5)
    loss, m = clip_cov(log_prob.detach() - ratios.log(), log_prob, _COV_ADV, torch.ones(1, 4), **TOKEN_MEAN, config=cfg)
    # The only candidate is token 0 (term 2): token 1 (term 2) was already clipped by PPO (r = 1.5 > 1.2), token 2's
    # 6 is >= ub and token 3's -2 <= lb. PPO losses max(-A r, -A clip r) = [-2, -2.4, 2, 2]; with token 0 zeroed the
    # mean is (0 - 2.4 + 2 + 2) / 4 = 0.4 (plain PPO: -0.1).
    assert loss.item() == pytest.approx(0.4, rel=1e-6)
    loss.backward()
    # Gradient -A r / 4 on tokens 2 and 3 only: token 0 is zeroed, token 1 clipped by PPO.
    assert torch.allclose(log_prob.grad, torch.tensor([[0.0, 0.0, 0.5, 0.5]]))
    assert m["pg_clipfrac"].item() == 0.25


def test_clip_cov_zeroes_at_most_its_share_of_the_tokens():
    log_prob = _COV_LOG_PROB.clone().requires_grad_()
    cfg = policy_loss_config(clip_cov_ratio=0.25)  # one token of 4
    loss, m = clip_cov(log_prob.detach(), log_prob, _COV_ADV, torch.ones(1, 4), loss_agg_mode="token-mean", config=cfg)
    # On-policy (r = 1) tokens 0 and 1 are both candidates (term 2); one of them, drawn at random, is zeroed:
    # losses [-2, -2, 2, 2] with one -2 replaced by 0, mean 0.5; gradients -A / 4 = [-0.5, -0.5, 0.5, 0.5] likewise.
    assert loss.item() == 0.5
    (grad,) = torch.autograd.grad(loss, log_prob)
    assert sorted(grad[0, :2].tolist()) == [-0.5, 0.0] and grad[0, 2:].tolist() == [0.5, 0.5]
    assert m["pg_clipfrac"].item() == 0.25


def test_kl_cov_adds_the_kl_term_to_the_largest_covariance_token_only():
    log_prob = _COV_LOG_PROB.clone().requires_grad_()
    log_ratio = torch.tensor([[0.5, 0.5, 0.2, 0.0]])
    cfg = policy_loss_config(kl_cov_ratio=0.25, ppo_kl_coef=0.5)  # one token of 4: the largest term, token 2's 6
    loss, m = kl_cov(log_prob.detach() - log_ratio, log_prob, _COV_ADV, torch.ones(1, 4), **TOKEN_MEAN, config=cfg)
    # -A r on every token with no clip: [-2 e^0.5, -2 e^0.5, 2 e^0.2, 2]; token 2 also gets 0.5 * |0.2| = 0.1.
    assert loss.item() == pytest.approx((-4 * math.exp(0.5) + 2 * math.exp(0.2) + 0.1 + 2) / 4, rel=1e-6)
    loss.backward()
    # d/dx (-A e^x) = -A e^x, plus 0.5 * sign(0.2) on token 2; / 4 tokens. Tokens 0 and 1 (r = 1.65) keep their
    # gradient: PPO's clip would have removed it.
    expected = torch.tensor([[-2 * math.exp(0.5), -2 * math.exp(0.5), 2 * math.exp(0.2) + 0.5, 2.0]]) / 4
    assert torch.allclose(log_prob.grad, expected)
    assert m["pg_clipfrac"].item() == 0.25 and m["ppo_kl"].item() == pytest.approx(-0.3)


@pytest.mark.parametrize("loss_mode", POLICY_LOSSES.names())
@pytest.mark.parametrize("agg", LOSS_AGG_MODES)
@HYP
@given(
    adv=st.lists(st.floats(-3, 3).filter(lambda a: abs(a) > 1e-3), min_size=1, max_size=5),
    logp=st.floats(-5, -0.01),
)
def test_gradient_raises_log_prob_of_positive_advantage(loss_mode, agg, adv, logp):
    # On-policy (old == new), every loss must push log-prob up where A > 0 and down where A < 0.
    if loss_mode == "geo_mean":
        adv = [adv[0]] * len(adv)  # GMPO takes one advantage per response (its token mean)
    n = len(adv)
    log_prob = torch.full((1, n), logp, dtype=torch.float64, requires_grad=True)
    advantages = torch.tensor([adv], dtype=torch.float64)
    loss, _ = POLICY_LOSSES.get(loss_mode)(
        log_prob.detach(), log_prob, advantages, torch.ones(1, n), loss_agg_mode=agg, config=policy_loss_config()
    )
    (grad,) = torch.autograd.grad(loss, log_prob)
    # Gradient descent moves log_prob by -grad, so -grad must have the sign of A.
    assert torch.equal(torch.sign(-grad), torch.sign(advantages))


@pytest.mark.parametrize("loss_mode", POLICY_LOSSES.names())
def test_padding_with_garbage_does_not_change_loss_or_gradient(loss_mode):
    torch.manual_seed(1)
    old, new, adv = torch.randn(3, 4) * 0.1 - 1, torch.randn(3, 4) * 0.1 - 1, torch.randn(3, 4)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]])
    fn = POLICY_LOSSES.get(loss_mode)
    agg = resolve_loss_agg_mode(loss_mode, "token-mean")
    x = new.clone().requires_grad_()
    loss, metrics = fn(old, x, adv, mask, loss_agg_mode=agg, config=policy_loss_config())
    (g,) = torch.autograd.grad(loss, x)
    pad = lambda t, v: torch.cat([t, torch.full((3, 2), v)], dim=1)  # noqa: E731
    xp = pad(new, 30.0).requires_grad_()
    loss_p, metrics_p = fn(
        pad(old, -50.0), xp, pad(adv, 1e4), pad(mask, 0), loss_agg_mode=agg, config=policy_loss_config()
    )
    (gp,) = torch.autograd.grad(loss_p, xp)
    assert torch.allclose(loss_p, loss, atol=1e-6) and torch.allclose(gp[:, :4], g, atol=1e-7)
    assert not gp[:, 4:].any()
    for k in metrics:
        assert torch.allclose(metrics_p[k], metrics[k], atol=1e-6), k


# clip_cov and kl_cov select tokens within each call (each micro-batch, as verl does), so they are not invariant.
@pytest.mark.parametrize("loss_mode", sorted(set(POLICY_LOSSES.names()) - {"clip_cov", "kl_cov"}))
def test_micro_batches_with_global_normalizer_match_whole_batch(loss_mode):
    torch.manual_seed(2)
    old = torch.randn(6, 5, dtype=torch.float64) * 0.2 - 1
    new = (old + 0.1 * torch.randn(6, 5, dtype=torch.float64)).requires_grad_()
    adv = torch.randn(6, 5, dtype=torch.float64)
    mask = (torch.arange(5)[None] < torch.tensor([5, 1, 3, 0, 2, 4])[:, None]).double()
    fn = POLICY_LOSSES.get(loss_mode)
    agg = resolve_loss_agg_mode(loss_mode, "token-mean")
    cfg = policy_loss_config()
    (g_whole,) = torch.autograd.grad(fn(old, new, adv, mask, loss_agg_mode=agg, config=cfg)[0], new)
    n = loss_normalizer(mask, agg)
    parts = [
        fn(old[s], new[s], adv[s], mask[s], loss_agg_mode=agg, config=cfg, normalizer=n)[0]
        for s in (slice(0, 1), slice(1, 6))
    ]
    (g_split,) = torch.autograd.grad(sum(parts), new)
    assert torch.allclose(g_split, g_whole, rtol=1e-12, atol=1e-12)


def test_resolve_loss_agg_mode_follows_verl_for_gspo():
    assert resolve_loss_agg_mode("gspo", "token-mean") == "seq-mean-token-mean"
    assert resolve_loss_agg_mode("geo_mean", "token-mean") == "seq-mean-token-mean"
    assert resolve_loss_agg_mode("vanilla", "seq-mean-token-sum") == "seq-mean-token-sum"


def test_policy_loss_config_defaults_and_validation():
    cfg = policy_loss_config(clip_ratio=0.3, clip_ratio_high=0.4)
    assert (cfg.low, cfg.high, cfg.clip_ratio_c) == (0.3, 0.4, 3.0)
    with pytest.raises(ValueError, match="clip_ratio_c must be > 1"):
        policy_loss_config(clip_ratio_c=1.0)
    with pytest.raises(ValueError, match="actor.clip_ratio_low must be >= 0"):
        policy_loss_config(clip_ratio_low=-0.1)
    with pytest.raises(ValueError, match=r"actor\.policy_loss\.clip_cov_ratio must be in \(0, 1\]"):
        policy_loss_config(clip_cov_ratio=0.0)
    with pytest.raises(ValueError, match=r"actor\.policy_loss\.clip_cov_lb=5\.0 must be below clip_cov_ub=5\.0"):
        policy_loss_config(clip_cov_lb=5.0)
    actor = dataclasses.asdict(ActorConfig())  # a verl-style actor section with every key
    from_cfg = PolicyLossConfig.from_mapping({**actor, "clip_ratio": 0.1, "clip_ratio_low": None, "ppo_epochs": 2})
    assert from_cfg == policy_loss_config(clip_ratio=0.1)
    # verl keeps the covariance modes' settings under actor.policy_loss, not on actor itself.
    nested = {
        **actor,
        "kl_cov_ratio": 0.5,
        "policy_loss": {**actor["policy_loss"], "loss_mode": "kl_cov", "kl_cov_ratio": 0.01, "ppo_kl_coef": 1.0},
    }
    assert PolicyLossConfig.from_mapping(nested) == policy_loss_config(kl_cov_ratio=0.01, ppo_kl_coef=1.0)
    # an absent key has no default to fall back on here: it is named, never silently filled in
    del nested["policy_loss"]["ppo_kl_coef"]
    with pytest.raises(ValueError, match=r"actor\.policy_loss\.ppo_kl_coef is missing"):
        PolicyLossConfig.from_mapping(nested)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.clip_ratio = 0.5  # frozen
