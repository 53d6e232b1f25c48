"""Policy-gradient losses, selected by ``actor.policy_loss.loss_mode`` (verl names).

Every loss has the signature of ``algos.protocols.PolicyLossFn`` (tensors, loss and metrics described there); the
names and traits are registered in ``algos.catalog``, the settings are ``algos.policy_loss_config.PolicyLossConfig``.

``clip_cov`` and ``kl_cov`` pick tokens by a covariance over this call's kept tokens (one micro-batch, as in verl), so
unlike the other modes their loss depends on how the mini-batch is cut, and picking reads the token count (one sync).
"""

from __future__ import annotations

import torch

from algos.aggregation import agg_loss
from algos.masked import masked_mean
from algos.policy_loss_config import PolicyLossConfig

# Log-ratios are clamped before exp() so one badly off-policy token cannot overflow the loss (as verl does).
_LOG_RATIO_CLAMP = 20.0
# GSPO clamps only from above: a large sequence ratio would overflow, a small one is harmless.
_GSPO_LOG_RATIO_MAX = 10.0

# verl always aggregates GSPO and GMPO (geo_mean) as a mean over responses, whatever actor.loss_agg_mode says.
_FORCED_AGG_MODE = {"gspo": "seq-mean-token-mean", "geo_mean": "seq-mean-token-mean"}


def resolve_loss_agg_mode(loss_mode: str, loss_agg_mode: str) -> str:
    """The aggregation a loss mode actually uses: verl fixes GSPO to ``seq-mean-token-mean``; others keep the
    configured mode. Use the result both for ``loss_normalizer`` and for the loss call."""
    return _FORCED_AGG_MODE.get(loss_mode, loss_agg_mode)


def _log_ratio(log_prob: torch.Tensor, old_log_prob: torch.Tensor) -> torch.Tensor:
    return torch.clamp(log_prob - old_log_prob, -_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)


