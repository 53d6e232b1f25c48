"""``default_compute_score``: the verl-signature entry point that dispatches on data_source through the registry."""

from __future__ import annotations

from typing import Any

from algos.rewards.registry import get_reward_fn


def default_compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict | None = None,
    **kwargs: Any,
) -> float | dict[str, Any]:
    """Score one decoded response with the rule registered for ``data_source``.

    Extra keyword arguments go to the rule (e.g. ``method="flexible"`` for gsm8k, ``format_score=0.1``).
    Raises UnknownDataSourceError (listing the known names) for an unregistered data_source.
    """
    return get_reward_fn(data_source)(solution_str, ground_truth, extra_info, **kwargs)
