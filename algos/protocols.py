"""The call signatures that the functions of one registry share, written once as Protocols (the registries are
typed with them: ``Registry[PolicyLossFn]``). Imports no torch at run time, so naming them costs nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch

    from algos.policy_loss_config import PolicyLossConfig


class PolicyLossFn(Protocol):
    """A policy-gradient loss (``actor.policy_loss.loss_mode``; ``algos.policy_loss`` holds the built-in ones).

    All tensors are ``(batch, response_len)``; ``log_prob`` carries the gradient. Returns the scalar loss with its
    graph and metrics as detached 0-d tensors (``pg_clipfrac``, ``ppo_kl``, ``pg_clipfrac_lower``: token means over
    this call's kept tokens), so no device sync is forced. ``normalizer`` is passed to ``algos.aggregation.agg_loss``
    (see there for micro-batch invariance).
    """

    def __call__(
        self,
        old_log_prob: torch.Tensor,
        log_prob: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        *,
        loss_agg_mode: str,
        config: PolicyLossConfig,
        normalizer: float | None = None,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]: ...


class AdvantageFn(Protocol):
    """An advantage estimator (``algorithm.adv_estimator``; ``algos.advantages`` holds the built-in ones).

    Called with keywords only, each estimator taking those it declares (``algos.registry.call_with_supported_kwargs``)
    of ``token_level_rewards`` and ``response_mask`` (always given), ``values``, ``index`` (one prompt uid per row),
    ``reward_baselines``, ``gamma``, ``lam``, ``norm_adv_by_std_in_grpo``, ``old_log_probs`` and ``sum_pi_squared``
    (the old policy's, per token; the latter with ``actor.calculate_sum_pi_squared``), and ``batch_sum``
    (``algos.masked.BatchSum``: sums a tensor over the ranks that each hold part of the batch, for statistics of the
    whole batch); any other parameter needs a default.
    Returns ``(advantages, returns)``, both ``(batch, response_len)`` and exactly 0 outside ``response_mask``.
    """

    def __call__(self, **inputs: Any) -> tuple[torch.Tensor, torch.Tensor]: ...
