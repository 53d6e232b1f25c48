"""Paths under `ray job submit`: a check, before any Ray worker starts, that every file and folder the run reads is
there.

`ray job submit --working-dir .` uploads the working directory without its git-ignored files, and `models/`,
`data/` and `outputs/` are git-ignored, so the quickstart's relative paths point at nothing in the job's copy. The
job then stops at once with the key, the path and the fix (an absolute path every node can read), instead of a
file-not-found from deep inside a worker.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Iterator

from app.config.errors import ConfigError
from app.config.schema import TrainerRunConfig

# set by Ray's job supervisor in the environment of a job's driver (ray._private.runtime_env.constants)
JOB_CONFIG_ENV = "RAY_JOB_CONFIG_JSON_ENV_VAR"

log = logging.getLogger(__name__)


def in_ray_job() -> bool:
    return JOB_CONFIG_ENV in os.environ


def read_paths(cfg: TrainerRunConfig) -> Iterator[tuple[str, str]]:
    """(key, path) of every file or folder the run reads that the config names."""
    for key, files in (("data.train_files", cfg.data.train_files), ("data.val_files", cfg.data.val_files)):
        for path in [files] if isinstance(files, str) else files:
            if path:
                yield key, path
    for key, path in (
        ("actor_rollout_ref.model.path", cfg.actor_rollout_ref.model.path),
        ("actor_rollout_ref.model.tokenizer_path", cfg.actor_rollout_ref.model.tokenizer_path),
        ("critic.model.path", cfg.critic.model.path),
        ("reward_model.model.path", cfg.reward_model.model.path),
        ("custom_reward_function.path", cfg.custom_reward_function.path),
    ):
        if path:
            yield key, path


def check_job_paths(cfg: TrainerRunConfig) -> None:
    """Inside a Ray job: a relative path that the job's working directory lacks is a ConfigError naming the key and
    saying what to give instead; a relative output folder is a warning (it would land in the job's copy of the
    working directory). Outside a job nothing is checked here (the data check names missing files)."""
    if not in_ray_job():
        return
    missing = [
        (key, path)
        for key, path in read_paths(cfg)
        if not Path(path).expanduser().is_absolute() and not Path(path).exists()
    ]
    if missing:
        listed = "; ".join(f"{key}={path}" for key, path in missing)
        example = " ".join(f"{key}=$PWD/{path}" for key, path in missing)
        raise ConfigError(
            f"{listed}: not in this Ray job's working directory ({os.getcwd()}). `ray job submit --working-dir` "
            "uploads the directory without its git-ignored files (models/, data/, outputs/); give absolute paths "
            f"that every node of the cluster can read, e.g. {example}"
        )
    out = cfg.trainer.default_local_dir
    if out and not Path(out).expanduser().is_absolute():
        log.warning(
            "trainer.default_local_dir=%s is relative: the run's outputs go to the job's copy of the working "
            "directory (%s); give an absolute path to keep them",
            out,
            os.getcwd(),
        )
