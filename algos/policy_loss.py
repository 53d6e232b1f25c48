"""Policy-gradient losses, selected by ``actor.policy_loss.loss_mode`` (verl names).

Common signature::

    fn(old_log_prob, log_prob, advantages, response_mask, *, loss_agg_mode, config, normalizer=None)
        -> (loss: scalar tensor with grad, metrics: dict of detached 0-d tensors)

All tensors are ``(batch, response_len)``; ``log_prob`` carries the gradient. Metrics (``pg_clipfrac``, ``ppo_kl``,
``pg_clipfrac_lower``) are token means over this call's kept tokens; they stay tensors so no device sync is forced.
``normalizer`` is passed to ``algos.aggregation.agg_loss`` (see there for micro-batch invariance).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping

import torch

from algos.aggregation import agg_loss
from algos.masked import masked_mean
from algos.registry import Registry

POLICY_LOSSES = Registry("actor.policy_loss.loss_mode")

# Log-ratios are clamped before exp() so one badly off-policy token cannot overflow the loss (as verl does).
_LOG_RATIO_CLAMP = 20.0
# GSPO clamps only from above: a large sequence ratio would overflow, a small one is harmless.
_GSPO_LOG_RATIO_MAX = 10.0

# verl always aggregates GSPO as seq-mean-token-mean, whatever actor.loss_agg_mode says.
_FORCED_AGG_MODE = {"gspo": "seq-mean-token-mean"}


@dataclass(frozen=True)
class PolicyLossConfig:
    """Clip settings (verl ``actor.clip_ratio*``). ``clip_ratio_low``/``clip_ratio_high`` default to ``clip_ratio``;
    ``clip_ratio_c`` is the dual-clip bound on the ratio for negative advantages and must be > 1."""

    clip_ratio: float = 0.2
    clip_ratio_low: float | None = None
    clip_ratio_high: float | None = None
    clip_ratio_c: float = 3.0

    def __post_init__(self) -> None:
        for name in ("clip_ratio", "clip_ratio_low", "clip_ratio_high"):
            value = getattr(self, name)
            if value is not None and not value >= 0:
                raise ValueError(f"actor.{name} must be >= 0, got {value!r}")
        if not self.clip_ratio_c > 1.0:
            raise ValueError(f"actor.clip_ratio_c must be > 1 (dual-clip lower bound), got {self.clip_ratio_c!r}")

    @property
    def low(self) -> float:
        return self.clip_ratio if self.clip_ratio_low is None else self.clip_ratio_low

    @property
    def high(self) -> float:
        return self.clip_ratio if self.clip_ratio_high is None else self.clip_ratio_high

    @classmethod
    def from_mapping(cls, actor_config: Mapping[str, Any]) -> "PolicyLossConfig":
        """Build from a verl-style ``actor`` mapping, ignoring keys that are not clip settings."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: actor_config[k] for k in names if k in actor_config and actor_config[k] is not None})


def resolve_loss_agg_mode(loss_mode: str, loss_agg_mode: str) -> str:
    """The aggregation a loss mode actually uses: verl fixes GSPO to ``seq-mean-token-mean``; others keep the
    configured mode. Use the result both for ``loss_normalizer`` and for the loss call."""
    return _FORCED_AGG_MODE.get(loss_mode, loss_agg_mode)


def _metrics(clipfrac: torch.Tensor, ppo_kl: torch.Tensor, clipfrac_lower: torch.Tensor) -> dict[str, torch.Tensor]:
    return {
        "pg_clipfrac": clipfrac.detach(),
        "ppo_kl": ppo_kl.detach(),
        "pg_clipfrac_lower": clipfrac_lower.detach(),
    }


@POLICY_LOSSES.register("vanilla")
def vanilla(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    loss_agg_mode: str = "token-mean",
    config: PolicyLossConfig | None = None,
    normalizer: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO clipped surrogate with asymmetric clip range and dual clip.

    Per token, with ``r = exp(log_prob - old_log_prob)``:
    ``l = max(-A * r, -A * clip(r, 1 - low, 1 + high))``; for ``A < 0`` additionally ``l = min(l, -A * clip_ratio_c)``,
    which bounds how hard a very large ratio can push down a bad token.
    Metrics: ``pg_clipfrac`` (clipped term was larger), ``pg_clipfrac_lower`` (dual clip active), ``ppo_kl``
    (mean of ``old_log_prob - log_prob``).
    """
    cfg = config or PolicyLossConfig()
    log_ratio = torch.clamp(log_prob - old_log_prob, -_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - cfg.low, 1.0 + cfg.high)
    clip_loss = torch.maximum(unclipped, clipped)
    dual_bound = -advantages * cfg.clip_ratio_c
    negative = advantages < 0
    losses = torch.where(negative, torch.minimum(clip_loss, dual_bound), clip_loss)
    loss = agg_loss(losses, response_mask, loss_agg_mode, normalizer)
    with torch.no_grad():
        clipfrac = masked_mean((clipped > unclipped).float(), response_mask)
        clipfrac_lower = masked_mean(((clip_loss > dual_bound) & negative).float(), response_mask)
        ppo_kl = masked_mean(-log_ratio, response_mask)
    return loss, _metrics(clipfrac, ppo_kl, clipfrac_lower)


@POLICY_LOSSES.register("gspo")
def gspo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    loss_agg_mode: str = "seq-mean-token-mean",
    config: PolicyLossConfig | None = None,
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
    cfg = config or PolicyLossConfig()
    keep = response_mask.bool()
    log_ratio = torch.where(keep, log_prob - old_log_prob, torch.zeros_like(log_prob))
    seq_log_ratio = log_ratio.sum(dim=-1) / keep.sum(dim=-1).clamp(min=1).to(log_ratio.dtype)
    token_log_ratio = seq_log_ratio.detach().unsqueeze(-1) + log_prob - log_prob.detach()
    ratio = torch.exp(torch.clamp(token_log_ratio, max=_GSPO_LOG_RATIO_MAX))
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - cfg.low, 1.0 + cfg.high)
    losses = torch.maximum(unclipped, clipped)
    loss = agg_loss(losses, response_mask, loss_agg_mode, normalizer)
    with torch.no_grad():
        clipfrac = masked_mean((clipped > unclipped).float(), response_mask)
        ppo_kl = masked_mean(-log_ratio, response_mask)
    return loss, _metrics(clipfrac, ppo_kl, torch.zeros((), device=loss.device))


@POLICY_LOSSES.register("reinforce")
def reinforce(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    loss_agg_mode: str = "token-mean",
    config: PolicyLossConfig | None = None,
    normalizer: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Plain policy gradient ``-A * log_prob`` (no ratio, no clip; correct only on-policy).

    ``old_log_prob`` is used only for the ``ppo_kl`` metric; the clip fractions are 0.
    """
    losses = -advantages * log_prob
    loss = agg_loss(losses, response_mask, loss_agg_mode, normalizer)
    with torch.no_grad():
        ppo_kl = masked_mean(old_log_prob - log_prob, response_mask)
    zero = torch.zeros((), device=loss.device)
    return loss, _metrics(zero, ppo_kl, zero)
