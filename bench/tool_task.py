"""GRPO on the calculator tool task (app/data/calculator_task.py) for SmolLM2-135M-Instruct on a laptop CPU, and a
before/after table of greedy validation: the reward (a right final answer only: calling the tool earns nothing), the
share of answers that used the tool cleanly, tool calls and model turns per episode, and response tokens.

    python bench/tool_task.py [--steps 10] [--val-size 32] [--demonstrations 1] [--model models/smollm2-135m-instruct]
        [--out outputs/tool_task] [key=value training overrides ...]

Trains with `python -m app.train --config-name quickstart` (LoRA, the quickstart's CPU settings) and the multi-turn
rollout (`actor_rollout_ref.rollout.multi_turn`), validating before the first step and after the last; the numbers
come from the run's metrics.jsonl (`val-core/reward/mean`, `val-aux/multi_turn/*`, docs/metrics.md). Prepares the
task with `python -m app.prepare calculator --demonstrations K` (worked tool-call exchanges before each question) into
`<out>/data-K-demonstrations` when it is not there (one folder per K, so a folder left by an earlier run is never read
as another K's). The model must already be
imported (`make run` does it). Writes `<out>/results.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))  # bench/logged_run.py

from logged_run import run_logged  # noqa: E402

from app.data.calculator_task import DEMONSTRATIONS  # noqa: E402

MT = "actor_rollout_ref.rollout.multi_turn"
# (label, metrics.jsonl key) of each row of the table
ROWS = (
    ("greedy validation reward (right answers)", "val-core/reward/mean"),
    ("answers with a clean tool call", "val-aux/multi_turn/tool_call_ok/mean"),
    ("tool calls per episode", "val-aux/multi_turn/tool_calls/mean"),
    ("tool errors per episode", "val-aux/multi_turn/tool_errors/mean"),
    ("model turns per episode", "val-aux/multi_turn/assistant_turns/mean"),
    ("model tokens per episode", "val-aux/response_length/mean"),
)


def training_overrides(data: Path, model: Path, out: Path, steps: int, val_size: int) -> list[str]:
    """What differs from configs/quickstart.yaml: the tool task, multi-turn rollouts, a reward from right answers
    only (no overlong shaping), every group trained on (no dynamic sampling: at first most groups score all zero),
    token-mean aggregation, validation before the first step and after the last."""
    return [
        f"data.train_files={data / 'train.parquet'}",
        f"data.val_files={data / 'test.parquet'}",
        f"data.val_max_samples={val_size}",
        "data.max_prompt_length=512",  # the system message describes the tool
        "data.max_response_length=160",  # the whole episode after the prompt: calls, results and the answer
        # ~330-token prompts (tool description, worked exchange): the quickstart's 0.25 GiB holds only a few at once
        "actor_rollout_ref.rollout.cpu_kv_cache_gib=1",
        f"actor_rollout_ref.model.path={model}",
        f"{MT}.enable=true",
        f"{MT}.tool_config_path={data / 'tool_config.yaml'}",
        f"{MT}.max_assistant_turns=3",
        "algorithm.filter_groups.enable=false",
        "reward_model.overlong_buffer.enable=false",
        # the aggregation its docs/agents.md table was measured with, before the quickstart took Dr. GRPO's
        "actor_rollout_ref.actor.loss_agg_mode=token-mean",
        f"trainer.total_training_steps={steps}",
        f"trainer.test_freq={steps}",
        "trainer.val_before_train=true",
        "trainer.experiment_name=tool_task",
        f"trainer.default_local_dir={out / 'run'}",
        "trainer.logger=[jsonl]",
    ]


def data_dir(out: Path, demonstrations: int) -> Path:
    """Where the task prepared with `demonstrations` worked exchanges lives under the bench's --out."""
    return out / f"data-{demonstrations}-demonstrations"


def prepare_command(data: Path, demonstrations: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "app.prepare",
        "calculator",
        "--output",
        str(data),
        "--demonstrations",
        str(demonstrations),
    ]


def before_after(metrics_path: Path) -> dict[str, tuple[int, float, int, float]]:
    """{key: (first step, value, last step, value)} over the validation rows of one run's metrics.jsonl. ValueError
    naming the file when it holds fewer than two validations."""
    from app.trainer.tracking import read_metrics

    rows = [r for r in read_metrics(metrics_path) if "val-core/reward/mean" in r]
    if len(rows) < 2:
        raise ValueError(f"{metrics_path}: {len(rows)} validation rows; a before/after needs two")
    first, last = rows[0], rows[-1]
    return {
        key: (first["step"], first[key], last["step"], last[key]) for _, key in ROWS if key in first and key in last
    }


def table(values: dict[str, tuple[int, float, int, float]]) -> str:
    any_row = next(iter(values.values()))
    lines = [
        f"| greedy validation | step {any_row[0]} | step {any_row[2]} |",
        "|---|---|---|",
    ]
    for label, key in ROWS:
        if key in values:
            _, before, _, after = values[key]
            lines.append(f"| {label} | {before:.3f} | {after:.3f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--val-size", type=int, default=32, help="validation prompts (data.val_max_samples)")
    parser.add_argument(
        "--demonstrations",
        type=int,
        choices=range(len(DEMONSTRATIONS) + 1),  # refused here, before app.prepare or training starts
        default=1,
        help="worked tool-call exchanges before each question (app.prepare)",
    )
    parser.add_argument("--model", type=Path, default=REPO / "models" / "smollm2-135m-instruct")
    parser.add_argument("--out", type=Path, default=REPO / "outputs" / "tool_task")
    args, extra = parser.parse_known_args(argv)
    bad = [o for o in extra if "=" not in o]
    if bad:
        print(f"error: {bad[0]!r} is neither an option of this bench nor a key=value override", file=sys.stderr)
        return 2
    if args.steps < 1:
        print(f"error: --steps must be >= 1, got {args.steps}", file=sys.stderr)
        return 2
    if not args.model.exists():
        print(f"error: {args.model} not found: run `make run` once first, or pass --model", file=sys.stderr)
        return 2
    if (args.out / "run").exists():  # refused before anything runs, so no earlier run is overwritten
        print(f"error: {args.out / 'run'} exists; pick another --out", file=sys.stderr)
        return 2
    data = data_dir(args.out, args.demonstrations)
    if not (data / "tool_config.yaml").exists():
        subprocess.run(prepare_command(data, args.demonstrations), cwd=REPO, check=True)
    cmd = [
        sys.executable,
        "-m",
        "app.train",
        "--config-name",
        "quickstart",
        *training_overrides(data, args.model.resolve(), args.out, args.steps, args.val_size),
        *extra,
    ]
    print("command:", " ".join(cmd), flush=True)
    print(f"machine: {platform.machine()}, {_cpu_name()}, {len(os.sched_getaffinity(0))} cores", flush=True)
    log = args.out / "train.log"
    code, minutes = run_logged(cmd, log, REPO)
    if code != 0:
        print(f"training failed (exit code {code}); its log: {log}", file=sys.stderr)
        return 1
    values = before_after(args.out / "run" / "metrics.jsonl")
    print(table(values))
    print(
        f"{args.steps} steps, {args.val_size} validation prompts, {args.demonstrations} demonstrations, "
        f"{minutes:.1f} min in all"
    )
    (args.out / "results.json").write_text(
        json.dumps({"command": cmd, "minutes": minutes, "before_after": values}, indent=2)
    )
    return 0


def _cpu_name() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux), else what `platform` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


if __name__ == "__main__":
    sys.exit(main())
