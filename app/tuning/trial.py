"""One sweep trial: its isolated trainer config, and the Tune function trainable that runs it.

How a trial runs its training job: `run_trial` (a Tune function trainable) builds the trial's `TrainerRunConfig` and
calls `app.trainer.launch.train` on it in a background thread: the very code path of `python -m app.train` (Ray
Train `TorchTrainer`, export), which Ray 2.60 supports inside a Tune trial (Train V2 starts its controller from the
trial's actor; the controller and its workers are owned by that actor and end with it). The one difference: the
trial deploys its Serve rollout application itself, without an HTTP route, so trials can run side by side.

Per-step metrics reach Tune from the run's own record, `<default_local_dir>/metrics.jsonl`, which rank 0 appends once
per step: the trial thread follows the file (waking every second or when training ends) and calls `tune.report` for
each new row. Chosen over Ray Train's `TuneReportCallback` because (1) the job runs exactly as `launch.train` builds
it, with no Tune-specific branch in the trainer; (2) Tune sees the same rows, with their `step` key, that plots and
the results table read; (3) a resumed trial (its trainer resumes from its own checkpoint) replays a consistent file.
Two rules make the reports safe for schedulers and searchers:
  * Every report carries the sweep metric: the most recent validation value (NaN before the first validation), since
    validation runs only every `trainer.test_freq` steps and Tune requires the metric in each result.
  * The row of the last step is reported only after `train` has returned (model exported), so a scheduler decision
    taken on it can never cut the export short.
The trial's config: the driver builds the base `TrainerRunConfig` once from the Hydra tree (typed, paths absolute,
not yet validated: validation fills derived values, which must follow the trial's parameters) and every trial copies
it, sets its parameters and isolation keys on the copy, and validates that (`build_trial_config`). A base key whose
value is a plain `${other.key}` interpolation follows a searched `other.key`, as it would in the tree.
Isolation: experiment_name `<sweep>-<trial_id>` (so the Serve application `rollout-<project>-<sweep>-<trial_id>` is
the trial's own), output folder `<sweep_dir>/trials/<trial_id>`, and a seed recorded in `trial.json` and every report.
A trial that Tune stops early (ASHA) has its actor killed; `RolloutAppCleanup` deletes its Serve application from the
driver, since Serve applications outlive the actor that deployed them.
"""

from __future__ import annotations

import copy
import json
import math
import re
import threading
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from app.config.errors import ConfigError
from app.config.loader import to_container
from app.config.schema import TrainerConfig, TrainerRunConfig
from app.config.typed import build_typed
from app.config.validate import validate

POLL_S = 1.0  # how often a trial looks for new metrics rows while its job runs
_INTERPOLATION = re.compile(r"^\$\{([A-Za-z0-9_.]+)\}$")


@dataclass(frozen=True)
class TrialContext:
    """What every trial of one sweep shares; passed to the trainable with `tune.with_parameters`."""

    sweep_name: str
    sweep_dir: str  # absolute
    project_name: str
    base: dict  # the base trainer config tree (Hydra-composed, interpolations kept, paths absolute): for best.yaml
    base_cfg: TrainerRunConfig  # `base` typed once on the driver, not validated (`built_config`): trials copy it
    metric: str
    total_steps: int
    trial_seed: str = "per_trial"  # per_trial | fixed
    train_fn: Optional[Callable[[TrainerRunConfig], Any]] = None  # None: app.trainer.launch.train (via _launch_train)


# ------------------------------------------------------------------------------------------------ trial config
def trial_experiment_name(sweep_name: str, trial_id: str) -> str:
    return f"{sweep_name}-{trial_id}"


def trial_dir(ctx: TrialContext, trial_id: str) -> Path:
    return Path(ctx.sweep_dir) / "trials" / trial_id


def trial_app_name(ctx: TrialContext, trial_id: str) -> str:
    """The trial's Serve application name, exactly as `launch.train` will derive it."""
    from app.trainer.launch import rollout_app_name

    cfg = TrainerRunConfig(
        trainer=TrainerConfig(
            project_name=ctx.project_name, experiment_name=trial_experiment_name(ctx.sweep_name, trial_id)
        )
    )
    return rollout_app_name(cfg)


