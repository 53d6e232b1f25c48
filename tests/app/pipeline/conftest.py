"""Data for the pipeline front-ends' tests: the arithmetic task as flat JSONL with a `problem` column
(grpo_chat_completion); verl_finetune's tests take the suite's `small_arith_data` (verl parquet)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def problem_jsonl(tmp_path_factory) -> Path:
    """train.jsonl (8 rows) and test.jsonl (2 rows): problem, solution, data_source (the built-in arithmetic reward)."""
    out = tmp_path_factory.mktemp("pipeline-jsonl")
    for split, size in (("train", 8), ("test", 2)):
        rows = [
            {
                "problem": f"What is {i} + {i + 1}? End with #### <answer>.",
                "solution": str(2 * i + 1),
                "data_source": "arithmetic",
            }
            for i in range(size)
        ]
        (out / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out
