"""Write datasets in the verl parquet schema.

python -m app.prepare gsm8k --input DIR --output DIR [--instruction TEXT]
    DIR/train.jsonl and DIR/test.jsonl (GSM8K: question, answer ending "#### N") -> train.parquet, test.parquet
python -m app.prepare arithmetic --output DIR [--train-size N] [--test-size M] [--seed S] [--level-weights W,W,W,W]
                                  [--train-level-weights W,W,W,W]
    generated arithmetic word problems (no download) -> train.parquet, test.parquet; no test question is in train
python -m app.prepare calculator --output DIR [--train-size N] [--test-size M] [--seed S] [--demonstrations K]
    large-number arithmetic for tool use (multi_turn) -> train.parquet, test.parquet, tool_config.yaml
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Optional, Sequence

from app.data.arithmetic_task import LEVEL_WEIGHTS, arithmetic_rows, generate_splits
from app.data.calculator_task import DEMONSTRATIONS, TOOL_CONFIG, calculator_rows
from app.data.errors import DataError
from app.data.gsm8k_task import gsm8k_rows
from app.data.verl_rows import ANSWER_INSTRUCTION, write_parquet


def prepare_gsm8k(input_dir: str, output_dir: str, instruction: str = ANSWER_INSTRUCTION) -> dict[str, int]:
    """Convert ``input_dir/{train,test}.jsonl``, ``instruction`` after each question; returns rows written per split.
    Both files are read and checked before either parquet is written."""
    splits = {
        split: gsm8k_rows(os.path.join(input_dir, f"{split}.jsonl"), split, instruction) for split in ("train", "test")
    }
    for split, rows in splits.items():
        write_parquet(rows, os.path.join(output_dir, f"{split}.parquet"))
    return {split: len(rows) for split, rows in splits.items()}


def prepare_arithmetic(
    output_dir: str,
    train_size: int = 5000,
    test_size: int = 500,
    seed: int = 0,
    level_weights: Sequence[float] = LEVEL_WEIGHTS,
    train_level_weights: Optional[Sequence[float]] = None,
) -> dict[str, int]:
    """Generate and write the arithmetic task; returns rows written per split. `train_level_weights`: the train
    split's mix of levels (default: `level_weights`)."""
    for split, size in (("train", train_size), ("test", test_size)):
        if size <= 0:
            raise DataError(f"--{split}-size must be positive, got {size}")
    try:
        # all generated before anything is written
        splits = generate_splits(train_size, test_size, seed, level_weights, train_level_weights)
    except ValueError as err:  # the sizes are checked above: only the two mixes are left to refuse
        option = "--train-level-weights" if str(err).startswith("train_level_weights") else "--level-weights"
        raise DataError(f"{option}: {err}") from None
    counts = {}
    for split, problems in zip(("train", "test"), splits):
        rows = arithmetic_rows(problems, split)
        write_parquet(rows, os.path.join(output_dir, f"{split}.parquet"))
        counts[split] = len(rows)
    return counts


def prepare_calculator(
    output_dir: str, train_size: int = 2000, test_size: int = 200, seed: int = 0, demonstrations: int = 1
) -> dict[str, int]:
    """Generate the tool-use task (app.data.calculator_task) and its tool config file (tool_config.yaml, for
    `actor_rollout_ref.rollout.multi_turn.tool_config_path`); returns rows written per split."""
    import yaml

    counts = {}
    for split, size in (("train", train_size), ("test", test_size)):
        if size <= 0:
            raise DataError(f"--{split}-size must be positive, got {size}")
        rows = calculator_rows(size, seed, split, demonstrations)
        write_parquet(rows, os.path.join(output_dir, f"{split}.parquet"))
        counts[split] = len(rows)
    with open(os.path.join(output_dir, "tool_config.yaml"), "w") as f:
        yaml.safe_dump(TOOL_CONFIG, f, sort_keys=False)
    return counts


def build_parser() -> argparse.ArgumentParser:
    from app.failure_report import OneLineArgumentParser

    parser = OneLineArgumentParser(prog="python -m app.prepare", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="task", required=True)
    g = sub.add_parser("gsm8k", help="convert GSM8K train.jsonl/test.jsonl")
    g.add_argument("--input", required=True, help="folder with train.jsonl and test.jsonl")
    g.add_argument("--output", required=True, help="folder for train.parquet and test.parquet")
    g.add_argument(
        "--instruction",
        default=ANSWER_INSTRUCTION,
        help="line added after each question (default: %(default)r; '' keeps the question bare)",
    )
    a = sub.add_parser("arithmetic", help="generate the built-in arithmetic task")
    a.add_argument("--output", required=True, help="folder for train.parquet and test.parquet")
    a.add_argument("--train-size", type=int, default=5000)
    a.add_argument("--test-size", type=int, default=500)
    a.add_argument("--seed", type=int, default=0)
    a.add_argument(
        "--level-weights",
        type=_weights,
        default=LEVEL_WEIGHTS,
        metavar="W1,W2,W3,W4",
        help="share of problems per difficulty level 1-4 (default %(default)s)",
    )
    a.add_argument(
        "--train-level-weights",
        type=_weights,
        default=None,
        metavar="W1,W2,W3,W4",
        help="the train split's share per level, where it differs from the test split's (default: --level-weights)",
    )
    c = sub.add_parser("calculator", help="generate the tool-use task (large-number arithmetic with a calculator tool)")
    c.add_argument("--output", required=True, help="folder for train.parquet, test.parquet and tool_config.yaml")
    c.add_argument("--train-size", type=int, default=2000)
    c.add_argument("--test-size", type=int, default=200)
    c.add_argument("--seed", type=int, default=0)
    c.add_argument(
        "--demonstrations",
        type=int,
        choices=range(len(DEMONSTRATIONS) + 1),
        default=1,
        help="worked tool-call exchanges before each question (default %(default)s)",
    )
    return parser


def _weights(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(w) for w in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers like 0.6,0.3,0.1,0, got {text!r}") from None


def main(argv: list[str] | None = None) -> int:
    from app.failure_report import print_error

    args = build_parser().parse_args(argv)
    try:
        if args.task == "gsm8k":
            counts = prepare_gsm8k(args.input, args.output, args.instruction)
        elif args.task == "calculator":
            counts = prepare_calculator(args.output, args.train_size, args.test_size, args.seed, args.demonstrations)
        else:
            counts = prepare_arithmetic(
                args.output, args.train_size, args.test_size, args.seed, args.level_weights, args.train_level_weights
            )
    except DataError as err:
        return print_error(err)
    except OSError as err:  # the output folder cannot be written
        return print_error(f"--output {args.output}: cannot write there ({err.strerror or err})")
    for split, n in counts.items():
        print(f"wrote {n} rows to {os.path.join(args.output, split + '.parquet')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
