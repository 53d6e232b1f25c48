"""Runs `make run`'s training N times and prints each run's validation reward before and after, and how many met +0.30.

One run of the quickstart says little about the next. Since vLLM runs inside the rollout replica (the trainer adds
each batch's requests in one call), a run is reproducible: the same `trainer.seed` gives the same curve, step for step.
So this bench reruns the training of `make run` (`python -m app.train --config-name quickstart`) with a different
seed each time (`trainer.seed` = --first-seed + the run's index), in fresh output folders, one after another, and
prints a row per run (with the first training step that drew a right, marked sample: until then self-imitation has
nothing to replay), then the share of runs whose greedy validation reward rose by at least --target. The model and
data must already be where `make run` puts them (run `make run` once first).

    .venv/bin/python bench/quickstart_repeat.py [--runs 3] [--first-seed N] [--output-root outputs/quickstart_repeat]
        [key=value ...]

Extra `key=value` arguments are Hydra overrides passed to every run. Writes `results.json` in the output root.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))  # bench/logged_run.py

from logged_run import run_logged  # noqa: E402

VAL_KEY = "val-core/reward/mean"
# the task's own validation fields beside the reward: the graded number is right; the answer uses the "#### N" line;
# both (algos/rewards/arithmetic.py)
ASPECTS = ("acc", "formatted", "strict")
# the task's training field for samples both right and marked (reward/extra/<field>/mean, its share of a step's
# samples): self-imitation replays the format only once a step has drawn such a sample (docs/experiments.md)
STRICT_KEY = "reward/extra/strict/mean"
# what `make run` itself must have prepared; the bench does not import or prepare anything
NEEDED = ("models/smollm2-135m-instruct", "data/arithmetic/train.parquet", "data/arithmetic/test.parquet")


@dataclass
class RunSummary:
    first_step: int
    last_step: int
    before: float
    after: float
    curve: list[float]  # every validation reward, in step order
    train_minutes: float  # the steps' own time (timing_s/step, validation included), not Ray's start-up
    steps: list[int] = field(default_factory=list)  # the step of each validation in `curve`
    aspects: dict[str, tuple[float, float]] = field(default_factory=dict)  # e.g. "acc": (before, after)
    strict: list[tuple[int, float]] = field(default_factory=list)  # (training step, STRICT_KEY), where logged

    @property
    def gain(self) -> float:
        return self.after - self.before

    @property
    def first_strict_step(self) -> Optional[int]:
        """The first training step that drew a right, marked sample; None if none did (or none logged it)."""
        return next((step for step, share in self.strict if share > 0), None)


def summarize_run(metrics_path: Path) -> RunSummary:
    """The validation curve and the summed step time of one run's metrics.jsonl. ValueError naming the file when it
    holds fewer than two validations."""
    from app.trainer.tracking import read_metrics

    rows = read_metrics(metrics_path)  # in step order
    validated = [r for r in rows if VAL_KEY in r]
    if len(validated) < 2:
        raise ValueError(
            f"{metrics_path}: {len(validated)} rows with {VAL_KEY}; a before/after needs two "
            f"(trainer.val_before_train and trainer.test_freq)"
        )
    minutes = sum(r.get("timing_s/step", 0.0) for r in rows) / 60
    return RunSummary(
        first_step=validated[0]["step"],
        last_step=validated[-1]["step"],
        before=validated[0][VAL_KEY],
        after=validated[-1][VAL_KEY],
        curve=[r[VAL_KEY] for r in validated],
        train_minutes=minutes,
        steps=[r["step"] for r in validated],
        aspects=_aspects(validated[0], validated[-1]),
        strict=[(r["step"], r[STRICT_KEY]) for r in rows if STRICT_KEY in r],
    )


def _aspects(first: dict, last: dict) -> dict[str, tuple[float, float]]:
    """Each ASPECTS field the task logs at validation (`val-aux/<source>/<aspect>/mean`), before and after."""
    found = {}
    for aspect in ASPECTS:
        keys = sorted(k for k in first if k.startswith("val-aux/") and k.endswith(f"/{aspect}/mean") and k in last)
        if keys:
            found[aspect] = (first[keys[0]], last[keys[0]])
    return found


def quickstart_seed() -> int:
    """trainer.seed as `make run` trains with it: the quickstart config's, else the schema's default."""
    import yaml

    from app.config.schema import TrainerConfig

    config = yaml.safe_load((REPO / "configs" / "quickstart.yaml").read_text())
    return int((config.get("trainer") or {}).get("seed", TrainerConfig.seed))


def describe(run: RunSummary) -> str:
    curve = ", ".join(f"{v:.3f} at {s}" for s, v in zip(run.steps, run.curve))
    aspects = "".join(f"; {name} {a:.3f} -> {b:.3f}" for name, (a, b) in run.aspects.items())
    first = run.first_strict_step
    if run.strict:
        aspects += f"; first right marked sample at step {first}" if first is not None else "; no right marked sample"
    return f"validation reward {curve} ({run.gain:+.3f}){aspects}; {run.train_minutes:.1f} min of steps"


def train_command(out: Path, index: int, seed: int, overrides: list[str]) -> list[str]:
    return [
        sys.executable,
        "-m",
        "app.train",
        "--config-name",
        "quickstart",
        f"trainer.default_local_dir={out}",
        f"trainer.experiment_name=quickstart_repeat_{index}",
        f"trainer.seed={seed}",
        *overrides,
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--target", type=float, default=0.30, help="the gain a run must reach")
    parser.add_argument("--output-root", type=Path, default=REPO / "outputs" / "quickstart_repeat")
    parser.add_argument(
        "--first-seed",
        type=int,
        default=None,
        help="trainer.seed of the first run, +1 for each next one (default: the quickstart's seed)",
    )
    args, overrides = parser.parse_known_args(argv)
    bad = [o for o in overrides if "=" not in o and not o.startswith("~")]  # ~key: Hydra's deletion of a key
    if bad:
        print(f"error: {bad[0]!r} is neither an option of this bench nor a key=value or ~key override", file=sys.stderr)
        return 2
    if any(o.split("=", 1)[0].lstrip("+") == "trainer.seed" for o in overrides):
        print("error: trainer.seed is set for each run by --first-seed", file=sys.stderr)
        return 2
    first_seed = quickstart_seed() if args.first_seed is None else args.first_seed
    if args.runs < 1:
        print(f"error: --runs must be >= 1, got {args.runs}", file=sys.stderr)
        return 2
    taken = [args.output_root / f"run_{i}" for i in range(args.runs) if (args.output_root / f"run_{i}").exists()]
    if taken:  # refused before any run starts, so no earlier run is overwritten
        print(f"error: {taken[0]} exists; pick another --output-root", file=sys.stderr)
        return 2
    missing = [p for p in NEEDED if not (REPO / p).exists()]
    if missing:
        print(f"error: {', '.join(missing)} not found under {REPO}: run `make run` once first", file=sys.stderr)
        return 2
    results = []
    for i in range(args.runs):
        out = args.output_root / f"run_{i}"
        cmd = train_command(out, i, first_seed + i, overrides)
        log = args.output_root / f"run_{i}.log"
        code, wall = run_logged(cmd, log, REPO)
        if code != 0:
            print(f"run {i} failed (exit code {code}); its log: {log}", file=sys.stderr)
            return 1
        run = summarize_run(out / "metrics.jsonl")
        results.append({"run": i, "seed": first_seed + i, **asdict(run), "gain": run.gain, "wall_minutes": wall})
        print(f"run {i} (trainer.seed={first_seed + i}): {describe(run)}; {wall:.1f} min in all", flush=True)
    gains = [r["gain"] for r in results]
    met = sum(g >= args.target for g in gains)
    minutes = ", ".join(f"{r['train_minutes']:.1f}" for r in results)
    print(
        f"{met} of {len(gains)} runs gained at least {args.target:+.2f}: gains "
        f"{', '.join(f'{g:+.3f}' for g in gains)} (median {statistics.median(gains):+.3f}); "
        f"minutes of steps {minutes}"
    )
    (args.output_root / "results.json").write_text(
        json.dumps({"overrides": overrides, "target": args.target, "runs": results}, indent=2)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
