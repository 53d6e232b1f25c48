"""The filesystem of `trainer.default_hdfs_dir` opens and its folder can be created, before Ray starts: a scheme
pyarrow lacks (HDFS without libhdfs) or a folder it cannot create would otherwise stop the run at its first
checkpoint."""

from __future__ import annotations

from app.config.schema import TrainerRunConfig
from app.preflight.errors import PreflightError
from app.trainer.checkpoint_copy import prepare_remote


def check_checkpoint_copy(cfg: TrainerRunConfig) -> None:
    uri = cfg.trainer.default_hdfs_dir
    if not uri:
        return
    try:
        prepare_remote(uri)
    except ValueError as err:
        raise PreflightError(
            f"{err}; give a folder or URI it can write, or null to keep local checkpoints only"
        ) from None
