"""Importance weights that correct a policy-gradient loss for samples drawn by another policy.

The behaviour policy (the one vLLM sampled from: ``rollout_log_prob``) may differ from the proximal policy the PPO
ratio is clipped against (``old_log_prob``): the rollout engine computes in another precision, or, in asynchronous
training, it ran a policy one or more updates older. The decoupled PPO objective (AReaL; verl's
``algorithm.rollout_correction.rollout_is`` with ``bypass_mode=false``) multiplies each token's clipped loss by
``w = pi_old / pi_behaviour``, truncated from above at ``threshold`` (truncated importance sampling, TIS) so one
unlikely token cannot blow up the gradient:

    token level:     w_t = min(exp(old_t - behaviour_t), threshold)
    sequence level:  w_t = min(exp(sum_s (old_s - behaviour_s)), threshold) for every token t of the response

Weights are detached: they re-weight the samples, they are not optimised.
"""

from __future__ import annotations

import torch

from algos.masked import masked_mean

ROLLOUT_IS_LEVELS = ("token", "sequence")

# as for the PPO ratio: a log-weight clamped before exp() cannot overflow (verl clamps to the same bound)
_LOG_WEIGHT_CLAMP = 20.0


def rollout_is_weights(
    old_log_prob: torch.Tensor,
    rollout_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    level: str,
    threshold: float,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Truncated importance weights ``(batch, response_len)`` of the proximal over the behaviour policy.

    Args:
        old_log_prob: ``(b, R)`` log-probs under the proximal policy (the PPO ratio's denominator).
        rollout_log_prob: ``(b, R)`` log-probs the sampler reported for the same tokens.
        response_mask: ``(b, R)``, 1 on response tokens, 0 on padding.
        level: ``"token"`` (a weight per token) or ``"sequence"`` (one per response, the product of its tokens').
        threshold: the upper truncation, > 0.

    Returns:
        weights (0 at padding) and detached 0-d metrics over response tokens: ``rollout_is_mean``,
        ``rollout_is_sq_mean`` (so a caller can form a standard deviation over several calls) and
        ``rollout_is_ratio_fraction_high`` (the share truncated at ``threshold``).
    """
    if level not in ROLLOUT_IS_LEVELS:
        raise ValueError(f"rollout_is level must be one of {ROLLOUT_IS_LEVELS}, got {level!r}")
    if not threshold > 0:
        raise ValueError(f"rollout_is_threshold must be > 0, got {threshold}")
    mask = response_mask.to(old_log_prob.dtype)
    with torch.no_grad():
        log_w = (old_log_prob - rollout_log_prob) * mask
        if level == "sequence":
            log_w = log_w.sum(dim=-1, keepdim=True).expand_as(old_log_prob)
        raw = torch.exp(log_w.clamp(-_LOG_WEIGHT_CLAMP, _LOG_WEIGHT_CLAMP))
        weights = raw.clamp(max=threshold) * mask
        metrics = {
            "rollout_is_mean": masked_mean(weights, mask),
            "rollout_is_sq_mean": masked_mean(weights**2, mask),
            "rollout_is_ratio_fraction_high": masked_mean((raw > threshold).to(mask.dtype), mask),
        }
    return weights, metrics
