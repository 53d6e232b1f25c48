"""What a config can name, without the tensor code: each algorithm registry with its names and traits, and the KL
estimate kinds. Imports no torch, so checking a config (app.config.validate) stays cheap; a registered function's
module (algos.advantages, algos.policy_loss) is imported on its first lookup.

To add a built-in: write the function (an ``algos.protocols`` signature) in its module and add its row here.
"""

from __future__ import annotations

from dataclasses import dataclass

from algos.protocols import AdvantageFn, PolicyLossFn
from algos.registry import Registry

# ---------------------------------------------------------------- advantage estimators (algorithm.adv_estimator)

ADV_ESTIMATORS: Registry[AdvantageFn] = Registry("algorithm.adv_estimator")


@dataclass(frozen=True)
class EstimatorTraits:
    """What an estimator needs from the trainer; the trainer reads these, never the estimator's name."""

    needs_critic: bool = False  # values from a value model (`values` input): the critic role runs
    needs_groups: bool = False  # compares the samples of one prompt: rollout.n >= 2 makes sense, filter_groups applies
    needs_greedy_baseline: bool = False  # a greedy response's reward per prompt (`reward_baselines` input)
    # each token's sum over the vocabulary of pi^2 from the old-policy pass (`sum_pi_squared`, `old_log_probs`)
    needs_sum_pi_squared: bool = False


def estimator_traits(name: str) -> EstimatorTraits:
    """Traits of ``algorithm.adv_estimator=name`` (an own ``module:function`` may set ``fn.traits``; else none)."""
    return ADV_ESTIMATORS.traits(name, EstimatorTraits())


_GROUPED = EstimatorTraits(needs_groups=True)
for _name, _traits in (
    ("gae", EstimatorTraits(needs_critic=True)),
    ("grpo", _GROUPED),
    ("grpo_batch_std", _GROUPED),
    ("rloo", _GROUPED),
    ("opo", _GROUPED),
    ("reinforce_plus_plus", None),
    ("reinforce_plus_plus_baseline", _GROUPED),
    ("remax", EstimatorTraits(needs_greedy_baseline=True)),
    ("gpg", _GROUPED),
    ("optimal_token_baseline", EstimatorTraits(needs_groups=True, needs_sum_pi_squared=True)),
):
    ADV_ESTIMATORS.add(_name, f"algos.advantages:{_name}", traits=_traits)

# ---------------------------------------------------------------- policy losses (actor.policy_loss.loss_mode)

POLICY_LOSSES: Registry[PolicyLossFn] = Registry("actor.policy_loss.loss_mode")


@dataclass(frozen=True)
class PolicyLossTraits:
    """What the trainer may assume of a loss, kept with its registration (``POLICY_LOSSES.add(..., traits=...)``).

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


for _name, _function, _traits in (
    ("vanilla", "vanilla", _LINEAR),
    ("gspo", "gspo", _LINEAR),
    ("reinforce", "reinforce", _LINEAR),
    ("gpg", "reinforce", _LINEAR),  # verl's name for the plain policy gradient
    ("cispo", "cispo", _LINEAR),
    ("geo_mean", "geo_mean", None),
    ("clip_cov", "clip_cov", None),
    ("kl_cov", "kl_cov", None),
):
    POLICY_LOSSES.add(_name, f"algos.policy_loss:{_function}", traits=_traits)

# ---------------------------------------------------------- KL estimates (algorithm.kl_penalty, actor.kl_loss_type)

KL_KINDS: tuple[str, ...] = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "full")
# What ``kl_penalty`` accepts: every kind but ``full`` (which needs logits), each also with the ``+`` suffix.
LOG_PROB_KL_KINDS: tuple[str, ...] = tuple(k + suffix for suffix in ("", "+") for k in KL_KINDS if k != "full")
