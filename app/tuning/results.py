"""The end of a sweep: a results table sorted by the metric, and the best trial's config as a runnable YAML.

Files in the sweep folder:
    results.csv, results.md   one row per trial, best first
    best.yaml                 the best trial's full trainer config: `python -m app.train --config-path <sweep dir>
                              --config-name best` reruns it (own experiment name and output folder `<sweep dir>/best`)
    best_overrides.txt        the same as Hydra overrides of the base config
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from app.tuning.trial import TrialContext, get_key, set_key, trial_config_tree, trial_dir


@dataclass
class TrialRow:
    trial_id: str
    status: str  # completed | stopped early | error
    params: dict[str, Any]
    seed: Optional[int]
    steps: Optional[int]  # last step reported
    value: float  # the metric's latest value (the last validation)
    best: float  # the metric's best value over the trial
    out_dir: str
    error: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def rows_from_results(results: Any, ctx: TrialContext, total_steps: int, mode: str) -> list[TrialRow]:
    """One row per trial of a Tune ResultGrid (trial folders are named by trial id)."""
    rows = []
    for result in results:
        trial_id = Path(result.path).name
        metrics = result.metrics or {}
        frame = result.metrics_dataframe
        history = []
        if frame is not None and ctx.metric in frame:
            history = [float(v) for v in frame[ctx.metric].tolist() if v is not None and math.isfinite(float(v))]
        step = metrics.get("step")
        if result.error is not None:
            status = "error"
        elif step is not None and int(step) >= total_steps:
            status = "completed"
        else:
            status = "stopped early"
        value = metrics.get(ctx.metric, math.nan)
        seed = metrics.get("seed")
        record = trial_dir(ctx, trial_id) / "trial.json"
        if seed is None and record.is_file():  # a trial that failed before its first report
            seed = json.loads(record.read_text()).get("seed")
        rows.append(
            TrialRow(
                trial_id=trial_id,
                status=status,
                params=dict(result.config or {}),
                seed=seed,
                steps=None if step is None else int(step),
                value=float(value) if value is not None else math.nan,
                best=(max(history) if mode == "max" else min(history)) if history else math.nan,
                out_dir=str(trial_dir(ctx, trial_id)),
                error="" if result.error is None else f"{type(result.error).__name__}: {result.error}".splitlines()[0],
            )
        )
    return rows


def sort_rows(rows: list[TrialRow], mode: str) -> list[TrialRow]:
    """Best first by the latest metric value; trials without a value, then errored ones, last."""
    sign = -1.0 if mode == "max" else 1.0

    def key(row: TrialRow):
        missing = not math.isfinite(row.value)
        return (row.status == "error", missing, 0.0 if missing else sign * row.value, row.trial_id)

    return sorted(rows, key=key)


def table(rows: list[TrialRow], metric: str) -> tuple[list[str], list[list[str]]]:
    keys = sorted({k for r in rows for k in r.params})
    header = ["rank", "trial_id", "status", *keys, "seed", "steps", metric, f"best {metric}", "output"]
    body = []
    for rank, r in enumerate(rows, 1):
        body.append(
            [
                str(rank),
                r.trial_id,
                r.status,
                *(_fmt(r.params.get(k)) for k in keys),
                _fmt(r.seed),
                _fmt(r.steps),
                _fmt(r.value),
                _fmt(r.best),
                r.out_dir,
            ]
        )
    return header, body


def markdown(header: list[str], body: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in body]
    return "\n".join(lines) + "\n"


def write_table(sweep_dir: Path, rows: list[TrialRow], metric: str) -> str:
    """Writes results.csv and results.md; returns the markdown."""
    header, body = table(rows, metric)
    with (sweep_dir / "results.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(body)
    text = markdown(header, body)
    (sweep_dir / "results.md").write_text(text)
    return text


def best_config_tree(ctx: TrialContext, row: TrialRow) -> dict:
    """The best trial's trainer config: its parameters and seed, a fresh experiment name and output folder."""
    tree = trial_config_tree(ctx, row.params, row.trial_id)
    if row.seed is not None:
        set_key(tree, "trainer.seed", int(row.seed))
    set_key(tree, "trainer.experiment_name", f"{ctx.sweep_name}-best")
    set_key(tree, "trainer.default_local_dir", str(Path(ctx.sweep_dir) / "best"))
    return tree


def write_best(ctx: TrialContext, row: TrialRow, base_config: str, base_overrides: list[str]) -> Path:
    """best.yaml (loads as a primary Hydra config) and best_overrides.txt (overrides of the base config)."""
    from omegaconf import OmegaConf

    sweep_dir = Path(ctx.sweep_dir)
    tree = best_config_tree(ctx, row)
    header = (
        f"# Best trial {row.trial_id} of sweep {ctx.sweep_name}: {ctx.metric}={_fmt(row.value)}\n"
        f"# Run it: python -m app.train --config-path {sweep_dir} --config-name best\n"
    )
    path = sweep_dir / "best.yaml"
    path.write_text(header + OmegaConf.to_yaml(OmegaConf.create(tree)))
    overrides = list(base_overrides) + [f"{k}={hydra_value(v)}" for k, v in sorted(row.params.items())]
    for key in ("trainer.seed", "trainer.total_training_steps", "trainer.experiment_name", "trainer.default_local_dir"):
        if key not in row.params:
            overrides.append(f"{key}={hydra_value(get_key(tree, key))}")
    (sweep_dir / "best_overrides.txt").write_text(
        f"# python -m app.train --config-name {base_config} followed by these overrides\n" + "\n".join(overrides) + "\n"
    )
    return path


def hydra_value(value: Any) -> str:
    """A value as Hydra's override grammar reads it back unchanged."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    text = str(value)
    if text and all(c.isalnum() or c in "-_./" for c in text) and not text[0].isdigit():
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _fmt(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.6g}"
    return str(value)
