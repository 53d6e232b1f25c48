"""Traces, step by step, whether a run's samples keep the answer format its reward asks for, and which way the
group-relative advantage pushes it.

A policy that stops sampling the `#### N` line can no longer be taught it (the quickstart's seed-1 collapse,
docs/results.md). This reads a run's `trainer.rollout_data_dir` dumps (every sample's response and score) and its
`metrics.jsonl`, and prints per step:

- `fmt`: share of samples that mark an answer as `#### N`;
- `groups`: share of prompt groups with at least one marked sample (a group without one cannot reward the format);
- `adv fmt` / `adv plain`: mean advantage of marked and of unmarked samples, the score minus its group's mean
  (Dr. GRPO's advantage, before any std normalisation); where marked samples get less than unmarked ones, the update
  pushes the format out;
- `entropy`: the update's token entropy (`actor/entropy`).

    python bench/format_trace.py OUTPUT_DIR [--rollouts DIR] [--steps N]

OUTPUT_DIR is the run's `trainer.default_local_dir`; the dumps default to OUTPUT_DIR/rollouts.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from algos.rewards.gsm8k import extract_answer  # noqa: E402


@dataclass
class StepTrace:
    step: int
    formatted_share: float
    groups_with_formatted: float
    advantage_formatted: float | None  # None where no sample (or none unmarked) of the step had that kind
    advantage_plain: float | None
    samples: int


def is_formatted(response: str) -> bool:
    return extract_answer(response, "strict") is not None


def trace_step(rows: list[dict]) -> StepTrace:
    """One step's dump rows (`step`, `uid`, `response`, `score`) summarised."""
    groups: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        groups[row["uid"]].append(row)
    marked, plain = [], []
    groups_marked = 0
    for members in groups.values():
        mean = sum(r["score"] for r in members) / len(members)
        flags = [is_formatted(r["response"]) for r in members]
        groups_marked += any(flags)
        for row, flag in zip(members, flags):
            (marked if flag else plain).append(row["score"] - mean)
    return StepTrace(
        step=rows[0]["step"],
        formatted_share=len(marked) / len(rows),
        groups_with_formatted=groups_marked / len(groups),
        advantage_formatted=sum(marked) / len(marked) if marked else None,
        advantage_plain=sum(plain) / len(plain) if plain else None,
        samples=len(rows),
    )


def read_dumps(folder: Path) -> dict[int, list[dict]]:
    """Every `<step>-rank<r>.jsonl` of `folder`, by step (the ranks of a step joined)."""
    steps: dict[int, list[dict]] = defaultdict(list)
    files = sorted(folder.glob("*-rank*.jsonl"))
    if not files:
        raise FileNotFoundError(f"{folder}: no <step>-rank<r>.jsonl dumps (was trainer.rollout_data_dir set?)")
    for path in files:
        for line in path.read_text().splitlines():
            row = json.loads(line)
            steps[row["step"]].append(row)
    return dict(sorted(steps.items()))


def entropies(metrics_path: Path) -> dict[int, float]:
    if not metrics_path.exists():
        return {}
    rows = [json.loads(line) for line in metrics_path.read_text().splitlines() if line.strip()]
    return {r["step"]: r["actor/entropy"] for r in rows if "actor/entropy" in r}


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:+.3f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output_dir", type=Path)
    parser.add_argument("--rollouts", type=Path, default=None, help="the dumps' folder (default OUTPUT_DIR/rollouts)")
    parser.add_argument("--steps", type=int, default=None, help="only the first N steps")
    args = parser.parse_args(argv)
    try:
        dumps = read_dumps(args.rollouts or args.output_dir / "rollouts")
    except FileNotFoundError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    entropy = entropies(args.output_dir / "metrics.jsonl")
    print("| step | fmt | groups | adv fmt | adv plain | entropy |")
    print("|---|---|---|---|---|---|")
    for step, rows in dumps.items():
        if args.steps is not None and step > args.steps:
            break
        t = trace_step(rows)
        ent = f"{entropy[step]:.3f}" if step in entropy else "-"
        print(
            f"| {step} | {t.formatted_share:.3f} | {t.groups_with_formatted:.2f} | {_cell(t.advantage_formatted)} "
            f"| {_cell(t.advantage_plain)} | {ent} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
