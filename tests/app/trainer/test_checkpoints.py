"""Checkpoint folders: atomic publish, pruning, and finding the newest complete one."""

import pytest

from app.trainer import checkpoints as ck


def stage(root, step, payload="w"):
    staging = ck.staging_dir(root, step, "run")
    staging.mkdir(parents=True)
    (staging / "actor.bin").write_text(payload)
    return staging


def test_publish_renames_and_records_latest(tmp_path):
    final = ck.publish(tmp_path, stage(tmp_path, 3), 3, {"global_step": 3}, max_to_keep=None)
    assert final == tmp_path / "global_step_3"
    assert (tmp_path / ck.LATEST_FILE).read_text() == "3"
    assert ck.read_state(final) == {"global_step": 3}
    assert not list(tmp_path.glob(".tmp-*"))


def test_incomplete_staging_is_never_resumed(tmp_path):
    ck.publish(tmp_path, stage(tmp_path, 1), 1, {"global_step": 1}, None)
    stage(tmp_path, 2)  # a crash mid-write leaves only the staging folder
    assert ck.find_resume_dir(tmp_path, "auto") == tmp_path / "global_step_1"


def test_max_to_keep_prunes_oldest(tmp_path):
    for step in (1, 2, 3):
        ck.publish(tmp_path, stage(tmp_path, step), step, {"global_step": step}, max_to_keep=2)
    assert [s for s, _ in ck.list_checkpoints(tmp_path)] == [2, 3]


def test_republishing_a_step_replaces_it_whole(tmp_path):
    ck.publish(tmp_path, stage(tmp_path, 1, "old"), 1, {"global_step": 1}, None)
    ck.publish(tmp_path, stage(tmp_path, 1, "new"), 1, {"global_step": 1}, None)
    assert (tmp_path / "global_step_1" / "actor.bin").read_text() == "new"


def test_resume_modes(tmp_path):
    assert ck.find_resume_dir(tmp_path, "auto") is None  # nothing yet: start fresh
    ck.publish(tmp_path, stage(tmp_path, 5), 5, {"global_step": 5}, None)
    assert ck.find_resume_dir(tmp_path, "disable") is None
    assert ck.find_resume_dir(tmp_path, str(tmp_path / "global_step_5")) == tmp_path / "global_step_5"
    with pytest.raises(ck.CheckpointError, match=r"nowhere.*is not a complete checkpoint.*global_step_5"):
        ck.find_resume_dir(tmp_path, str(tmp_path / "nowhere"))


def _complete(root):
    """A checkpoint folder with every file resume reads (contents are stand-ins)."""
    ckpt = root / "global_step_1"
    (ckpt / "actor").mkdir(parents=True)
    (ckpt / ck.STATE_FILE).write_text('{"global_step": 1, "policy_version": 1, "kl_coef": 0.0, "data": {}}')
    for name in (".metadata", "engine_state.pt"):
        (ckpt / "actor" / name).write_bytes(b"x")
    return ckpt


@pytest.mark.parametrize(
    "damage, message",
    [
        (
            lambda c: (c / ck.STATE_FILE).write_text('{"global_step": 1, "pol'),
            r"trainer_state\.json cannot be read as JSON",
        ),
        (
            lambda c: (c / ck.STATE_FILE).write_text('{"global_step": 1}'),
            r"lacks \['policy_version', 'kl_coef', 'data'\]",
        ),
        (lambda c: (c / "actor" / "engine_state.pt").write_bytes(b""), r"actor/engine_state\.pt is empty"),
        (lambda c: (c / "actor" / ".metadata").unlink(), r"actor/\.metadata is missing"),
        (lambda c: (c / "critic").mkdir(), r"critic/\.metadata is missing"),  # a critic folder must be whole too
        (lambda c: (c / "ref").mkdir(), r"ref/\.metadata is missing"),  # and a moving reference's
    ],
)
def test_a_damaged_checkpoint_is_named_before_resuming(tmp_path, damage, message):
    ckpt = _complete(tmp_path)
    ck.check_checkpoint(ckpt)  # whole: accepted
    damage(ckpt)
    with pytest.raises(ck.CheckpointError, match=message):
        ck.check_checkpoint(ckpt)


def test_a_deepspeed_engine_folder_is_checked_by_its_own_index(tmp_path):
    # DeepSpeed's folder has no DCP .metadata; its index is `latest` (the tag of the sub-folder holding the state)
    ckpt = _complete(tmp_path)
    (ckpt / "actor" / ".metadata").unlink()
    (ckpt / "actor" / "latest").write_text("deepspeed")
    ck.check_checkpoint(ckpt)
    (ckpt / "actor" / "latest").write_text("")
    with pytest.raises(ck.CheckpointError, match=r"actor/latest is empty"):
        ck.check_checkpoint(ckpt)
