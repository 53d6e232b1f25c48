"""`python -m app.train [--config-name grpo_trainer] key=value ...`: one RL training run on Ray.

The Hydra config (configs/, verl key names) is validated into the typed schema and the data files are read once, by a
child of the driver, so a wrong key or a bad row fails here, with its name, before any Ray worker starts.
Works unchanged under `ray job submit --working-dir . -- python -m app.train ...`.
"""
from __future__ import annotations

import signal
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

import app.config  # noqa: F401  registers the schema's defaults, the base of configs/ppo_trainer.yaml


def run(cfg: DictConfig) -> int:
    from app.config import ConfigError, load_config
    from app.data import DataError
    from app.trainer.checkpoints import CheckpointError

    try:
        run_cfg = load_config(cfg)
        from app.job_paths import check_job_paths

        check_job_paths(run_cfg)  # under `ray job submit`: paths the job's working directory lacks
        from app.trainer.tracking import check_loggers

        check_loggers(run_cfg.trainer.logger)  # rank 0 builds the loggers: a missing package would fail there
        from app.trainer.setup import check_data_apart

        n_train, n_val = check_data_apart(run_cfg)
        from app.trainer.checkpoints import check_checkpoint, find_resume_dir

        resume = find_resume_dir(Path(run_cfg.trainer.default_local_dir), run_cfg.trainer.resume_mode)
        if resume is not None:
            check_checkpoint(resume)
    except (ConfigError, DataError, CheckpointError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"data: {n_train} training prompts, {n_val} validation prompts", flush=True)
    from app.trainer.launch import train, validation_history

    train(run_cfg)
    history = validation_history(Path(run_cfg.trainer.default_local_dir).resolve())
    if history:
        (first_step, first), (last_step, last) = history[0], history[-1]
        print(f"validation reward: {first['val-core/reward/mean']:.3f} at step {first_step} -> "
              f"{last['val-core/reward/mean']:.3f} at step {last_step}")
        for key in sorted(k for k in first.keys() & last.keys() if k.startswith("val-aux/")):
            print(f"  {key.removeprefix('val-aux/').removesuffix('/mean')}: {first[key]:.3f} -> {last[key]:.3f}")
    print(f"model: {Path(run_cfg.trainer.default_local_dir).resolve() / 'hf_model'}")
    return 0


def exit_on_sigterm() -> None:
    """`ray job stop` and `kill` send SIGTERM, which ends Python at once; raise SystemExit instead, so the finally
    blocks run (the rollout application is deleted, the trainer's workers stopped, a local Ray cluster shut down) and
    nothing is left holding the CPUs or the HTTP port. Ctrl-C takes the same path as KeyboardInterrupt."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


@hydra.main(config_path="../configs", config_name="ppo_trainer", version_base=None)
def main(cfg: DictConfig) -> None:
    from app.logs import setup_logging

    setup_logging()
    exit_on_sigterm()
    code = run(cfg)
    if code:
        sys.exit(code)


if __name__ == "__main__":
    main()
