"""MATH-style reward: the answer inside the last ``\\boxed{...}``, compared after LaTeX normalisation.

Normalisation removes presentation-only differences (spaces, ``\\left``/``\\right``, dollars, ``\\text{}`` wrappers
and trailing units, degree and percent signs, ``\\dfrac``, ``a/b`` vs ``\\frac{a}{b}``, ``2.50`` vs ``2.5``) and
equality also holds between numbers with the same rational value (``0.5`` == ``\\frac{1}{2}``).
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Any

from algos.rewards.registry import register_reward

_BOX_COMMANDS = ("\\boxed", "\\fbox")
_TEXT_COMMANDS = ("\\text", "\\textbf", "\\textrm", "\\mathrm", "\\mathbf", "\\mbox")


def matching_brace(s: str, open_idx: int) -> int:
    """Index of the ``}`` closing the ``{`` at ``open_idx``, or -1 when unbalanced."""
    depth = 0
    for i in range(open_idx, len(s)):
        if s[i] == "{":
            depth += 1
        elif s[i] == "}":
            depth -= 1
            if depth == 0:
                return i
    return -1


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``, or ``\\boxed 5``) in ``text``; None if absent."""
    start, command = max((text.rfind(c), c) for c in _BOX_COMMANDS)
    if start < 0:
        return None
    i = start + len(command)
    if i < len(text) and text[i] == "{":
        end = matching_brace(text, i)
        return text[i + 1 : end] if end >= 0 else None
    if i < len(text) and text[i] == " ":  # "\boxed 5$": the answer runs to the next dollar or whitespace
        m = re.match(r"\s*([^\s$]+)", text[i:])
        return m.group(1) if m else None
    return None


def _unwrap(s: str, commands: tuple[str, ...]) -> str:
    """Replace ``\\cmd{X}`` by ``X`` for each command (nested braces respected)."""
    for cmd in commands:
        pattern = re.compile(re.escape(cmd) + r"\s*\{")
        while (m := pattern.search(s)) is not None:
            open_idx = m.end() - 1
            end = matching_brace(s, open_idx)
            if end < 0:
                break
            s = s[: m.start()] + s[open_idx + 1 : end] + s[end + 1 :]
    return s


def _drop_trailing_unit(s: str) -> str:
    """``10\\text{ cm}`` -> ``10``: a text wrapper closing the answer, after a value, is a unit; a whole-answer
    ``\\text{Monday}`` is kept (it is the answer)."""
    s = s.rstrip()
    last = None
    for cmd in _TEXT_COMMANDS:
        for m in re.finditer(re.escape(cmd) + r"\s*\{", s):
            if last is None or m.start() > last.start():
                last = m
    if last is None:
        return s
    closes_answer = matching_brace(s, last.end() - 1) == len(s) - 1
    return s[: last.start()] if closes_answer and s[: last.start()].strip() else s


def _as_fraction(s: str) -> Fraction | None:
    """Exact value of an integer, decimal or integer ``\\frac{a}{b}`` (optionally negated); None otherwise."""
    m = re.fullmatch(r"(-?)\\frac\{(-?\d+)\}\{(-?\d+)\}", s)
    if m:
        num, den = int(m.group(2)), int(m.group(3))
        if den == 0:
            return None
        value = Fraction(num, den)
        return -value if m.group(1) else value
    if re.fullmatch(r"-?(?:\d+\.?\d*|\.\d+)", s):
        try:
            return Fraction(Decimal(s))
        except (InvalidOperation, ValueError):
            return None
    return None


def normalize_math_answer(answer: str) -> str:
    """Canonical text of a LaTeX answer, for string comparison."""
    s = str(answer).strip()
    s = s.replace("\n", "").replace("\\displaystyle", "")
    s = _drop_trailing_unit(s)
    s = _unwrap(s, _TEXT_COMMANDS)
    s = re.sub(r"\\left(?![a-zA-Z])", "", s)
    s = re.sub(r"\\right(?![a-zA-Z])", "", s)
    for thin_space in ("\\!", "\\,", "\\;", "\\:", "\\ ", "~"):
        s = s.replace(thin_space, "")
    s = s.replace("\\$", "").replace("$", "").replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = re.sub(r"\^\s*\{?\\circ\}?", "", s).replace("\\degree", "")
    s = s.replace("\\%", "").replace("%", "")
    s = re.sub(r"\s+", "", s).rstrip(".")
    # Short forms: \frac12 -> \frac{1}{2}, \frac1{2}, \frac{1}2, \sqrt2 -> \sqrt{2}.
    s = re.sub(r"\\frac(\d)(\d)", r"\\frac{\1}{\2}", s)
    s = re.sub(r"\\frac(\d)\{", r"\\frac{\1}{", s)
    s = re.sub(r"\\frac\{([^{}]*)\}(\d)", r"\\frac{\1}{\2}", s)
    s = re.sub(r"\\sqrt(\w)", r"\\sqrt{\1}", s)
    # A single assignment "x=5" answers with its right-hand side.
    m = re.fullmatch(r"[a-zA-Z](?:_\{?\w+\}?)?=([^=]+)", s)
    if m:
        s = m.group(1)
    if re.fullmatch(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?", s):
        s = s.replace(",", "")
    m = re.fullmatch(r"(-?\d+)/(\d+)", s)
    if m:
        s = f"\\frac{{{m.group(1)}}}{{{m.group(2)}}}"
    if re.fullmatch(r"-?(?:\d+\.\d*|\.\d+)", s):
        value = Decimal(s).normalize()
        s = format(value, "f")
    m = re.fullmatch(r"\\frac\{-(\d+)\}\{(\d+)\}", s)
    if m:  # \frac{-1}{2} -> -\frac{1}{2}
        s = f"-\\frac{{{m.group(1)}}}{{{m.group(2)}}}"
    return s


def math_answers_equal(predicted: str | None, gold: str) -> bool:
    """True when two LaTeX answers are the same after normalisation or have the same rational value."""
    if predicted is None:
        return False
    a, b = normalize_math_answer(predicted), normalize_math_answer(gold)
    if a == b:
        return True
    fa, fb = _as_fraction(a), _as_fraction(b)
    return fa is not None and fb is not None and fa == fb


# verl grades the NuminaMath sources with prime_math (the boxed answer, equal after normalisation or by sympy); here
# they take this rule, which compares the boxed answer after normalisation and by rational value, without sympy
NUMINA_SOURCES = (
    "numina_aops_forum",
    "numina_synthetic_math",
    "numina_amc_aime",
    "numina_synthetic_amc",
    "numina_cn_k12",
    "numina_olympiads",
)


@register_reward(
    "math", "lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval", "HuggingFaceH4/MATH-500", *NUMINA_SOURCES
)
def compute_score(
    solution_str: str,
    ground_truth: Any,
    extra_info: dict | None = None,
    format_score: float = 0.0,
    score: float = 1.0,
) -> float:
    """``score`` when the last boxed answer equals the ground truth, ``format_score`` when a boxed answer is present but
    wrong, 0.0 when there is none. A ground truth that is itself a full solution is reduced to its boxed answer."""
    predicted = last_boxed(solution_str)
    if predicted is None:
        return 0.0
    gold = str(ground_truth)
    if any(c in gold for c in _BOX_COMMANDS):
        gold = last_boxed(gold) or gold
    return float(score) if math_answers_equal(predicted, gold) else float(format_score)
