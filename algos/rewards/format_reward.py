"""Format reward: 1.0 when the response ends its answer in the expected shape, whatever the answer's value."""

from __future__ import annotations

import re
from typing import Any

from algos.rewards.math_answers import last_boxed
from algos.rewards.numbers import NUMBER_PATTERN

# "#### 42" on the last non-empty line, optionally followed by a period.
_FINAL_HASH_LINE_RE = re.compile(r"####\s*\$?\s*(?:" + NUMBER_PATTERN + r")\s*\.?\s*\Z")

STYLES = ("hash", "boxed")


def has_expected_format(solution_str: str, style: str = "hash", pattern: str | None = None) -> bool:
    """``hash``: the response ends with ``#### <number>``; ``boxed``: it contains a complete ``\\boxed{...}``;
    ``pattern``: a regular expression searched in the response (takes precedence over ``style``)."""
    if pattern is not None:
        return re.search(pattern, solution_str, flags=re.DOTALL) is not None
    if style == "hash":
        return _FINAL_HASH_LINE_RE.search(solution_str) is not None
    if style == "boxed":
        return last_boxed(solution_str) is not None
    raise ValueError(f"unknown format style {style!r}; choose one of {STYLES} or pass pattern=")


def compute_score(
    solution_str: str,
    ground_truth: Any = None,
    extra_info: dict | None = None,
    style: str = "hash",
    pattern: str | None = None,
    score: float = 1.0,
) -> float:
    """``score`` when the response has the expected format, else 0.0. ``ground_truth`` is ignored; the signature matches
    the registry so the function can be registered for any data_source."""
    return float(score) if has_expected_format(solution_str, style, pattern) else 0.0


def _format_hash(solution_str: str, ground_truth: Any = None, extra_info: dict | None = None, **kwargs: Any) -> float:
    return compute_score(solution_str, ground_truth, extra_info, style="hash", **kwargs)


def _format_boxed(solution_str: str, ground_truth: Any = None, extra_info: dict | None = None, **kwargs: Any) -> float:
    return compute_score(solution_str, ground_truth, extra_info, style="boxed", **kwargs)
