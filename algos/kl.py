"""KL divergence estimates between the policy and the reference policy.

``kind`` takes verl's names (``actor.kl_loss_type`` for the KL loss, ``algorithm.kl_penalty`` for the in-reward
penalty). With per-token log-ratio ``x = log_prob - ref_log_prob`` of the sampled token (see
http://joschu.net/blog/kl-approx.html):

=================== ========================================= ==========================================
kind                estimate per token                         note
=================== ========================================= ==========================================
``kl`` / ``k1``     ``x``                                      unbiased for KL, high variance, can be < 0
``abs``             ``|x|``
``mse`` / ``k2``    ``x**2 / 2``                               its gradient is the unbiased KL gradient
``low_var_kl``/``k3`` ``exp(-x) + x - 1``, clamped to [-10, 10]  unbiased, >= 0, low variance
``full``            exact KL over the vocabulary               needs logits: use ``full_kl``
=================== ========================================= ==========================================

A ``+`` suffix (``k1+``, ``k3+``, ``low_var_kl+``) keeps the value of that estimate but takes the gradient of
``k2`` (straight-through), as verl allows.
"""

from __future__ import annotations

import torch

from algos.catalog import KL_KINDS
from algos.logprobs import DEFAULT_CHUNK_SIZE, full_kl_from_logits
from algos.masked import masked_fill_zero, masked_mean

_K3_LOG_RATIO_CLAMP = 20.0  # keeps exp() finite
_K3_VALUE_CLAMP = 10.0  # verl's bound on a single token's k3 value


def _estimate(log_prob: torch.Tensor, ref_log_prob: torch.Tensor, kind: str) -> torch.Tensor:
    x = log_prob - ref_log_prob
    if kind in ("kl", "k1"):
        return x
    if kind == "abs":
        return x.abs()
    if kind in ("mse", "k2"):
        return 0.5 * x.square()
    if kind in ("low_var_kl", "k3"):
        neg = torch.clamp(-x, -_K3_LOG_RATIO_CLAMP, _K3_LOG_RATIO_CLAMP)
        return torch.clamp(torch.exp(neg) - neg - 1.0, -_K3_VALUE_CLAMP, _K3_VALUE_CLAMP)
    if kind == "full":
        raise ValueError(
            "kl kind 'full' is the exact KL over the whole vocabulary and needs logits, not sampled-token "
            "log-probs: call algos.kl.full_kl(logits, ref_logits)"
        )
    raise ValueError(
        f"unknown KL kind {kind!r} (algorithm.kl_penalty / actor.kl_loss_type); known: {', '.join(KL_KINDS)}, "
        "optionally with a '+' suffix for a k2 straight-through gradient"
    )


def kl_penalty(log_prob: torch.Tensor, ref_log_prob: torch.Tensor, kind: str) -> torch.Tensor:
    """Per-token KL estimate, same shape as the inputs (``(batch, response_len)``). Not masked: apply your mask."""
    if log_prob.shape != ref_log_prob.shape:
        raise ValueError(f"log_prob shape {tuple(log_prob.shape)} != ref_log_prob shape {tuple(ref_log_prob.shape)}")
    straight_through = kind.endswith("+")
    base = kind[:-1] if straight_through else kind
    value = _estimate(log_prob, ref_log_prob, base)
    if not straight_through or base in ("mse", "k2"):
        return value
    surrogate = _estimate(log_prob, ref_log_prob, "k2")
    return surrogate - surrogate.detach() + value.detach()


def full_kl(logits: torch.Tensor, ref_logits: torch.Tensor, chunk_size: int = DEFAULT_CHUNK_SIZE) -> torch.Tensor:
    """Exact per-token ``KL(policy || reference)`` from full logits ``(..., vocab)`` -> float32 ``(...)``.

    Processed in chunks of ``chunk_size`` tokens, so no float32 copy of the whole vocabulary is held.
    """
    return full_kl_from_logits(logits, ref_logits, chunk_size)


def apply_kl_penalty_to_rewards(
    token_level_scores: torch.Tensor,
    old_log_prob: torch.Tensor,
    ref_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    kl_coef: float,
    kind: str = "kl",
) -> tuple[torch.Tensor, dict[str, float]]:
    """In-reward KL penalty (``algorithm.use_kl_in_reward``): ``rewards = scores - kl_coef * kl`` on kept tokens.

    All tensors ``(batch, response_len)``. Returns ``(token_level_rewards, metrics)`` where metrics hold
    ``reward_kl_penalty`` (per-response token-mean KL, averaged over responses: feed it to the KL controller's
    ``update``) and ``reward_kl_penalty_coeff`` (``kl_coef``). Tokens outside the mask keep their score.
    """
    with torch.no_grad():
        kld = masked_fill_zero(kl_penalty(old_log_prob, ref_log_prob, kind), response_mask)
        rewards = token_level_scores - kl_coef * kld.to(token_level_scores.dtype)
        per_response = masked_mean(kld, response_mask, dim=-1)
        current_kl = float(per_response.mean().item()) if per_response.numel() else 0.0
    return rewards, {"reward_kl_penalty": current_kl, "reward_kl_penalty_coeff": float(kl_coef)}
