"""verl's `trainer.rollout_data_dir`: one JSONL file per step and rank, a line per generated sample."""
from __future__ import annotations

import json
from pathlib import Path


def dump_rollouts(folder: str, step: int, rank: int, group, texts: list[str], log_overlong: bool) -> Path:
    """Write `group`'s samples (decoded `texts`) to `folder/<step>-rank<rank>.jsonl`; returns the file."""
    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    scores = group.batch["token_level_scores"].sum(dim=1).tolist()
    log_overlong = log_overlong and "overlong_penalty" in group.extras
    out = path / f"{step}-rank{rank}.jsonl"
    with out.open("w") as f:
        for i, text in enumerate(texts):
            row = {"step": step, "uid": group.uid[i], "dataset_index": group.dataset_index[i],
                   "prompt": group.messages[i], "response": text, "score": scores[i],
                   "finish_reason": group.finish_reason[i], "policy_version": group.policy_version}
            if log_overlong:
                row["overlong_penalty"] = group.extras["overlong_penalty"][i]
            f.write(json.dumps(row, default=str) + "\n")
    return out
