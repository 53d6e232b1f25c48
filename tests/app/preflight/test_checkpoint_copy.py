"""trainer.default_hdfs_dir before Ray starts: the copies' folder is created, or the run is refused naming the key."""

import pytest

from app.config.schema import TrainerRunConfig
from app.preflight.checkpoint_copy import check_checkpoint_copy
from app.preflight.errors import PreflightError


def _cfg(uri):
    cfg = TrainerRunConfig()
    cfg.trainer.default_hdfs_dir = uri
    return cfg


def test_the_folder_is_created_or_the_run_refused(tmp_path):
    folder = tmp_path / "copies" / "run"
    check_checkpoint_copy(_cfg(str(folder)))
    assert folder.is_dir()
    check_checkpoint_copy(_cfg(None))  # unset: nothing to check
    with pytest.raises(
        PreflightError, match=r"^trainer\.default_hdfs_dir='nosuch://b/c': pyarrow cannot open .*or null"
    ):
        check_checkpoint_copy(_cfg("nosuch://b/c"))
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(PreflightError, match=r"cannot create .*a_file/sub there"):
        check_checkpoint_copy(_cfg(str(tmp_path / "a_file" / "sub")))
