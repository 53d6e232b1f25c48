"""Pure tensor RL math: advantages, policy/value losses, KL, log-probs. Imports only torch/numpy/stdlib.

Names load on first use, so reward worker processes that import `algos.rewards` (pure Python) never pay for torch.
"""

import importlib
from typing import Any

_EXPORTS = {
    "ADV_ESTIMATORS": "algos.catalog",
    "compute_advantages": "algos.advantages",
    "LOSS_AGG_MODES": "algos.aggregation",
    "agg_loss": "algos.aggregation",
    "loss_normalizer": "algos.aggregation",
    "KL_KINDS": "algos.catalog",
    "LOG_PROB_KL_KINDS": "algos.catalog",
    "apply_kl_penalty_to_rewards": "algos.kl",
    "full_kl": "algos.kl",
    "kl_penalty": "algos.kl",
    "AdaptiveKLController": "algos.kl_controller",
    "FixedKLController": "algos.kl_controller",
    "make_kl_controller": "algos.kl_controller",
    "entropy_from_logits": "algos.logprobs",
    "full_kl_from_logits": "algos.logprobs",
    "log_probs_from_logits": "algos.logprobs",
    "masked_mean": "algos.masked",
    "masked_sum": "algos.masked",
    "masked_var": "algos.masked",
    "masked_whiten": "algos.masked",
    "POLICY_LOSSES": "algos.catalog",
    "PolicyLossConfig": "algos.policy_loss_config",
    "resolve_loss_agg_mode": "algos.policy_loss",
    "AdvantageFn": "algos.protocols",
    "PolicyLossFn": "algos.protocols",
    "Registry": "algos.registry",
    "load_callable": "algos.registry",
    "call_with_supported_kwargs": "algos.registry",
    "compute_value_loss": "algos.value_loss",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'algos' has no attribute {name!r}")
