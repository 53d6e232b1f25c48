"""Rows in the verl dataset schema and writing them to parquet."""

from __future__ import annotations

import os
from typing import Any, Sequence

# Ends every built-in task's prompt; the gsm8k and arithmetic rewards read the number after "####".
ANSWER_INSTRUCTION = 'Reason step by step, then give the final answer on the last line as "#### <answer>".'


def verl_row(
    data_source: str,
    question: str,
    ground_truth: str,
    ability: str,
    extra_info: dict[str, Any],
    instruction: str = ANSWER_INSTRUCTION,
) -> dict[str, Any]:
    """One row: ``data_source``, ``prompt`` (one user message: the question, then ``instruction`` on its own line
    unless it is empty), ``ability``, ``reward_model``, ``extra_info``."""
    content = f"{question.strip()}\n{instruction}" if instruction else question.strip()
    return {
        "data_source": data_source,
        "prompt": [{"role": "user", "content": content}],
        "ability": ability,
        "reward_model": {"style": "rule", "ground_truth": ground_truth},
        "extra_info": extra_info,
    }


def write_parquet(rows: Sequence[dict[str, Any]], path: str) -> None:
    """Write rows (all with the same keys) to ``path``, creating its folder."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    pq.write_table(pa.Table.from_pylist(list(rows)), path)
