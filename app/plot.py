"""`python -m app.plot RUN_DIR [--output PNG]`: training curves of one run, or one curve per trial of a sweep.

RUN_DIR is a run's `trainer.default_local_dir` (it holds `metrics.jsonl`) or a sweep folder whose sub-folders do.
Panels: reward (train and validation), the validation means of the reward's extra fields (e.g. the arithmetic
reward's `acc` and `formatted`), KL, entropy, response length and step time.

The train reward is the mean score of every sample a step generated (`reward/score/mean`: all rounds, before dynamic
sampling drops the groups that scored alike), drawn with its moving average. `critic/score/mean`, the batch that was
trained on, is no measure of progress under dynamic sampling: the kept groups are the mixed ones by construction, so
their mean stays middling while the policy improves. It is drawn only for runs that logged neither rule nor
reward-model scores.
"""

from __future__ import annotations

import argparse
import sys
from functools import partial
from pathlib import Path

from app.trainer.tracking import read_metrics

# the first of these a run logged is its train reward: rule rewards, a reward model, else the trained batch's score
TRAIN_REWARD_KEYS = ("reward/score/mean", "reward/model/mean", "critic/score/mean")
SMOOTH_STEPS = 5  # window of the train reward's moving average: a step's few prompts make single steps noisy


def find_runs(root: Path) -> dict[str, Path]:
    """{label: metrics.jsonl} for a run folder or for every run under a sweep folder."""
    if (root / "metrics.jsonl").is_file():
        return {root.name: root / "metrics.jsonl"}
    runs = {str(p.parent.relative_to(root)): p for p in sorted(root.rglob("metrics.jsonl"))}
    if not runs:
        raise FileNotFoundError(
            f"{root}: no metrics.jsonl in it or below it (is it a run's trainer.default_local_dir?)"
        )
    return runs


def moving_average(values: list[float], window: int) -> list[float]:
    """Trailing mean: entry i averages values[max(0, i - window + 1) : i + 1], so the first entries average fewer."""
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    out, total = [], 0.0
    for i, value in enumerate(values):
        total += value
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def train_reward_key(rows: list[dict]) -> str | None:
    """The first of TRAIN_REWARD_KEYS that the run logged, or None."""
    return next((key for key in TRAIN_REWARD_KEYS if any(key in r for r in rows)), None)


def _points(rows: list[dict], key: str) -> tuple[list, list]:
    pairs = [(r["step"], r[key]) for r in rows if key in r]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def _legend(runs: dict[str, list[dict]], label: str, name: str) -> str:
    return name if len(runs) == 1 else f"{label} {name}"


def _draw_reward(ax, runs: dict[str, list[dict]]) -> bool:
    """The train reward (raw and its moving average) and validation."""
    drawn = False
    for label, rows in runs.items():
        key = train_reward_key(rows)
        if key is not None:
            xs, ys = _points(rows, key)
            name = "train batch" if key == "critic/score/mean" else "train samples"
            raw = ax.plot(xs, ys, alpha=0.3, linewidth=1, label=_legend(runs, label, name))[0]
            ax.plot(
                xs,
                moving_average(ys, SMOOTH_STEPS),
                color=raw.get_color(),
                linewidth=2,
                label=_legend(runs, label, f"{name}, {SMOOTH_STEPS}-step mean"),
            )
            drawn = True
        xs, ys = _points(rows, "val-core/reward/mean")
        if xs:
            ax.plot(xs, ys, marker="o", markersize=3, label=_legend(runs, label, "validation"))
            drawn = True
    return drawn


def _draw_series(ax, runs: dict[str, list[dict]], series: list[tuple[str, str]]) -> bool:
    drawn = False
    for label, rows in runs.items():
        for key, name in series:
            xs, ys = _points(rows, key)
            if xs:
                ax.plot(xs, ys, marker="o" if len(xs) < 30 else None, markersize=3, label=_legend(runs, label, name))
                drawn = True
    return drawn


def _reward_field_series(runs: dict[str, list[dict]]) -> list[tuple[str, str]]:
    """(key, label) of the validation means of reward extra fields: `val-aux/<source>/<field>/mean`, labelled
    `<source> <field>`; the response length, also under val-aux/, has its own panel."""
    keys = {
        k
        for rows in runs.values()
        for r in rows
        for k in r
        if k.startswith("val-aux/") and k.endswith("/mean") and k.count("/") == 3
    }
    return [(k, " ".join(k.split("/")[1:3])) for k in sorted(keys)]


def _draw_reward_fields(ax, runs: dict[str, list[dict]]) -> bool:
    return _draw_series(ax, runs, _reward_field_series(runs))


# (title, draw(ax, runs) -> whether anything was drawn)
PANELS = [
    ("reward", _draw_reward),
    ("validation: reward fields", _draw_reward_fields),  # every `val-aux/<source>/<field>/mean` the run logged
    (
        "KL to reference",
        partial(_draw_series, series=[("actor/kl_loss", "kl loss"), ("actor/reward_kl_penalty", "kl in reward")]),
    ),
    ("entropy", partial(_draw_series, series=[("actor/entropy", "entropy")])),
    ("response length", partial(_draw_series, series=[("response_length/mean", "mean tokens")])),
    ("step time (s)", partial(_draw_series, series=[("timing_s/step", "step")])),
]


def plot_runs(root: Path, output: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = {label: read_metrics(path) for label, path in find_runs(root).items()}
    fig, axes = plt.subplots(1, len(PANELS), figsize=(4.2 * len(PANELS), 3.4))
    for ax, (title, draw) in zip(axes, PANELS):
        drawn = draw(ax, runs)
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if drawn:
            ax.legend(fontsize=7)
        else:
            ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes, color="grey")
    fig.suptitle(str(root), fontsize=9)
    fig.tight_layout()
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output, dpi=110)
    plt.close(fig)
    return output


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.plot", description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--output", type=Path, default=None, help="PNG path (default: RUN_DIR/curves.png)")
    args = parser.parse_args(argv)
    try:
        out = plot_runs(args.run_dir, args.output or args.run_dir / "curves.png")
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
