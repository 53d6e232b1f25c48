"""A reward function in verl's form: `custom_reward_function.path=examples/custom_reward.py`.

It is called once per sample, in a reward worker process, with the row's data source, the decoded response, the
row's ground truth and its extra_info. It returns a number, or a dict with `score` and other numbers, which are
logged as `reward/extra/<key>/mean` (and per data source in validation).
"""

from __future__ import annotations

import re


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    """1 for the right number on a final `#### N` line, 0.2 for a `#### N` line with a wrong number, else 0."""
    marked = re.findall(r"####\s*(-?[\d,]*\.?\d+)", solution_str)
    if not marked:
        return {"score": 0.0, "formatted": 0.0}
    answer = marked[-1].replace(",", "")
    try:
        right = float(answer) == float(str(ground_truth).replace(",", ""))
    except ValueError:  # a ground truth that is not a number: compare the text
        right = answer == str(ground_truth).strip()
    return {"score": 1.0 if right else 0.2, "formatted": 1.0}
