"""Reward for the built-in arithmetic task (``python -m app.prepare arithmetic``, data_source ``arithmetic``).

The prompt asks for ``#### <answer>`` at the end. A correct marked answer earns ``score``. Two smaller rewards give a
small model a gradient before it has learned the format: ``unmarked_score`` when the marker is missing but the last
number written is right, and ``format_score`` when the marker is present but the number is wrong.

Besides ``score`` the result carries its two parts, so that a run shows *what* improved (validation logs them as
``val-aux/arithmetic/acc/mean`` and ``.../formatted/mean``): ``acc`` is 1 when the graded number (the marked one, else
the last one) is right, ``formatted`` is 1 when the response marks an answer as ``#### <number>``.
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
) -> dict[str, float]:
    gold = str(ground_truth)
    marked = extract_answer(solution_str, "strict")
    if marked is not None:
        right = numbers_equal(marked, gold)
        value = score if right else format_score
    else:
        right = numbers_equal(extract_answer(solution_str, "flexible"), gold)
        value = unmarked_score if right else 0.0
    return {"score": float(value), "acc": float(right), "formatted": float(marked is not None)}
