"""trainer.default_hdfs_dir: each complete checkpoint copied whole to another filesystem (here a local folder, given as
a path or a file:// URI, which pyarrow opens as it opens hdfs:// or s3://), the latest-step file written after it."""

import pytest

from app.trainer import checkpoints
from app.trainer.checkpoint_copy import copy_checkpoint, open_remote
from app.trainer.checkpoints import CheckpointError


def _published(root, step, payload=b"shard"):
    staging = checkpoints.staging_dir(root, step, "t")
    (staging / "actor").mkdir(parents=True)
    (staging / "actor" / "model.distcp").write_bytes(payload)
    (staging / "rng_rank0.pt").write_bytes(b"rng")
    return checkpoints.publish(root, staging, step, {"global_step": step}, None)


def _tree(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("as_uri", [False, True])
def test_a_checkpoint_is_copied_whole_then_named_latest(tmp_path, as_uri):
    local = _published(tmp_path / "out", 3)
    remote = tmp_path / "remote" / "run"
    target = copy_checkpoint(local, 3, f"file://{remote}" if as_uri else str(remote))
    assert target == f"{remote}/global_step_3"
    assert _tree(remote / "global_step_3") == _tree(local)
    assert set(_tree(local)) == {"actor/model.distcp", "rng_rank0.pt", "trainer_state.json"}
    assert (remote / "latest_checkpointed_iteration.txt").read_text() == "3"


def test_copies_accumulate_and_a_step_copied_again_is_replaced_whole(tmp_path):
    out, remote = tmp_path / "out", tmp_path / "remote"
    copy_checkpoint(_published(out, 2), 2, str(remote))
    (remote / "global_step_2" / "stale.pt").write_bytes(b"from an earlier try")
    copy_checkpoint(_published(out, 4), 4, str(remote))
    # a resumed run trains step 2 again: its new copy holds exactly the new files
    copy_checkpoint(_published(out, 2, payload=b"retrained"), 2, str(remote))
    assert sorted(p.name for p in remote.iterdir()) == [
        "global_step_2",
        "global_step_4",
        "latest_checkpointed_iteration.txt",
    ]
    assert _tree(remote / "global_step_2") == _tree(out / "global_step_2")
    assert (remote / "global_step_2" / "actor" / "model.distcp").read_bytes() == b"retrained"
    assert (remote / "latest_checkpointed_iteration.txt").read_text() == "2"  # the step just written


def test_a_failed_copy_names_both_places_and_leaves_the_local_checkpoint(tmp_path):
    local = _published(tmp_path / "out", 1)
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    with pytest.raises(
        CheckpointError,
        match=r"^trainer\.default_hdfs_dir: could not copy the checkpoint .*global_step_1 to "
        r".*a_file/sub/global_step_1 .*the local checkpoint is complete",
    ):
        copy_checkpoint(local, 1, str(blocker / "sub"))
    assert checkpoints.list_checkpoints(tmp_path / "out") == [(1, local)]


def test_a_filesystem_pyarrow_cannot_open_is_named():
    with pytest.raises(ValueError, match=r"^trainer\.default_hdfs_dir='nosuch://bucket/ckpt': pyarrow cannot open"):
        open_remote("nosuch://bucket/ckpt")
