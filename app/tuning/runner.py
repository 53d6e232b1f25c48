"""Run (or resume) a sweep with Ray Tune and write its results. `app.sweep` is the command line in front of this.

Sweep folder (`output_dir`, absolute once started):
    sweep.json            the search that was started (a resume must match it)
    tune/                 Ray Tune's experiment state; `Tuner.restore` continues from it
    trials/<trial_id>/    each trial's `trainer.default_local_dir`: metrics.jsonl, checkpoints, hf_model/, trial.json
    results.csv/.md, best.yaml, best_overrides.txt   (see app.tuning.results)
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from app.config.errors import ConfigError
from app.config.schema import TrainerRunConfig
from app.tuning import results as results_mod
from app.tuning.resources import TRIAL_ACTOR_CPUS, max_concurrent_trials, trial_needs
from app.tuning.search import param_space, scheduler, search_algorithm
from app.tuning.spec import SweepSpec
from app.tuning.trial import (
    TrialContext,
    build_trial_config,
    built_config,
    run_trial,
    set_value,
    trial_app_name,
    validated,
)

TUNE_DIR = "tune"
RESOURCE_KEYS = (
    "trainer.num_workers",
    "trainer.cpus_per_worker",
    "actor_rollout_ref.rollout.replicas",
    "actor_rollout_ref.rollout.cpus_per_replica",
)


@dataclass
class SweepOutcome:
    sweep_dir: Path
    rows: list  # app.tuning.results.TrialRow, best first
    table_markdown: str
    best_config: Optional[Path]  # None when no trial produced a finite metric
    max_concurrent_trials: int


def make_context(
    spec: SweepSpec,
    base_tree: dict,
    total_steps: int,
    train_fn: Optional[Callable[[TrainerRunConfig], Any]] = None,
    base_cfg: Optional[TrainerRunConfig] = None,
) -> TrialContext:
    """`base_cfg`: `base_tree` as `app.tuning.trial.built_config` types it, when the caller has it already."""
    base_cfg = built_config(base_tree) if base_cfg is None else base_cfg
    return TrialContext(
        sweep_name=spec.name,
        sweep_dir=str(Path(spec.output_dir).resolve()),
        project_name=base_cfg.trainer.project_name,
        base=copy.deepcopy(base_tree),
        base_cfg=base_cfg,
        metric=spec.metric,
        total_steps=int(total_steps),
        trial_seed=spec.trial_seed,
        train_fn=train_fn,
    )


def check_param_values(spec: SweepSpec, ctx: TrialContext) -> None:
    """Every listed value (and both ends of every range) gives a valid trainer config, checked before Tune starts."""
    if ctx.base_cfg.trainer.val_only:
        raise ConfigError("trainer.val_only=true in a sweep's base config: its trials would train nothing to compare")
    if spec.metric.startswith("val") and not ctx.base_cfg.data.val_files:
        raise ConfigError(
            f"sweep search.metric={spec.metric!r} is a validation metric but the base config has no data.val_files"
        )
    for p in spec.params:
        for value in p.values:
            try:
                build_trial_config(ctx, {p.key: value}, "check")
            except ConfigError as exc:
                raise ConfigError(f"sweep params.{p.key}={value!r}: {exc}") from exc


def run_sweep(
    spec: SweepSpec,
    base_tree: dict,
    *,
    total_steps: int,
    train_fn: Optional[Callable[[TrainerRunConfig], Any]] = None,
    verbose: int = 1,
    base_cfg: Optional[TrainerRunConfig] = None,
) -> SweepOutcome:
    """Start or resume the sweep, wait for every trial, write the results table and best config.

    `base_tree`: the base trainer config as Hydra composed it (plain dict, interpolations kept, paths absolute);
    `base_cfg`: the same typed by `app.tuning.trial.built_config`, when the caller has it (else typed here).
    `train_fn` replaces `app.trainer.launch.train` in the trials (tests use a stand-in).
    """
    import ray
    from ray import tune

    from app.trainer.launch import ensure_ray
    from app.trainer.tracking import check_loggers

    ctx = make_context(spec, base_tree, total_steps, train_fn, base_cfg)
    check_param_values(spec, ctx)
    sweep_dir = Path(ctx.sweep_dir)
    restoring = _should_restore(spec, sweep_dir)
    sched = scheduler(spec, total_steps)
    search_algorithm(spec)  # a bad method (e.g. optuna missing) fails here, before Ray starts

    base_cfg = validated(ctx.base_cfg)
    check_loggers(base_cfg.trainer.logger)
    ensure_ray(base_cfg)
    cluster = ray.cluster_resources()
    needs = trial_needs(_worst_case(spec, ctx))
    concurrency = max_concurrent_trials(cluster, needs, spec.max_concurrent_trials)
    print(
        f"sweep {spec.name}: each trial needs {needs.explain}; the cluster has {cluster.get('CPU', 0):g} CPUs "
        f"-> up to {concurrency} trial(s) at once",
        flush=True,
    )
    _start_serve(base_cfg)

    # The trial's own actor only waits on its job: a token CPU share, so the job's workers and replicas get the rest.
    trainable = tune.with_resources(tune.with_parameters(run_trial, ctx=ctx), {"cpu": TRIAL_ACTOR_CPUS})
    tune_dir = sweep_dir / TUNE_DIR
    if restoring:
        print(f"sweep {spec.name}: resuming from {tune_dir}", flush=True)
        tuner = tune.Tuner.restore(str(tune_dir), trainable, resume_unfinished=True, resume_errored=True)
    else:
        sweep_dir.mkdir(parents=True, exist_ok=True)
        (sweep_dir / "sweep.json").write_text(json.dumps(spec.search_signature(), indent=2, sort_keys=True) + "\n")
        tuner = tune.Tuner(
            trainable,
            param_space=param_space(spec),
            tune_config=tune.TuneConfig(
                metric=spec.metric,
                mode=spec.mode,
                scheduler=sched,
                search_alg=search_algorithm(spec, concurrency),
                num_samples=spec.num_samples,
                max_concurrent_trials=concurrency if spec.method == "optuna" else None,
                trial_name_creator=_trial_name,
                trial_dirname_creator=_trial_name,
            ),
            run_config=tune.RunConfig(
                name=TUNE_DIR,
                storage_path=str(sweep_dir),
                verbose=verbose,
                callbacks=[RolloutAppCleanup(ctx)],
                failure_config=tune.FailureConfig(max_failures=0),
            ),
        )
    try:
        grid = tuner.fit()
    finally:
        _delete_rollout_apps(ctx)

    rows = results_mod.sort_rows(results_mod.rows_from_results(grid, ctx, total_steps, spec.mode), spec.mode)
    text = results_mod.write_table(sweep_dir, rows, spec.metric)
    best = next((r for r in rows if r.status != "error" and math.isfinite(r.value)), None)
    best_path = results_mod.write_best(ctx, best, spec.base_config, list(spec.base_overrides)) if best else None
    return SweepOutcome(
        sweep_dir=sweep_dir, rows=rows, table_markdown=text, best_config=best_path, max_concurrent_trials=concurrency
    )


def _start_serve(cfg: TrainerRunConfig) -> None:
    """Start Serve from the driver, outside any trial.

    Tune places everything a trial's actor creates into the trial's placement group (which holds a token CPU); the
    trials' rollout applications are fine there (the Serve controller creates their replicas), but the Serve
    controller itself would be created by the first trial that deploys and could not be placed.
    """
    from serve.instance import start_serve

    start_serve(cfg.actor_rollout_ref.rollout)


def _should_restore(spec: SweepSpec, sweep_dir: Path) -> bool:
    from ray import tune

    tune_dir = sweep_dir / TUNE_DIR
    exists = tune_dir.is_dir() and tune.Tuner.can_restore(str(tune_dir))
    if spec.resume is True and not exists:
        raise ConfigError(f"sweep resume=true but {sweep_dir} holds no sweep to resume")
    if spec.resume is False and exists:
        raise ConfigError(
            f"sweep resume=false but {sweep_dir} already holds a sweep: pass resume=true (or auto) "
            "to continue it, or choose another output_dir / name"
        )
    if exists:
        started = json.loads((sweep_dir / "sweep.json").read_text()) if (sweep_dir / "sweep.json").is_file() else None
        if started is not None and started != json.loads(json.dumps(spec.search_signature())):
            raise ConfigError(
                f"sweep in {sweep_dir} was started with a different search ({sweep_dir / 'sweep.json'}); "
                "resume it with the same params/search/base, or choose another output_dir / name"
            )
    return exists


def _worst_case(spec: SweepSpec, ctx: TrialContext) -> TrainerRunConfig:
    """The base config with every searched resource key at its largest listed value."""
    cfg = copy.deepcopy(ctx.base_cfg)
    for p in spec.params:
        if p.key in RESOURCE_KEYS:
            set_value(cfg, p.key, max(p.values))
    return validated(cfg)


def _trial_name(trial) -> str:
    return trial.trial_id


# ------------------------------------------------------------------------------------------------ Serve cleanup
def _delete_rollout_apps(ctx: TrialContext, trial_id: Optional[str] = None) -> list[str]:
    """Delete the trial's Serve application (trial_id None: every trial's of this sweep) if it still runs."""
    import ray

    if not ray.is_initialized():
        return []
    from ray import serve

    try:
        running = list(serve.status().applications)
    except Exception:  # Serve never started on this cluster
        return []
    if trial_id is not None:
        ours = {trial_app_name(ctx, trial_id)}
    else:  # every trial that started has made its folder
        trials = Path(ctx.sweep_dir) / "trials"
        ours = {trial_app_name(ctx, d.name) for d in trials.iterdir()} if trials.is_dir() else set()
    names = [a for a in running if a in ours]
    for name in names:
        serve.delete(name)
    return names


try:
    from ray.tune import Callback as _TuneCallback
except ImportError:  # pragma: no cover - ray[tune] is a dependency
    _TuneCallback = object


class RolloutAppCleanup(_TuneCallback):
    """Driver-side: when a trial ends for any reason, delete its Serve application.

    A trial that finishes deletes its own (launch.train's `finally`), but one that ASHA stops or that crashes has its
    actor killed, and Serve applications outlive the actor that deployed them, holding their replicas' CPUs.
    """

    def __init__(self, ctx: TrialContext) -> None:
        self.ctx = ctx

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info) -> None:
        _delete_rollout_apps(self.ctx, trial.trial_id)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info) -> None:
        _delete_rollout_apps(self.ctx, trial.trial_id)
