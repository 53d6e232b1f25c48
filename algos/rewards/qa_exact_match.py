"""Search-R1's question-answering reward (verl's ``search_r1_like_qa_em``, data_source ``searchR1_nq``, ...): the text
of the last ``<answer>...</answer>`` equals one of the gold answers after SQuAD's normalisation (lower case, no
punctuation, no articles, single spaces): ``score`` (1.0), a quarter of it when the response writes more than ten
opening or closing answer tags, ``format_score`` (0.0) for a wrong answer, 0 without one.

The ground truth is verl's ``{"target": [answers]}`` (a list, array or one string); a bare list or string is taken as
the targets too.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping
from typing import Any, Iterable

from algos.rewards.registry import register_reward

ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
MAX_ANSWER_TAGS = 10  # verl: more opening or closing tags than this quarter the score (answer spamming)
_PUNCTUATION = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")

SEARCH_R1_SOURCES = (
    "searchR1_nq",
    "searchR1_triviaqa",
    "searchR1_popqa",
    "searchR1_hotpotqa",
    "searchR1_2wikimultihopqa",
    "searchR1_musique",
    "searchR1_bamboogle",
)


def normalize_answer(text: str) -> str:
    """SQuAD's normal form, in its order: lower case, punctuation removed, articles removed, whitespace collapsed."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def last_answer(solution_str: str) -> str | None:
    """The stripped text of the last ``<answer>...</answer>``; None when there is none."""
    found = ANSWER_TAG.findall(solution_str)
    return found[-1].strip() if found else None


def _targets(ground_truth: Any) -> list[str]:
    targets = ground_truth["target"] if isinstance(ground_truth, Mapping) else ground_truth
    return [targets] if isinstance(targets, str) else [str(t) for t in _iterable(targets)]


def check_targets(ground_truth: Any) -> None:
    """ValueError unless the ground truth holds targets: a string, a list of them, or a mapping with a "target"."""
    shown = str(ground_truth)[:120]
    if isinstance(ground_truth, Mapping) and "target" not in ground_truth:
        raise ValueError(f"a QA ground truth needs a 'target' (a string or a list of them), got {shown!r}")
    try:
        targets = _targets(ground_truth)
    except TypeError:
        targets = []
    if not targets:
        raise ValueError(f"a QA ground truth needs at least one target string, got {shown!r}")


def _iterable(value: Any) -> Iterable[Any]:
    return value.tolist() if hasattr(value, "tolist") else value  # a numpy array read from parquet


@register_reward(*SEARCH_R1_SOURCES, check_ground_truth=check_targets)
def compute_score(
    solution_str: str,
    ground_truth: Any,
    extra_info: dict | None = None,
    format_score: float = 0.0,
    score: float = 1.0,
    **_: Any,
) -> dict[str, Any]:
    """``{"score": ..., "acc": whether the answer matched}``: the score as verl's ``search_r1_like_qa_em``."""
    answer = last_answer(solution_str)
    if answer is None:
        return {"score": 0.0, "acc": False}
    predicted = normalize_answer(answer)
    if not any(normalize_answer(t) == predicted for t in _targets(ground_truth)):
        return {"score": float(format_score), "acc": False}
    spammed = max(solution_str.count("<answer>"), solution_str.count("</answer>")) > MAX_ANSWER_TAGS
    return {"score": float(score) / 4 if spammed else float(score), "acc": True}