def _ppo_surrogates(
    ratio: torch.Tensor, advantages: torch.Tensor, cfg: PolicyLossConfig
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's per-token losses without and with the ratio clipped: ``-A r`` and ``-A clip(r, 1 - low, 1 + high)``."""
    return -advantages * ratio, -advantages * torch.clamp(ratio, 1.0 - cfg.low, 1.0 + cfg.high)


def _metrics(clipfrac: torch.Tensor, ppo_kl: torch.Tensor, clipfrac_lower: torch.Tensor) -> dict[str, torch.Tensor]:
    return {
        "pg_clipfrac": clipfrac.detach(),
        "ppo_kl": ppo_kl.detach(),
        "pg_clipfrac_lower": clipfrac_lower.detach(),
    }


def vanilla(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    loss_agg_mode: str,
    config: PolicyLossConfig,
    normalizer: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO clipped surrogate with asymmetric clip range and dual clip.

    Per token, with ``r = exp(log_prob - old_log_prob)``:
    ``l = max(-A * r, -A * clip(r, 1 - low, 1 + high))``; for ``A < 0`` additionally ``l = min(l, -A * clip_ratio_c)``,
    which bounds how hard a very large ratio can push down a bad token.
    Metrics: ``pg_clipfrac`` (clipped term was larger), ``pg_clipfrac_lower`` (dual clip active), ``ppo_kl``
    (mean of ``old_log_prob - log_prob``).
    """
    log_ratio = _log_ratio(log_prob, old_log_prob)
    unclipped, clipped = _ppo_surrogates(torch.exp(log_ratio), advantages, config)
    clip_loss = torch.maximum(unclipped, clipped)
    dual_bound = -advantages * config.clip_ratio_c
    negative = advantages < 0
    losses = torch.where(negative, torch.minimum(clip_loss, dual_bound), clip_loss)
    loss = agg_loss(losses, response_mask, loss_agg_mode, normalizer)
    with torch.no_grad():
        clipfrac = masked_mean((clipped > unclipped).float(), response_mask)
        clipfrac_lower = masked_mean(((clip_loss > dual_bound) & negative).float(), response_mask)
        ppo_kl = masked_mean(-log_ratio, response_mask)
    return loss, _metrics(clipfrac, ppo_kl, clipfrac_lower)


def gspo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    loss_agg_mode: str,
    config: PolicyLossConfig,
    normalizer: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Group Sequence Policy Optimization (GSPO-token form).

    The importance ratio of a response is the geometric mean of its token ratios,
    ``s = exp(mean over kept tokens of (log_prob - old_log_prob))``. Each token uses
    ``s_t = sg(s) * exp(log_prob_t - sg(log_prob_t))``: numerically ``s``, but its gradient flows through the token's
    own log-prob, so per-token advantages still work. Then the PPO clip (no dual clip) with ``clip_ratio_low/high``
    (GSPO uses much smaller ranges than token-level PPO). verl aggregates GSPO as ``seq-mean-token-mean``; see
    ``resolve_loss_agg_mode``. ``pg_clipfrac_lower`` is always 0.
    """
    keep = response_mask.bool()
    log_ratio = torch.where(keep, log_prob - old_log_prob, torch.zeros_like(log_prob))
    seq_log_ratio = log_ratio.sum(dim=-1) / keep.sum(dim=-1).clamp(min=1).to(log_ratio.dtype)
    token_log_ratio = seq_log_ratio.detach().unsqueeze(-1) + log_prob - log_prob.detach()
    ratio = torch.exp(torch.clamp(token_log_ratio, max=_GSPO_LOG_RATIO_MAX))
    unclipped, clipped = _ppo_surrogates(ratio, advantages, config)
    losses = torch.maximum(unclipped, clipped)
    loss = agg_loss(losses, response_mask, loss_agg_mode, normalizer)
    with torch.no_grad():
        clipfrac = masked_mean((clipped > unclipped).float(), response_mask)
        ppo_kl = masked_mean(-log_ratio, response_mask)
    return loss, _metrics(clipfrac, ppo_kl, torch.zeros((), device=loss.device))


def reinforce(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    loss_agg_mode: str,
    config: PolicyLossConfig | None = None,
    normalizer: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Plain policy gradient ``-A * log_prob`` (no ratio, no clip; correct only on-policy). verl calls it ``gpg``
    (GPG, Group Policy Gradient; verl ``compute_policy_loss_gpg``).

    ``old_log_prob`` is used only for the ``ppo_kl`` metric; the clip fractions are 0.
    """
    losses = -advantages * log_prob
    loss = agg_loss(losses, response_mask, loss_agg_mode, normalizer)
    with torch.no_grad():
        ppo_kl = masked_mean(old_log_prob - log_prob, response_mask)
    zero = torch.zeros((), device=loss.device)
    return loss, _metrics(zero, ppo_kl, zero)


def cispo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    loss_agg_mode: str,
    config: PolicyLossConfig,
    normalizer: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """CISPO (MiniMax-M1): clip the importance weight, not the update (verl ``compute_policy_loss_cispo``).

    ``l = -sg(clip(r, 1 - low, 1 + high)) * A * log_prob``: the clipped ratio only scales the token's policy
    gradient, so a token outside the range still learns (PPO would drop it). The paper only bounds the weight from
    above: set ``clip_ratio_low`` >= 1 for that. ``pg_clipfrac``: weights that were clipped; ``pg_clipfrac_lower`` 0.
    """
    with torch.no_grad():
        log_ratio = _log_ratio(log_prob, old_log_prob)
        ratio = torch.exp(log_ratio)
        weight = torch.clamp(ratio, 1.0 - config.low, 1.0 + config.high)
    losses = -weight * advantages * log_prob
    loss = agg_loss(losses, response_mask, loss_agg_mode, normalizer)
    clipfrac = masked_mean((weight != ratio).float(), response_mask)
    return loss, _metrics(clipfrac, masked_mean(-log_ratio, response_mask), torch.zeros((), device=loss.device))


def geo_mean(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    loss_agg_mode: str,
    config: PolicyLossConfig,
    normalizer: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """GMPO, Geometric-Mean Policy Optimization (verl ``compute_policy_loss_geo_mean``).

    Each token's log-ratio is clipped to ``[-low, high]`` on the pessimistic side only (for ``A > 0`` the smaller of
    the raw and clipped value, for ``A < 0`` the larger; PPO's rule in log space). A response's ratio is the geometric
    mean ``exp(mean of those)``, its advantage the token mean of ``A`` (GMPO expects one advantage per response), and
    its loss ``-A * ratio``; outliers move a geometric mean less than PPO's arithmetic one. The loss is put on each
    of the response's tokens, so verl's mean over responses is ``seq-mean-token-mean`` (``resolve_loss_agg_mode``).
    ``pg_clipfrac`` / ``pg_clipfrac_lower``: tokens whose log-ratio lies outside ``[-low, high]`` with ``A > 0`` /
    ``A < 0``, as verl counts them.
    """
    log_ratio = _log_ratio(log_prob, old_log_prob)
    bounded = torch.clamp(log_ratio, -config.low, config.high)
    sign = torch.sign(advantages)
    pessimistic = sign * torch.minimum(sign * log_ratio, sign * bounded)
    ratio = torch.exp(masked_mean(pessimistic, response_mask, dim=-1))
    response_loss = -masked_mean(advantages, response_mask, dim=-1) * ratio
    loss = agg_loss(response_loss.unsqueeze(-1).expand_as(log_prob), response_mask, loss_agg_mode, normalizer)
    with torch.no_grad():
        outside = log_ratio != bounded
        clipfrac = masked_mean((outside & (advantages > 0)).float(), response_mask)
        clipfrac_lower = masked_mean((outside & (advantages < 0)).float(), response_mask)
        ppo_kl = masked_mean(-log_ratio, response_mask)
    return loss, _metrics(clipfrac, ppo_kl, clipfrac_lower)


def _covariance_terms(advantages: torch.Tensor, log_prob: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Each kept token's term ``(A - mean A) * (log_prob - mean log_prob)`` of their covariance over this call's kept
    tokens: large terms are what the entropy-mechanism paper finds drive entropy collapse. -inf at padding, so no
    selection can pick it."""
    log_prob = log_prob.detach()
    terms = (advantages - masked_mean(advantages, keep)) * (log_prob - masked_mean(log_prob, keep))
    return torch.where(keep, terms, torch.full((), -torch.inf, dtype=terms.dtype, device=terms.device))


def _token_budget(fraction: float, keep: torch.Tensor) -> int:
    """How many tokens a ``*_cov_ratio`` selects: that fraction of the kept tokens, at least one (verl)."""
    kept = int(keep.sum())
    return max(1, int(fraction * kept)) if kept else 0


def _flat_mask(index: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """A bool mask shaped like ``like`` that is True at the flat positions ``index``."""
    return torch.zeros(like.numel(), dtype=torch.bool, device=like.device).index_fill_(0, index, True).view_as(like)


def clip_cov(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    loss_agg_mode: str,
    config: PolicyLossConfig,
    normalizer: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clip-Cov ("The Entropy Mechanism of RL for Reasoning LMs"; verl ``compute_policy_loss_clip_cov``).

    The PPO clipped loss ``max(-A r, -A clip(r, 1 - low, 1 + high))`` (no dual clip), except that a random
    ``clip_cov_ratio`` of the tokens (at least one), drawn from those that PPO did not clip and whose covariance term
    (``_covariance_terms``) lies in ``(clip_cov_lb, clip_cov_ub)``, have their loss zeroed, hence no gradient: this
    slows the entropy collapse such tokens cause. The draw uses torch's global generator.
    ``pg_clipfrac``: the zeroed tokens (as in verl); ``pg_clipfrac_lower``: 0.
    """
    keep = response_mask.bool()
    log_ratio = _log_ratio(log_prob, old_log_prob)
    unclipped, clipped = _ppo_surrogates(torch.exp(log_ratio), advantages, config)
    cov = _covariance_terms(advantages, log_prob, keep)
    in_range = (cov > config.clip_cov_lb) & (cov < config.clip_cov_ub)
    candidates = (in_range & ~(clipped > unclipped)).flatten().nonzero()[:, 0]
    drawn = torch.randperm(candidates.numel(), device=candidates.device)[: _token_budget(config.clip_cov_ratio, keep)]
    zeroed = _flat_mask(candidates[drawn], keep)
    losses = torch.maximum(unclipped, clipped).masked_fill(zeroed, 0.0)
    loss = agg_loss(losses, response_mask, loss_agg_mode, normalizer)
    with torch.no_grad():
        clipfrac = masked_mean(zeroed.float(), response_mask)
        ppo_kl = masked_mean(-log_ratio, response_mask)
    return loss, _metrics(clipfrac, ppo_kl, torch.zeros((), device=loss.device))


def kl_cov(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    loss_agg_mode: str,
    config: PolicyLossConfig,
    normalizer: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """KL-Cov ("The Entropy Mechanism of RL for Reasoning LMs"; verl ``compute_policy_loss_kl_cov``).

    The unclipped surrogate ``-A r`` on every token (no PPO clip); the ``kl_cov_ratio`` of the tokens (at least one)
    with the largest covariance terms (``_covariance_terms``) also get ``ppo_kl_coef * |log_prob - old_log_prob|``,
    which holds them near the old policy instead of letting them collapse the entropy.
    ``pg_clipfrac``: the tokens that got the KL term (verl reports none); ``ppo_kl`` keeps this module's meaning
    (verl reports the mean ``|log-ratio|`` here); ``pg_clipfrac_lower``: 0.
    """
    keep = response_mask.bool()
    log_ratio = _log_ratio(log_prob, old_log_prob)
    losses = -advantages * torch.exp(log_ratio)
    cov = _covariance_terms(advantages, log_prob, keep)
    penalised = _flat_mask(cov.flatten().topk(_token_budget(config.kl_cov_ratio, keep)).indices, keep)
    losses = torch.where(penalised, losses + config.ppo_kl_coef * (log_prob - old_log_prob).abs(), losses)
    loss = agg_loss(losses, response_mask, loss_agg_mode, normalizer)
    with torch.no_grad():
        clipfrac = masked_mean(penalised.float(), response_mask)
        ppo_kl = masked_mean(-log_ratio, response_mask)
    return loss, _metrics(clipfrac, ppo_kl, torch.zeros((), device=loss.device))
