"""Traces, step by step, whether a run's samples keep the answer format its reward asks for, and which way the
group-relative advantage pushes it.

A policy that stops sampling the `#### N` line can no longer be taught it (the quickstart's seed-1 collapse,
docs/experiments.md). This reads a run's `trainer.rollout_data_dir` dumps (every sample's response and score) and its
`metrics.jsonl`, and prints per step:

- `fmt`: share of samples that mark an answer as `#### N`;
- `groups`: share of prompt groups with at least one marked sample (a group without one cannot reward the format);
- `adv fmt` / `adv plain`: mean advantage of marked and of unmarked samples, the score minus its group's mean
  (Dr. GRPO's advantage, before any std normalisation); where marked samples get less than unmarked ones, the update
  pushes the format out;
- `entropy`: the update's token entropy (`actor/entropy`);
- with `--credits RIGHT,UNMARKED,MARKED_WRONG`: the summed advantage of the marked samples had the same samples been
  scored with those credits (the arithmetic reward's `score`, `unmarked_score`, `format_score`), and the run's own.

    python bench/format_trace.py OUTPUT_DIR [--rollouts DIR] [--steps N] [--credits 1,0.2,0.2 ...]
        [--scored-with 1,0.2,0.2]

OUTPUT_DIR is the run's `trainer.default_local_dir`; the dumps default to OUTPUT_DIR/rollouts. Each sample's `acc`
comes from its dump line (the reward's field); dumps written before the lines carried it are read back through the
credits the run was scored with (`--scored-with`).
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


Credits = tuple[float, float, float]  # a right marked answer, a right unmarked one, a marked wrong one


def is_formatted(response: str) -> bool:
    return extract_answer(response, "strict") is not None


def parse_credits(text: str) -> Credits:
    parts = text.split(",")
    if len(parts) != 3:
        raise argparse.ArgumentTypeError(f"{text!r}: give three numbers, RIGHT,UNMARKED,MARKED_WRONG")
    return tuple(float(p) for p in parts)  # type: ignore[return-value]


def sample_is_right(row: dict, scored_with: Credits) -> bool:
    """The dump's `acc`; else read back from the score (less any overlong penalty) under `scored_with`."""
    if "acc" in row:
        return bool(row["acc"])
    base = row["score"] - row.get("overlong_penalty", 0.0)
    right, unmarked, _ = scored_with
    credit = right if is_formatted(row["response"]) else unmarked
    return abs(base - credit) < 1e-4


def advantages_by_kind(rows: list[dict], score) -> tuple[list[float], list[float], int]:
    """Each sample's group-relative advantage, `score(row)` minus its group's mean (Dr. GRPO's, before any std
    normalisation), split into marked and unmarked samples; and how many groups hold a marked sample."""
    groups: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        groups[row["uid"]].append(row)
    marked, plain, groups_marked = [], [], 0
    for members in groups.values():
        scores = [score(r) for r in members]
        mean = sum(scores) / len(scores)
        flags = [is_formatted(r["response"]) for r in members]
        groups_marked += any(flags)
        for value, flag in zip(scores, flags):
            (marked if flag else plain).append(value - mean)
    return marked, plain, groups_marked


def push_to_format(rows: list[dict], credits: Credits, scored_with: Credits) -> float:
    """Summed group-relative advantage of one step's marked samples had they been scored with `credits`."""
    right, unmarked, marked_wrong = credits

    def rescored(row: dict) -> float:
        formatted, ok = is_formatted(row["response"]), sample_is_right(row, scored_with)
        return (right if formatted else unmarked) if ok else (marked_wrong if formatted else 0.0)

    return sum(advantages_by_kind(rows, rescored)[0])


def trace_step(rows: list[dict]) -> StepTrace:
    """One step's dump rows (`step`, `uid`, `response`, `score`) summarised."""
    marked, plain, groups_marked = advantages_by_kind(rows, lambda r: r["score"])
    groups = len({r["uid"] for r in rows})
    return StepTrace(
        step=rows[0]["step"],
        formatted_share=len(marked) / len(rows),
        groups_with_formatted=groups_marked / groups,
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
    parser.add_argument(
        "--credits", type=parse_credits, action="append", default=[], help="RIGHT,UNMARKED,MARKED_WRONG to compare"
    )
    parser.add_argument(
        "--scored-with",
        type=parse_credits,
        default=(1.0, 0.2, 0.2),
        help="the credits the run used, to read dumps without an acc field (default: the reward's)",
    )
    args = parser.parse_args(argv)
    try:
        dumps = read_dumps(args.rollouts or args.output_dir / "rollouts")
    except FileNotFoundError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    entropy = entropies(args.output_dir / "metrics.jsonl")
    compared = [args.scored_with, *args.credits] if args.credits else []
    names = "".join(f" push at {','.join(f'{c:g}' for c in credits)} |" for credits in compared)
    print("| step | fmt | groups | adv fmt | adv plain | entropy |" + names)
    print("|---|---|---|---|---|---|" + "---|" * len(compared))
    against = [0] * len(compared)
    for step, rows in dumps.items():
        if args.steps is not None and step > args.steps:
            break
        t = trace_step(rows)
        ent = f"{entropy[step]:.3f}" if step in entropy else "-"
        pushes = [push_to_format(rows, credits, args.scored_with) for credits in compared]
        against = [n + (p < 0) for n, p in zip(against, pushes)]
        print(
            f"| {step} | {t.formatted_share:.3f} | {t.groups_with_formatted:.2f} | {_cell(t.advantage_formatted)} "
            f"| {_cell(t.advantage_plain)} | {ent} |" + "".join(f" {p:+.2f} |" for p in pushes)
        )
    for credits, n in zip(compared, against):
        print(f"credits {','.join(f'{c:g}' for c in credits)}: {n} steps pushed against the format")
    return 0


if __name__ == "__main__":
    sys.exit(main())
