"""Where step metrics go: the console (one line per step, printed by the driver: app/trainer/progress.py), a JSONL
file, and TensorBoard / MLflow / W&B when installed.

The JSONL file (`<default_local_dir>/metrics.jsonl`, one object per step with a `step` key) is the run's own record:
plots and sweeps read it, and it survives whatever the Ray Train result object keeps.
"""

from __future__ import annotations

import json
import math
import netrc
import os
from pathlib import Path
from typing import Any, Callable, Optional, Protocol
from urllib.parse import urlparse

from app.config.errors import ConfigError
from app.trainer.progress import PROGRESS_FILE, ProgressWriter


class MetricSink(Protocol):
    def log(self, metrics: dict[str, float], step: int) -> None: ...
    def close(self) -> None: ...


METRICS_FILE = "metrics.jsonl"
# trainer.val_only's record: a row per validation-only run, beside the training history it would otherwise break
VAL_ONLY_FILE = "val_only.jsonl"


def record_path(out_dir: Path, val_only: bool) -> Path:
    """The run's JSONL record in its `trainer.default_local_dir`."""
    return out_dir / (VAL_ONLY_FILE if val_only else METRICS_FILE)


class JsonlSink:
    """Appends; on resume, lines past the resumed step are dropped so the file tells one consistent history, and a
    fresh run replaces an old file. `keep_all`: every earlier line is kept (a record of separate runs)."""

    def __init__(self, path: Path, resume_step: int = 0, keep_all: bool = False) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists() and not keep_all:
            # a fresh run (resume_step 0) starts a new history; a resumed one keeps the steps its checkpoint covers
            kept = [
                line
                for line in path.read_text().splitlines()
                if resume_step and line.strip() and json.loads(line).get("step", 0) <= resume_step
            ]
            path.write_text("".join(line + "\n" for line in kept))
        self._file = path.open("a")

    def log(self, metrics: dict[str, float], step: int) -> None:
        self._file.write(json.dumps({"step": step, **_finite(metrics)}) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class ConsoleSamplesSink:
    """`console_samples`: prints the validation samples (`trainer.log_val_generations`) at each validation; the
    grpo_chat_completion pipeline's num_completions_to_print. Metrics are left to `console`."""

    def log(self, metrics: dict[str, float], step: int) -> None:
        pass

    def log_generations(self, rows: list[dict[str, Any]], step: int) -> None:
        for i, row in enumerate(rows):
            print(
                f"validation sample {i + 1}/{len(rows)} at step {step} (score {row['score']:.3f}, "
                f"ground truth {row['ground_truth']!r}):\n  prompt: {row['input']!r}\n  "
                f"completion: {row['output']!r}",
                flush=True,
            )

    def close(self) -> None:
        pass


def _summary_writer() -> type:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        from tensorboardX import SummaryWriter
    return SummaryWriter


class TensorBoardSink:
    def __init__(self, log_dir: Path) -> None:
        self._writer = _summary_writer()(log_dir=str(log_dir))

    def log(self, metrics: dict[str, float], step: int) -> None:
        for key, value in _finite(metrics).items():
            self._writer.add_scalar(key, value, step)
        self._writer.flush()

    def log_generations(self, rows: list[dict[str, Any]], step: int) -> None:
        """As verl: one markdown text per validation under `val/generations`, a section per sample."""
        text = "".join(
            f"### Sample {i + 1}\n" + "".join(f"**{k}:** {v}\n\n" for k, v in row.items()) + "---\n\n"
            for i, row in enumerate(rows)
        )
        self._writer.add_text("val/generations", text, step)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


class MlflowSink:
    """Without MLFLOW_TRACKING_URI the runs go to `<out_dir>/mlflow.db` and their artifacts to `<out_dir>/mlartifacts`:
    MLflow's own defaults lie in the working directory, which on a Ray worker is a temporary session folder, and
    MLflow 3 refuses a plain `mlruns/` folder."""

    def __init__(self, out_dir: Path, experiment: str, run_name: str, params: dict[str, Any]) -> None:
        import mlflow

        self._mlflow = mlflow
        if not os.environ.get("MLFLOW_TRACKING_URI"):
            out_dir.mkdir(parents=True, exist_ok=True)
            mlflow.set_tracking_uri(f"sqlite:///{(out_dir / 'mlflow.db').resolve()}")
            if mlflow.get_experiment_by_name(experiment) is None:  # artifacts beside it, not in ./mlruns
                mlflow.create_experiment(experiment, artifact_location=(out_dir / "mlartifacts").resolve().as_uri())
        mlflow.set_experiment(experiment)
        mlflow.start_run(run_name=run_name)
        mlflow.log_params({k: str(v)[:250] for k, v in params.items()})

    def log(self, metrics: dict[str, float], step: int) -> None:
        # MLflow metric names may not contain '@' and friends; '/' is allowed
        self._mlflow.log_metrics(_finite(metrics), step=step)

    def log_generations(self, rows: list[dict[str, Any]], step: int) -> None:
        """As verl: a JSON artifact per validation, one object per sample."""
        self._mlflow.log_text(
            json.dumps([{"step": step, **row} for row in rows], indent=1), f"val_generations/val_step{step}.json"
        )

    def close(self) -> None:
        self._mlflow.end_run()


class WandbSink:
    """A W&B run named as verl names it (trainer.project_name, trainer.experiment_name) with the run's config, kept
    under `<out_dir>/wandb` unless WANDB_DIR says otherwise."""

    def __init__(self, out_dir: Path, project: str, experiment: str, config: dict[str, Any]) -> None:
        import wandb

        self._run = wandb.init(
            project=project,
            name=experiment,
            config=config,
            mode=wandb_mode(),
            dir=None if os.environ.get("WANDB_DIR") else str(out_dir),
        )

    def log(self, metrics: dict[str, float], step: int) -> None:
        self._run.log(_finite(metrics), step=step)

    def log_generations(self, rows: list[dict[str, Any]], step: int) -> None:
        """As verl: a table under `val/generations`, a row per sample."""
        import wandb

        columns = ["step", *rows[0]]
        self._run.log(
            {"val/generations": wandb.Table(columns=columns, data=[[step, *row.values()] for row in rows])}, step=step
        )

    def close(self) -> None:
        self._run.finish()


def wandb_mode() -> str:
    """WANDB_MODE when the user set it; otherwise online only with an API key at hand, since an online run without
    one stops to ask for a login (or fails on a machine without network), and offline runs can be synced later."""
    if os.environ.get("WANDB_MODE"):
        return os.environ["WANDB_MODE"]
    return "online" if os.environ.get("WANDB_API_KEY") or _netrc_has_wandb_key() else "offline"


def _netrc_has_wandb_key() -> bool:
    """`wandb login` keeps the key in the netrc file ($NETRC or ~/.netrc) under the API host."""
    host = urlparse(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai").hostname
    try:
        return netrc.netrc(os.environ.get("NETRC")).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


# the loggers that need an optional package: what they import, and the package to install
_OPTIONAL: dict[str, tuple[Callable[[], Any], str]] = {
    "tensorboard": (_summary_writer, "tensorboard"),
    "mlflow": (lambda: __import__("mlflow"), "mlflow"),
    "wandb": (lambda: __import__("wandb"), "wandb"),
}


def check_loggers(loggers: list[str]) -> None:
    """Pre-flight on the driver: every name in `trainer.logger` is known and its package imports, so a typo or a
    missing package fails before any Ray worker starts rather than in rank 0 after the model is loaded."""
    for name in loggers:
        if name not in Tracking.KNOWN:
            raise ConfigError(f"trainer.logger: unknown logger {name!r}; known: {', '.join(Tracking.KNOWN)}")
        if name in _OPTIONAL:
            load, package = _OPTIONAL[name]
            try:
                load()
            except ImportError as exc:
                raise ConfigError(
                    f"trainer.logger: {name!r} needs the {package} package, which is not installed: "
                    f"pip install 'rayrl[loggers]' (or pip install {package})"
                ) from exc


class Tracking:
    """Fans metrics out to the sinks named in `trainer.logger`; unknown names and missing packages are errors."""

    KNOWN = ("console", "jsonl", "tensorboard", "mlflow", "wandb", "console_samples")

    def __init__(
        self,
        loggers: list[str],
        out_dir: Path,
        total_steps: int,
        start_step: int,
        project: str,
        experiment: str,
        config: Optional[dict[str, Any]] = None,
        val_only: bool = False,
    ) -> None:
        """`config`: the run's resolved config as a nested dict, attached to the MLflow (flattened) and W&B runs.
        `val_only`: a validation-only run (`trainer.val_only`), whose JSONL record is val_only.jsonl."""
        check_loggers(loggers)
        config = config or {}
        self.sinks: list[MetricSink] = []
        for name in loggers:
            if name == "console":
                self.sinks.append(ProgressWriter(out_dir / PROGRESS_FILE, total_steps, start_step))
            elif name == "jsonl":
                self.sinks.append(JsonlSink(record_path(out_dir, val_only), start_step, keep_all=val_only))
            elif name == "console_samples":
                self.sinks.append(ConsoleSamplesSink())
            elif name == "tensorboard":
                self.sinks.append(TensorBoardSink(out_dir / "tensorboard"))
            elif name == "mlflow":
                self.sinks.append(MlflowSink(out_dir, project, experiment, _flatten(config)))
            elif name == "wandb":
                self.sinks.append(WandbSink(out_dir, project, experiment, config))

    def log(self, metrics: dict[str, float], step: int) -> None:
        for sink in self.sinks:
            sink.log(metrics, step)

    def log_generations(self, rows: list[dict[str, Any]], step: int) -> None:
        """Validation samples (`trainer.log_val_generations`) to the loggers that keep them: TensorBoard, MLflow, W&B
        (console and JSONL do not, as in verl)."""
        for sink in self.sinks:
            if hasattr(sink, "log_generations"):
                sink.log_generations(rows, step)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()


def read_jsonl(path: Path) -> list[dict[str, float]]:
    """The records of a JSONL record (metrics.jsonl, val_only.jsonl), in the order they were written."""
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def read_metrics(path: Path) -> list[dict[str, float]]:
    """The records of a metrics.jsonl file, in step order."""
    return sorted(read_jsonl(path), key=lambda r: r.get("step", 0))


def _flatten(tree: dict, prefix: str = "") -> dict[str, Any]:
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out |= _flatten(value, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = value
    return out


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
