"""Where step metrics go: the console (with a progress bar), a JSONL file, and TensorBoard / MLflow when installed.

The JSONL file (`<default_local_dir>/metrics.jsonl`, one object per step with a `step` key) is the run's own record:
plots and sweeps read it, and it survives whatever the Ray Train result object keeps.
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any, Optional, Protocol

_CONSOLE_KEYS = ("critic/score/mean", "val-core/reward/mean", "actor/pg_loss", "actor/kl_loss", "actor/entropy",
                 "response_length/mean", "timing_s/step")


class MetricSink(Protocol):
    def log(self, metrics: dict[str, float], step: int) -> None: ...
    def close(self) -> None: ...


class JsonlSink:
    """Appends; on resume, lines past the resumed step are dropped so the file tells one consistent history, and a
    fresh run replaces an old file."""

    def __init__(self, path: Path, resume_step: int = 0) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():
            # a fresh run (resume_step 0) starts a new history; a resumed one keeps the steps its checkpoint covers
            kept = [line for line in path.read_text().splitlines()
                    if resume_step and line.strip() and json.loads(line).get("step", 0) <= resume_step]
            path.write_text("".join(line + "\n" for line in kept))
        self._file = path.open("a")

    def log(self, metrics: dict[str, float], step: int) -> None:
        self._file.write(json.dumps({"step": step, **_finite(metrics)}) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class ConsoleSink:
    """A progress bar over the steps plus one short line of the metrics people watch."""

    def __init__(self, total_steps: int, start_step: int) -> None:
        from tqdm import tqdm

        self._bar = tqdm(total=total_steps, initial=start_step, desc="train", unit="step", file=sys.stdout,
                         dynamic_ncols=True, leave=True)

    def log(self, metrics: dict[str, float], step: int) -> None:
        shown = {k.split("/", 1)[-1] if k.startswith("critic/") else k: metrics[k] for k in _CONSOLE_KEYS if k in metrics}
        line = " ".join(f"{k}={v:.4g}" for k, v in shown.items())
        if step > self._bar.n:
            self._bar.update(step - self._bar.n)
        self._bar.write(f"step {step}: {line}")

    def close(self) -> None:
        self._bar.close()


class TensorBoardSink:
    def __init__(self, log_dir: Path) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            from tensorboardX import SummaryWriter
        self._writer = SummaryWriter(log_dir=str(log_dir))

    def log(self, metrics: dict[str, float], step: int) -> None:
        for key, value in _finite(metrics).items():
            self._writer.add_scalar(key, value, step)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


class MlflowSink:
    def __init__(self, experiment: str, run_name: str, params: dict[str, Any]) -> None:
        import mlflow

        self._mlflow = mlflow
        mlflow.set_experiment(experiment)
        mlflow.start_run(run_name=run_name)
        mlflow.log_params({k: str(v)[:250] for k, v in params.items()})

    def log(self, metrics: dict[str, float], step: int) -> None:
        # MLflow metric names may not contain '@' and friends; '/' is allowed
        self._mlflow.log_metrics(_finite(metrics), step=step)

    def close(self) -> None:
        self._mlflow.end_run()


class Tracking:
    """Fans metrics out to the sinks named in `trainer.logger`; unknown names and missing packages are errors."""

    KNOWN = ("console", "jsonl", "tensorboard", "mlflow")

    def __init__(self, loggers: list[str], out_dir: Path, total_steps: int, start_step: int,
                 project: str, experiment: str, flat_config: Optional[dict[str, Any]] = None) -> None:
        self.sinks: list[MetricSink] = []
        for name in loggers:
            if name == "console":
                self.sinks.append(ConsoleSink(total_steps, start_step))
            elif name == "jsonl":
                self.sinks.append(JsonlSink(out_dir / "metrics.jsonl", start_step))
            elif name == "tensorboard":
                self.sinks.append(TensorBoardSink(out_dir / "tensorboard"))
            elif name == "mlflow":
                self.sinks.append(MlflowSink(project, experiment, flat_config or {}))
            else:
                raise ValueError(f"trainer.logger: unknown logger {name!r}; known: {', '.join(self.KNOWN)}")

    def log(self, metrics: dict[str, float], step: int) -> None:
        for sink in self.sinks:
            sink.log(metrics, step)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()


def read_metrics(path: Path) -> list[dict[str, float]]:
    """The records of a metrics.jsonl file, in step order."""
    if not path.is_file():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return sorted(rows, key=lambda r: r.get("step", 0))


def _finite(metrics: dict[str, Any]) -> dict[str, float]:
    out = {}
    for key, value in metrics.items():
        try:
            value = float(value)
        except (TypeError, ValueError):
            continue
        if math.isfinite(value):
            out[key] = value
    return out
