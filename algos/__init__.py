"""Pure tensor RL math: advantages, policy/value losses, KL, log-probs. Imports only torch/numpy/stdlib."""

from algos.advantages import ADV_ESTIMATORS, compute_advantages
from algos.aggregation import LOSS_AGG_MODES, agg_loss, loss_normalizer
from algos.kl import KL_KINDS, LOG_PROB_KL_KINDS, apply_kl_penalty_to_rewards, full_kl, kl_penalty
from algos.kl_controller import AdaptiveKLController, FixedKLController, make_kl_controller
from algos.logprobs import entropy_from_logits, full_kl_from_logits, log_probs_from_logits
from algos.masked import masked_mean, masked_sum, masked_var, masked_whiten
from algos.policy_loss import POLICY_LOSSES, PolicyLossConfig, resolve_loss_agg_mode
from algos.registry import Registry, call_with_supported_kwargs
from algos.value_loss import compute_value_loss

__all__ = [
    "ADV_ESTIMATORS",
    "LOSS_AGG_MODES",
    "KL_KINDS",
    "LOG_PROB_KL_KINDS",
    "POLICY_LOSSES",
    "AdaptiveKLController",
    "FixedKLController",
    "PolicyLossConfig",
    "Registry",
    "agg_loss",
    "apply_kl_penalty_to_rewards",
    "call_with_supported_kwargs",
    "compute_advantages",
    "compute_value_loss",
    "entropy_from_logits",
    "full_kl",
    "full_kl_from_logits",
    "kl_penalty",
    "log_probs_from_logits",
    "loss_normalizer",
    "make_kl_controller",
    "masked_mean",
    "masked_sum",
    "masked_var",
    "masked_whiten",
    "resolve_loss_agg_mode",
]
