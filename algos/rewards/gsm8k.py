"""GSM8K reward: the answer is the number after ``####`` (strict) or the last number in the text (flexible)."""

from __future__ import annotations

import re
from typing import Any

from algos.rewards.numbers import NUMBER_PATTERN, last_number, numbers_equal
from algos.rewards.registry import register_reward

# "#### 1,250", "####$18", "#### -3": the marker, optional spaces and dollar sign, then the number.
_STRICT_RE = re.compile(r"####\s*\$?\s*(" + NUMBER_PATTERN + ")")

METHODS = ("strict", "flexible")


def marked_answers(solution_str: str) -> list[str]:
    """Every number marked as ``#### N`` in the text, in order, as written."""
    return _STRICT_RE.findall(solution_str)


def extract_answer(solution_str: str, method: str = "strict") -> str | None:
    """The model's final answer as written (commas kept), or None when none is found.

    ``strict`` takes the number after the last ``####``; ``flexible`` takes the last number anywhere.
    """
    if method == "strict":
        found = marked_answers(solution_str)
        return found[-1] if found else None
    if method == "flexible":
        return last_number(solution_str)
    raise ValueError(f"unknown gsm8k extraction method {method!r}; choose one of {METHODS}")


@register_reward("openai/gsm8k", "gsm8k")
def compute_score(
    solution_str: str,
    ground_truth: Any,
    extra_info: dict | None = None,
    method: str = "strict",
    format_score: float = 0.0,
    score: float = 1.0,
) -> float:
    """``score`` when the extracted answer equals ``ground_truth`` numerically, ``format_score`` when an answer was
    extracted but is wrong, 0.0 when none was found."""
    answer = extract_answer(solution_str, method)
    if answer is None:
        return 0.0
    return float(score) if numbers_equal(answer, str(ground_truth)) else float(format_score)