def seed_for_trial(base_seed: int, trial_id: str, policy: str) -> int:
    """per_trial: base + a stable number from the trial id (same trial, same seed on resume); fixed: base."""
    if policy == "fixed":
        return int(base_seed)
    return (int(base_seed) + zlib.crc32(trial_id.encode()) % 100_000) % (2**31 - 1)


def built_config(tree: dict) -> TrainerRunConfig:
    """The trainer config of a Hydra tree, typed but not validated: derived values are not filled yet."""
    from omegaconf import OmegaConf

    return build_typed(TrainerRunConfig, to_container(OmegaConf.create(tree)))


def validated(built: TrainerRunConfig) -> TrainerRunConfig:
    """A validated copy of a `built_config` (derived values filled); ConfigError naming the key otherwise."""
    cfg = copy.deepcopy(built)
    validate(cfg)
    return cfg


def trial_values(ctx: TrialContext, params: dict[str, Any], trial_id: str) -> dict[str, Any]:
    """Every dotted key a trial sets on the base: its parameters, then its isolation (seed, experiment name, output
    folder, step count, the jsonl logger its reports are read from)."""
    trainer = ctx.base_cfg.trainer
    values = dict(params)
    if "trainer.seed" not in params:
        values["trainer.seed"] = seed_for_trial(trainer.seed, trial_id, ctx.trial_seed)
    values["trainer.experiment_name"] = trial_experiment_name(ctx.sweep_name, trial_id)
    values["trainer.default_local_dir"] = str(trial_dir(ctx, trial_id))
    values["trainer.total_training_steps"] = ctx.total_steps
    loggers = trainer.logger or ["console"]
    loggers = [loggers] if isinstance(loggers, str) else list(loggers)  # verl's `trainer.logger=console` form
    values["trainer.logger"] = loggers if "jsonl" in loggers else [*loggers, "jsonl"]
    return values


def trial_config_tree(ctx: TrialContext, params: dict[str, Any], trial_id: str) -> dict:
    """The base tree with the trial's values set (still unresolved, as Hydra would give it): what best.yaml holds."""
    tree = copy.deepcopy(ctx.base)
    for key, value in trial_values(ctx, params, trial_id).items():
        set_key(tree, key, value)
    return tree


def build_trial_config(ctx: TrialContext, params: dict[str, Any], trial_id: str) -> TrainerRunConfig:
    """The trial's validated config: a copy of the driver's base with the trial's values set, validated."""
    values = trial_values(ctx, params, trial_id)
    for key, source in interpolated_keys(ctx.base).items():  # a key that is `${source}` in the tree follows it
        if key not in values and source in params:
            values[key] = params[source]
    cfg = copy.deepcopy(ctx.base_cfg)
    for key, value in values.items():
        set_value(cfg, key, value)
    validate(cfg)
    from app.trainer.launch import rollout_app_name

    if trial_id not in rollout_app_name(cfg):
        raise ConfigError(
            f"trainer.project_name={cfg.trainer.project_name!r} and the sweep name are too long: the "
            f"Serve application name {rollout_app_name(cfg)!r} lost the trial id {trial_id!r}"
        )
    return cfg


def set_value(cfg: Any, dotted: str, value: Any) -> None:
    """Set a dotted key of a typed config, converted and checked as the loader would (ConfigError naming it)."""
    *parents, leaf = dotted.split(".")
    section = cfg
    for part in parents:
        section = getattr(section, part)
    checked = build_typed(type(section), {leaf: value}, ".".join(parents))
    setattr(section, leaf, getattr(checked, leaf))


def interpolated_keys(tree: dict, prefix: str = "") -> dict[str, str]:
    """{key: source} for each value of `tree` that is exactly `${source}`."""
    out: dict[str, str] = {}
    for name, value in tree.items():
        if isinstance(value, dict):
            out |= interpolated_keys(value, f"{prefix}{name}.")
        elif isinstance(value, str) and (match := _INTERPOLATION.match(value)):
            out[f"{prefix}{name}"] = match.group(1)
    return out


def set_key(tree: dict, dotted: str, value: Any) -> None:
    node = tree
    *parents, leaf = dotted.split(".")
    for part in parents:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[leaf] = value


def get_key(tree: dict, dotted: str, default: Any = None) -> Any:
    node: Any = tree
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


