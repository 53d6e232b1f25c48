"""Reward for the built-in tool-use task (data_source ``calculator_arithmetic``): 1 for a right answer marked
``#### <answer>``, 0 otherwise. No partial credit for the format or for calling a tool, so what the policy learns to
use the calculator for is getting the answer right."""

from __future__ import annotations

from typing import Any

from algos.rewards.gsm8k import extract_answer
from algos.rewards.numbers import numbers_equal
from algos.rewards.registry import register_reward


@register_reward("calculator_arithmetic")
def compute_score(solution_str: str, ground_truth: Any, extra_info: dict | None = None) -> dict[str, float]:
    marked = extract_answer(solution_str, "strict")
    right = marked is not None and numbers_equal(marked, str(ground_truth))
    return {"score": float(right), "acc": float(right), "formatted": float(marked is not None)}
