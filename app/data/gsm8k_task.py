"""GSM8K (``question``/``answer`` JSONL, answer ending in ``#### N``) to verl rows."""

from __future__ import annotations

import json
import os
from typing import Any

from app.data.errors import DataError
from app.data.verl_rows import ANSWER_INSTRUCTION, verl_row

DATA_SOURCE = "openai/gsm8k"


def gsm8k_final_answer(answer: str, where: str = "") -> str:
    """``"... #### 1,250"`` -> ``"1250"``: the text after the last ``####``, commas removed."""
    head, sep, tail = answer.rpartition("####")
    value = tail.strip().replace(",", "")
    if not sep or not value:
        raise DataError(f"{where}: GSM8K answer has no '#### <number>' ending: {answer[-80:]!r}")
    return value


def gsm8k_rows(jsonl_path: str, split: str, instruction: str = ANSWER_INSTRUCTION) -> list[dict[str, Any]]:
    """Read one GSM8K JSONL file and return verl rows; extra_info holds split, index, the full answer and question,
    and verl's `interaction_kwargs` ({query, ground_truth}; no name: a run's first configured interaction) for
    multi-turn runs with an interaction (examples/gsm8k_interaction.yaml) and `tools_kwargs` for its GSM8K tool
    (`calc_gsm8k_reward`, app.agents.tools.gsm8k). ``instruction`` follows each question on a
    line of its own; "" leaves the question bare."""
    if not os.path.isfile(jsonl_path):
        raise DataError(f"GSM8K file not found: {jsonl_path}")
    rows = []
    with open(jsonl_path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            where = f"{jsonl_path} line {lineno}"
            try:
                item = json.loads(line)
            except json.JSONDecodeError as err:
                raise DataError(f"malformed JSON in {where}: {err.msg}") from err
            missing = [k for k in ("question", "answer") if k not in item]
            if missing:
                raise DataError(f"{where}: missing {', '.join(missing)} (keys: {', '.join(item)})")
            index, final = len(rows), gsm8k_final_answer(item["answer"], where)
            rows.append(
                verl_row(
                    DATA_SOURCE,
                    item["question"],
                    final,
                    ability="math",
                    instruction=instruction,
                    extra_info={
                        "split": split,
                        "index": index,
                        "answer": item["answer"],
                        "question": item["question"],
                        "interaction_kwargs": {"query": item["question"], "ground_truth": final},
                        # verl's GSM8K tool (app.agents.tools.gsm8k) checks submitted answers against it
                        "tools_kwargs": {"calc_gsm8k_reward": {"create_kwargs": {"ground_truth": final}}},
                    },
                )
            )
    if not rows:
        raise DataError(f"GSM8K file is empty: {jsonl_path}")
    return rows
