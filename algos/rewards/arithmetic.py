"""Reward for the built-in arithmetic task (``python -m app.prepare arithmetic``, data_source ``arithmetic``).

The prompt asks for ``#### <answer>`` at the end. A right number in that format earns ``score``. Either part alone
earns a smaller credit, so that a small model has a gradient before it has learned both: ``unmarked_score`` when the
marker is missing but the last number written is right, ``format_score`` when the marker is present but the marked
number is wrong.

The credits trade two failures (docs/experiments.md, ``bench/format_trace.py``). The untrained SmolLM2-135M's marked
answers are right less often than its unmarked ones (it writes ``#### 3 = 8`` for 3 + 5), so with a right unmarked
answer worth much more than a marked wrong one the format's advantage flips sign from step to step and a seed can
lose the marker; with the two credits equal, ``#### <guess>`` earns as much as a right unmarked answer and a seed can
learn to guess.

Besides ``score`` the result carries its parts, so that a run shows *what* improved (validation logs them as
``val-aux/arithmetic/<part>/mean``): ``acc`` is 1 when the graded number (the marked one, else the last one) is
right, ``formatted`` when the response marks an answer as ``#### <number>``, ``strict`` when both hold (the number
after the last ``####`` is right: GSM8K's strict accuracy).
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
    formatted = marked is not None
    return {
        "score": float(value),
        "acc": float(right),
        "formatted": float(formatted),
        "strict": float(right and formatted),
    }