# ------------------------------------------------------------------------------------------------ metrics relay
class JsonlFollower:
    """New complete lines of a growing JSONL file, as dicts; a line still being written waits for the next read."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._offset = 0

    def new_rows(self) -> list[dict]:
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return []
        if size < self._offset:  # rewritten (a resumed trainer drops rows past its checkpoint)
            self._offset = 0
        with self.path.open("rb") as f:
            f.seek(self._offset)
            data = f.read()
        complete = data[: data.rfind(b"\n") + 1]
        self._offset += len(complete)
        return [json.loads(line) for line in complete.splitlines() if line.strip()]


class TuneRows:
    """Turns metrics.jsonl rows into Tune reports: one per new step, carrying the latest metric value.

    Rows whose step is not past the last one passed on are skipped (a re-logged step after a restart); rows at or past
    `total_steps` are held until `finish()` so they are reported only once training has returned.
    """

    def __init__(self, metric: str, total_steps: int, extra: Optional[dict[str, Any]] = None) -> None:
        self.metric = metric
        self.total_steps = total_steps
        self.extra = dict(extra or {})
        self.latest = math.nan
        self._last_step: Optional[int] = None
        self._held: list[dict] = []

    def add(self, rows: list[dict]) -> list[dict]:
        ready = []
        for row in rows:
            step = int(row.get("step", 0))
            if self._last_step is not None and step <= self._last_step:
                continue
            self._last_step = step
            if self.metric in row:
                self.latest = float(row[self.metric])
            report = {**row, self.metric: self.latest, **self.extra}
            (self._held if step >= self.total_steps else ready).append(report)
        return ready

    def finish(self) -> list[dict]:
        held, self._held = self._held, []
        return held


# ------------------------------------------------------------------------------------------------ the trainable
def run_trial(params: dict[str, Any], ctx: TrialContext) -> None:
    """Tune function trainable: run one training job for `params` and report its per-step metrics."""
    from ray import tune

    trial_id = tune.get_context().get_trial_id()
    cfg = build_trial_config(ctx, params, trial_id)
    out_dir = Path(cfg.trainer.default_local_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    record = {
        "trial_id": trial_id,
        "params": params,
        "seed": cfg.trainer.seed,
        "experiment_name": cfg.trainer.experiment_name,
        "rollout_app": trial_app_name(ctx, trial_id),
    }
    (out_dir / "trial.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    metrics_path = out_dir / "metrics.jsonl"
    _drop_rows_past_resume(cfg, metrics_path)

    job = _JobThread(ctx.train_fn or _launch_train, cfg)
    rows = TuneRows(ctx.metric, ctx.total_steps, extra={"seed": cfg.trainer.seed})
    follower = JsonlFollower(metrics_path)
    job.start()
    while job.is_alive():
        job.join(timeout=POLL_S)
        for report in rows.add(follower.new_rows()):
            tune.report(report)
    for report in rows.add(follower.new_rows()) + rows.finish():
        tune.report(report)
    if job.error is not None:
        raise job.error


def _launch_train(cfg: TrainerRunConfig) -> dict[str, float]:
    """`launch.train` with the trial's rollout application served without an HTTP route: only one application can
    hold a route, so concurrent trials would collide ("Prefix / is being used"), and sweeps need no HTTP."""
    from app.trainer.launch import train

    return train(cfg, route_prefix=None)


class _JobThread(threading.Thread):
    def __init__(self, fn: Callable[[TrainerRunConfig], Any], cfg: TrainerRunConfig) -> None:
        super().__init__(name="sweep-trial-job", daemon=True)
        self._fn, self._cfg = fn, cfg
        self.error: Optional[BaseException] = None

    def run(self) -> None:
        try:
            self._fn(self._cfg)
        except BaseException as exc:  # re-raised in the trial thread so Tune marks the trial errored
            self.error = exc


def _drop_rows_past_resume(cfg: TrainerRunConfig, metrics_path: Path) -> None:
    """Make the file what the trainer will continue: rows up to its resume checkpoint, or nothing on a fresh start.

    Done before the job starts so the follower never reads rows the trainer is about to drop.
    """
    if not metrics_path.exists():
        return
    from app.trainer import checkpoints
    from app.trainer.tracking import JsonlSink

    resume = checkpoints.find_resume_dir(Path(cfg.trainer.default_local_dir), cfg.trainer.resume_mode)
    if resume is None:
        metrics_path.unlink()
        return
    JsonlSink(metrics_path, checkpoints.read_state(resume)["global_step"]).close()
