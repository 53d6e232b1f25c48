"""`python -m app.train [--config-name grpo_trainer] key=value ...`: one RL training run on Ray.

The Hydra config (configs/, verl key names) is validated into the typed schema and the data files are read once, by a
child of the driver, so a wrong key or a bad row fails here, with its name, before any Ray worker starts.
Works unchanged under `ray job submit --working-dir . -- python -m app.train ...`.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Optional

import hydra
from omegaconf import DictConfig

import app.config  # noqa: F401  registers the schema's defaults, the base of configs/ppo_trainer.yaml
from app.dry_run import DryRun, run_dry, split_argv

# `--dry-run` and its cluster flags, taken off the command line before Hydra reads it
DRY_RUN: Optional[DryRun] = None


def run(cfg: DictConfig, preflight_skip: tuple[str, ...] = ()) -> int:
    """The whole command on a composed config: 0, 2 for bad input found before Ray starts (one line naming it), 1 for
    a run that failed later (the worker's own error as the last line). `preflight_skip`: app.preflight checks not to
    run (by name)."""
    from app.config import ConfigError, load_config
    from app.data import DataError
    from app.failure_report import print_error, report_run_failure
    from app.trainer.checkpoints import CheckpointError

    try:
        run_cfg = load_config(cfg)
        from app.job_paths import check_job_paths

        check_job_paths(run_cfg)  # under `ray job submit`: paths the job's working directory lacks
        from app.trainer.tracking import check_loggers

        check_loggers(run_cfg.trainer.logger)  # rank 0 builds the loggers: a missing package would fail there
        from app.preflight import run_preflight

        n_train, n_val = run_preflight(run_cfg, skip=preflight_skip)["data"]  # the data read as the workers will
        from app.trainer.checkpoints import check_checkpoint, find_resume_dir

        resume = find_resume_dir(Path(run_cfg.trainer.default_local_dir), run_cfg.trainer.resume_mode)
        if resume is not None:
            check_checkpoint(resume)
        print(f"data: {n_train} training prompts, {n_val} validation prompts", flush=True)
        if DRY_RUN is not None:
            print(run_dry(run_cfg, DRY_RUN), flush=True)
            return 0
    except (ConfigError, DataError, CheckpointError, FileNotFoundError) as exc:
        return print_error(exc)
    import ray

    from app.trainer.launch import train, validation_history

    connects_ray = not ray.is_initialized()  # False where a caller (a test, a pipeline stage) shares its cluster
    try:
        train(run_cfg)
    except ConfigError as exc:  # joining the cluster: its address or its resources
        return print_error(exc)
    except Exception as exc:  # noqa: BLE001  the run failed in a worker: its own message, not Ray's wrappers
        if connects_ray:
            # Ray Train's and Serve's actors log their own end (tracebacks on a loaded box) to this console until
            # the driver disconnects: disconnect first, so the worker's error is the last line
            ray.shutdown()
        return report_run_failure(exc, run_cfg.trainer.max_failures)
    out_dir = Path(run_cfg.trainer.default_local_dir).resolve()
    val_only = run_cfg.trainer.val_only
    for line in validation_summary(validation_history(out_dir, val_only)):
        print(line)
    if not val_only:  # a validation-only run writes no model
        print(f"model: {out_dir / 'hf_model'}")
    return 0


def validation_summary(history: list[tuple[int, dict[str, float]]]) -> list[str]:
    """The console's last lines: the reward and every `val-aux/` mean at the first and the last validation, or at the
    only one (a validation-only run)."""
    if not history:
        return []
    (first_step, first), (last_step, last) = history[0], history[-1]

    def reading(key: str, steps: bool = False) -> str:
        text = f"{first[key]:.3f}" + (f" at step {first_step}" if steps else "")
        if len(history) > 1:
            text += f" -> {last[key]:.3f}" + (f" at step {last_step}" if steps else "")
        return text

    aux = sorted(k for k in first.keys() & last.keys() if k.startswith("val-aux/"))
    return [f"validation reward: {reading('val-core/reward/mean', steps=True)}"] + [
        f"  {key.removeprefix('val-aux/').removesuffix('/mean')}: {reading(key)}" for key in aux
    ]


def exit_on_sigterm() -> None:
    """`ray job stop` and `kill` send SIGTERM, which ends Python at once; raise SystemExit instead, so the finally
    blocks run (the trainer's workers stopped, a local Ray cluster shut down, or on a joined cluster the rollout
    application deleted) and
    nothing is left holding the CPUs or the HTTP port. Ctrl-C takes the same path as KeyboardInterrupt."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def main() -> None:
    """The command: the overrides' keys are checked against the schema first (a misspelt one names the nearest key),
    then Hydra composes the config."""
    from app.config.schema import TrainerRunConfig
    from app.failure_report import print_error
    from app.preflight import PreflightError
    from app.preflight.overrides import check_overrides, hydra_overrides

    try:
        check_overrides(hydra_overrides(sys.argv[1:]), TrainerRunConfig)
    except PreflightError as exc:
        sys.exit(print_error(exc))
    hydra_main()


@hydra.main(config_path="../configs", config_name="ppo_trainer", version_base=None)
def hydra_main(cfg: DictConfig) -> None:
    from app.logs import setup_logging

    setup_logging()
    exit_on_sigterm()
    code = run(cfg)
    if code:
        sys.exit(code)


if __name__ == "__main__":
    DRY_RUN, sys.argv[1:] = split_argv(sys.argv[1:])
    main()
