"""Partial credit for a GSM8K solution's intermediate results: a dense training reward for models that rarely finish.

GSM8K's reference solutions annotate every computation, ``"48/2 = <<48/2=24>>24 clips"``. A response earns credit for
each of those results that it writes as the result of a computation of its own (after an ``=``). The strict rule pays
only a right final answer, which a 135M model writes about once in a hundred samples, so nearly every group of samples
scores alike and GRPO has nothing to compare; the intermediate results tell a half-right solution from a wrong one.

Only training uses this: the benchmark's evaluation stays verl's strict rule (and the flexible last-number rule).
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from algos.rewards.gsm8k import extract_answer
from algos.rewards.numbers import NUMBER_PATTERN, numbers_equal, parse_number

_CALCULATION_RE = re.compile(r"<<[^<>=]*=([^<>]*)>>")
_NUMBER_RE = re.compile(NUMBER_PATTERN)
# "= 24", "= $1,250.50", "=24": a result the response computed itself
_RESULT_RE = re.compile(r"=\s*\$?\s*(" + NUMBER_PATTERN + ")")
# the last line of a well-formed answer: "#### 72", "#### $1,250.", nothing else
_FINAL_LINE_RE = re.compile(r"####\s*\$?\s*(?:" + NUMBER_PATTERN + r")\s*\.?")


def reference_results(solution: str, question: str = "") -> list[Decimal]:
    """The distinct results of the ``<<expression=result>>`` annotations of a GSM8K reference ``solution``, in order.

    Results that are numbers given in ``question`` are left out: copying the question must earn nothing.
    """
    given = {parse_number(n) for n in _NUMBER_RE.findall(question)}
    results: list[Decimal] = []
    for text in _CALCULATION_RE.findall(solution):
        value = parse_number(text)
        if value is not None and value not in given and value not in results:
            results.append(value)
    return results


def written_results(response: str, limit: int) -> set[Decimal]:
    """The first ``limit`` distinct numbers that ``response`` writes right after an ``=``.

    The limit bounds what listing many guesses can earn: only the first results count.
    """
    seen: list[Decimal] = []
    for text in _RESULT_RE.findall(response):
        value = parse_number(text)
        if value is not None and value not in seen:
            seen.append(value)
            if len(seen) == limit:
                break
    return set(seen)


def step_credit(response: str, reference: list[Decimal]) -> float:
    """The share of ``reference`` results that ``response`` computes; 0.0 when there are none to find.

    The response's first ``2 * len(reference) + 2`` distinct results are read: room for its own detours, not for
    enumerating guesses.
    """
    if not reference:
        return 0.0
    found = written_results(response, limit=2 * len(reference) + 2)
    return sum(value in found for value in reference) / len(reference)


def well_formed(response: str) -> bool:
    """The answer the instruction asks for: some work with at least one computed result (``= N``), then a last line
    that is only ``#### N``. A bare ``#### <guess>`` is not."""
    lines = [line.strip() for line in response.strip().splitlines() if line.strip()]
    if len(lines) < 2 or not _FINAL_LINE_RE.fullmatch(lines[-1]):
        return False
    return any(_RESULT_RE.search(line) for line in lines[:-1])


def compute_score(
    solution_str: str,
    ground_truth: Any,
    extra_info: dict | None = None,
    format_score: float = 0.1,
    step_score: float = 0.5,
) -> dict[str, float]:
    """1.0 for a right ``#### N`` answer; otherwise ``format_score`` for a well-formed answer (``well_formed``) plus
    ``step_score`` times the share of the reference's intermediate results the response computes.

    The format credit asks for work before the marker: paid for any ``####``, SmolLM2-135M learned to open with
    ``#### <guess>`` and stopped computing; paid for nothing, it learned to answer in a few words that score 0.

    ``extra_info`` must hold the reference ``answer`` (the full GSM8K solution) and may hold the ``question``; rows
    from ``python -m app.prepare gsm8k`` have both. Returns the score and its parts, logged as reward metrics:
    ``acc`` (the strict rule), ``formatted`` (well formed) and ``steps`` (the share of intermediate results found).
    """
    info = extra_info or {}
    if "answer" not in info:
        raise KeyError("gsm8k step credit needs extra_info['answer'], the reference solution with <<a=b>> annotations")
    answer = extract_answer(solution_str, "strict")
    acc = float(answer is not None and numbers_equal(answer, str(ground_truth)))
    formatted = float(well_formed(solution_str))
    steps = step_credit(solution_str, reference_results(str(info["answer"]), str(info.get("question", ""))))
    score = 1.0 if acc else format_score * formatted + step_score * steps
    return {"score": score, "acc": acc, "formatted": formatted, "steps": steps}
