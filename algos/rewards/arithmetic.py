"""Reward for the built-in arithmetic task (``python -m app.prepare arithmetic``, data_source ``arithmetic``).

The prompt asks for ``#### <answer>`` at the end. A correct marked answer earns ``score``. Two smaller rewards give a
small model a gradient before it has learned the format: ``unmarked_score`` when the marker is missing but the last
number written is right, and ``format_score`` when the marker is present but the number is wrong.
"""

from __future__ import annotations

from typing import Any

from algos.rewards.gsm8k import extract_answer
from algos.rewards.numbers import numbers_equal
from algos.rewards.registry import register_reward


@register_reward("arithmetic")
def compute_score(
    solution_str: str,
    ground_truth: Any,
    extra_info: dict | None = None,
    score: float = 1.0,
    unmarked_score: float = 0.5,
    format_score: float = 0.1,
) -> float:
    gold = str(ground_truth)
    marked = extract_answer(solution_str, "strict")
    if marked is not None:
        return float(score) if numbers_equal(marked, gold) else float(format_score)
    last = extract_answer(solution_str, "flexible")
    return float(unmarked_score) if numbers_equal(last, gold) else 0.0
