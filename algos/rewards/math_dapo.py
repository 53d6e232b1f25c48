"""DAPO's math reward (verl's ``math_dapo``, for the DAPO-Math-17k data and the AIME sets): the answer after the last
``Answer:`` in the response's last 300 characters, normalised as Minerva graded MATH answers (units and presentation
stripped), equal to the normalised ground truth as a string: 1.0, else -1.0 (no answer included).

The grading is verl's, rule for rule, so reward curves compare with verl runs on the same data; it is stricter than
the ``math`` rule here (``0.5`` and ``\\frac{1}{2}`` differ). ``strict_box_verify=True`` (a reward kwarg) grades the
last ``\\boxed{}`` of the last 100 characters instead, unnormalised, as verl's option does.
"""

from __future__ import annotations

import re
from typing import Any

from algos.rewards.math_answers import matching_brace
from algos.rewards.registry import register_reward

ANSWER_PATTERN = re.compile(r"(?i)Answer\s*:\s*([^\n]+)")
SEARCHED_CHARS = 300  # verl: the longest answer of MATH-500 has 159 characters
BOX_SEARCHED_CHARS = 100
NO_ANSWER = "[INVALID]"

# Minerva's normalisation (Lewkowycz et al. 2022, appendix D), in verl's order: textual replacements, then words and
# LaTeX that carry no value
_REPLACED = (
    ("an ", ""),
    ("a ", ""),
    (".$", "$"),
    ("\\$", ""),
    ("\\ ", ""),
    (" ", ""),
    ("mbox", "text"),
    (",\\text{and}", ","),
    ("\\text{and}", ","),
    ("\\text{m}", "\\text{}"),
)
_REMOVED = (
    "square", "ways", "integers", "dollars", "mph", "inches", "hours", "km", "units", "\\ldots", "sue", "points",
    "feet", "minutes", "digits", "cents", "degrees", "cm", "gm", "pounds", "meters", "meals", "edges", "students",
    "childrentickets", "multiples", "\\text{s}", "\\text{.}", "\\text{\ns}", "\\text{}^2", "\\text{}^3",
    "\\text{\n}", "\\text{}", "\\mathrm{th}", "^\\circ", "^{\\circ}", "\\;", ",\\!", "{,}", '"', "\\dots",
)  # fmt: skip


def normalize_final_answer(answer: str) -> str:
    """Minerva's normal form of a final answer: the part after the last ``=``, units and spacing removed, the first
    ``$...$`` span and ``\\text{}``/``\\textbf{}``/``\\overline{}``/``\\boxed{}`` unwrapped, ``\\fracab`` and
    ``\\sqrta`` braced, thousands separators dropped from integers."""
    answer = answer.split("=")[-1]
    for before, after in _REPLACED:
        answer = answer.replace(before, after)
    for word in _REMOVED:
        answer = answer.replace(word, "")
    answer = re.sub(r"(.*?)(\$)(.*?)(\$)(.*)", "$\\3$", answer)
    answer = re.sub(r"(\\text\{)(.*?)(\})", "\\2", answer)
    answer = re.sub(r"(\\textbf\{)(.*?)(\})", "\\2", answer)
    answer = re.sub(r"(\\overline\{)(.*?)(\})", "\\2", answer)
    answer = re.sub(r"(\\boxed\{)(.*)(\})", "\\2", answer)
    answer = re.sub(r"(frac)([^{])(.)", "frac{\\2}{\\3}", answer)
    answer = re.sub(r"(sqrt)([^{])", "sqrt{\\2}", answer)
    answer = answer.replace("$", "")
    if answer.replace(",", "").isdigit():
        answer = answer.replace(",", "")
    return answer.strip()


def _last_braced_box(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` in ``text`` (verl's: no ``\\fbox``, no ``\\boxed 5``); None if absent or
    unclosed."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    open_idx = start + len("\\boxed")
    end = matching_brace(text, open_idx)
    return text[open_idx + 1 : end] if end >= 0 else None


def _graded(solution: str, ground_truth: str, strict_box_verify: bool) -> tuple[bool, str]:
    """(right, the prediction as compared)."""
    if strict_box_verify:
        boxed = _last_braced_box(solution[-BOX_SEARCHED_CHARS:])
        predicted = NO_ANSWER if boxed is None else boxed
        return predicted == ground_truth, predicted
    found = ANSWER_PATTERN.findall(solution)
    predicted = normalize_final_answer(found[-1] if found else NO_ANSWER)
    return predicted == normalize_final_answer(ground_truth), predicted


@register_reward("math_dapo", "aime*")  # verl: data_source == "math_dapo" or data_source.startswith("aime")
def compute_score(
    solution_str: str,
    ground_truth: Any,
    extra_info: dict | None = None,
    strict_box_verify: bool = False,
    **_: Any,
) -> dict[str, Any]:
    """``{"score": 1.0 or -1.0, "acc": right, "pred": the normalised prediction}``, as verl's ``math_dapo``."""
    right, predicted = _graded(str(solution_str)[-SEARCHED_CHARS:], str(ground_truth), strict_box_verify)
    return {"score": 1.0 if right else -1.0, "acc": right, "pred": predicted}
