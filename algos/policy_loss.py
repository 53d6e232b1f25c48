"""Policy-gradient losses, selected by ``actor.policy_loss.loss_mode`` (verl names).

Every loss has the signature of ``algos.protocols.PolicyLossFn`` (tensors, loss and metrics described there).

``clip_cov`` and ``kl_cov`` pick tokens by a covariance over this call's kept tokens (one micro-batch, as in verl), so
unlike the other modes their loss depends on how the mini-batch is cut, and picking reads the token count (one sync).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping

import torch

from algos.aggregation import agg_loss
from algos.masked import masked_mean
from algos.protocols import PolicyLossFn
from algos.registry import Registry

POLICY_LOSSES: Registry[PolicyLossFn] = Registry("actor.policy_loss.loss_mode")


@dataclass(frozen=True)
class PolicyLossTraits:
    """What the trainer may assume of a loss, kept with its registration (``POLICY_LOSSES.register(name, traits)``).

    ``linear_in_advantage``: each token's loss is ``A_t`` times a factor that depends on ``A_t`` at most through its
    sign (and the metrics likewise), so scaling ``A_t`` by ``w_t > 0`` scales exactly that token's loss by ``w_t``.
    That is how per-token importance weights (``algos.rollout_correction``) are applied; losses that pick tokens by
    the size of ``A`` (clip_cov, kl_cov) or average ``A`` over a response (geo_mean) are not linear.
    """

    linear_in_advantage: bool = False


_LINEAR = PolicyLossTraits(linear_in_advantage=True)


def policy_loss_traits(name: str) -> PolicyLossTraits:
    """Traits of ``actor.policy_loss.loss_mode=name``; none registered (an imported function without a ``traits``
    attribute): nothing assumed."""
    return POLICY_LOSSES.traits(name, PolicyLossTraits())

# Log-ratios are clamped before exp() so one badly off-policy token cannot overflow the loss (as verl does).
_LOG_RATIO_CLAMP = 20.0
# GSPO clamps only from above: a large sequence ratio would overflow, a small one is harmless.
_GSPO_LOG_RATIO_MAX = 10.0

# verl always aggregates GSPO and GMPO (geo_mean) as a mean over responses, whatever actor.loss_agg_mode says.
_FORCED_AGG_MODE = {"gspo": "seq-mean-token-mean", "geo_mean": "seq-mean-token-mean"}

# PolicyLossConfig fields that verl keeps under actor.policy_loss; the clip settings sit on actor itself.
_POLICY_LOSS_SECTION = ("clip_cov_ratio", "clip_cov_lb", "clip_cov_ub", "kl_cov_ratio", "ppo_kl_coef")


@dataclass(frozen=True)
class PolicyLossConfig:
    """Clip settings (verl ``actor.clip_ratio*``). ``clip_ratio_low``/``clip_ratio_high`` default to ``clip_ratio``;
    ``clip_ratio_c`` is the dual-clip bound on the ratio for negative advantages and must be > 1.

    The entropy-mechanism modes' settings (verl ``actor.policy_loss.*``): ``clip_cov`` zeroes at most
    ``clip_cov_ratio`` of the tokens, drawn from those whose covariance lies in ``(clip_cov_lb, clip_cov_ub)``;
    ``kl_cov`` adds ``ppo_kl_coef * |log-ratio|`` to the ``kl_cov_ratio`` of the tokens with the largest covariance.

    Every field is a config key without a default: the defaults are the config schema's (app/config/schema.py,
    ``ActorConfig``), written once there; ``from_mapping`` takes them from the actor section.
    """

    clip_ratio: float
    clip_ratio_low: float | None
    clip_ratio_high: float | None
    clip_ratio_c: float
    clip_cov_ratio: float
    clip_cov_lb: float
    clip_cov_ub: float
    kl_cov_ratio: float
    ppo_kl_coef: float

    def __post_init__(self) -> None:
        for name in ("clip_ratio", "clip_ratio_low", "clip_ratio_high"):
            value = getattr(self, name)
            if value is not None and not value >= 0:
                raise ValueError(f"actor.{name} must be >= 0, got {value!r}")
        if not self.clip_ratio_c > 1.0:
            raise ValueError(f"actor.clip_ratio_c must be > 1 (dual-clip lower bound), got {self.clip_ratio_c!r}")
        for name in ("clip_cov_ratio", "kl_cov_ratio"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise ValueError(f"actor.policy_loss.{name} must be in (0, 1] (a share of the tokens), got {value!r}")
        if not self.clip_cov_lb < self.clip_cov_ub:
            raise ValueError(
                f"actor.policy_loss.clip_cov_lb={self.clip_cov_lb!r} must be below clip_cov_ub={self.clip_cov_ub!r} "
                "(else clip_cov selects no token)"
            )
        if not self.ppo_kl_coef >= 0:
            raise ValueError(f"actor.policy_loss.ppo_kl_coef must be >= 0, got {self.ppo_kl_coef!r}")

    @property
    def low(self) -> float:
        return self.clip_ratio if self.clip_ratio_low is None else self.clip_ratio_low

    @property
    def high(self) -> float:
        return self.clip_ratio if self.clip_ratio_high is None else self.clip_ratio_high

    @classmethod
    def from_mapping(cls, actor_config: Mapping[str, Any] | Any) -> "PolicyLossConfig":
        """Build from a verl-style ``actor`` section, a mapping or an object with those attribute names (e.g. the
        typed schema): clip settings from the section, the others from its ``policy_loss``. Other keys are ignored;
        an absent one is a ValueError naming it (its default is the schema's, not restated here)."""

        def read(source: Any, name: str, where: str) -> Any:
            present = name in source if isinstance(source, Mapping) else hasattr(source, name)
            if not present:
                raise ValueError(f"{where}{name} is missing: build the loss settings from the whole actor section")
            return source[name] if isinstance(source, Mapping) else getattr(source, name)

        section = read(actor_config, "policy_loss", "actor.")
        return cls(**{f.name: read(section, f.name, "actor.policy_loss.") if f.name in _POLICY_LOSS_SECTION
                      else read(actor_config, f.name, "actor.") for f in fields(cls)})


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


@POLICY_LOSSES.register("vanilla", _LINEAR)
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


@POLICY_LOSSES.register("gspo", _LINEAR)
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


@POLICY_LOSSES.register("gpg", _LINEAR)
@POLICY_LOSSES.register("reinforce", _LINEAR)
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


@POLICY_LOSSES.register("cispo", _LINEAR)
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


@POLICY_LOSSES.register("geo_mean")
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


@POLICY_LOSSES.register("clip_cov")
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


@POLICY_LOSSES.register("kl_cov")
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
