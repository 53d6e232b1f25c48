"""A checkpoint that cannot be written (here: the disk fills up halfway through the engine's files) stops the run
with an error naming the folder and the checkpoint still intact; the partial folder is gone, `latest` still points
at the intact one, and a new run resumes from it.

The trainer is the real one (tiny model, one rank, in this process, a recording stand-in for the rollout service).
"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from support import saving_in_process_trainer

from app.trainer.checkpoints import CheckpointError, check_checkpoint


def test_a_full_disk_at_step_2_keeps_step_1_and_says_so(compose, tiny_model_dir, small_arith_data, tmp_path):
    out = tmp_path / "run"
    trainer = saving_in_process_trainer(compose, tiny_model_dir, small_arith_data, out, steps=3)
    real_save = trainer.engine.save_checkpoint

    def save_then_fill_the_disk(path):
        if trainer.step == 2:
            Path(path).mkdir(parents=True)
            (Path(path) / "model.safetensors").write_bytes(b"\0" * 1024)  # a partial write
            raise OSError(errno.ENOSPC, "No space left on device")
        real_save(path)

    trainer.engine.save_checkpoint = save_then_fill_the_disk
    with pytest.raises(
        CheckpointError,
        match=r"could not write the checkpoint of step 2 into .*\.tmp-global_step_2-"
        r".*No space left on device; the newest complete checkpoint, "
        r".*global_step_1, is intact",
    ):
        trainer.fit()
    assert sorted(p.name for p in out.iterdir() if p.name.startswith((".tmp", "global_step"))) == ["global_step_1"]
    assert (out / "latest_checkpointed_iteration.txt").read_text().strip() == "1"
    check_checkpoint(out / "global_step_1")  # a real checkpoint has every file the pre-flight check asks for

    resumed = saving_in_process_trainer(
        compose, tiny_model_dir, small_arith_data, out, steps=3
    )  # the disk has room again
    resumed.fit()
    assert (out / "latest_checkpointed_iteration.txt").read_text().strip() == "3"


def test_a_corrupt_checkpoint_stops_app_train_before_ray_starts(
    tiny_model_dir, small_arith_data, tmp_path, monkeypatch, capsys
):
    import app.trainer.launch
    from app.config import compose_config
    from app.train import run

    out = tmp_path / "run"
    (out / "global_step_4" / "actor").mkdir(parents=True)
    (out / "global_step_4" / "trainer_state.json").write_text('{"global_step": 4, "policy_')  # cut short
    monkeypatch.setattr(app.trainer.launch, "train", lambda *a, **k: pytest.fail("Ray must not start"))
    cfg = compose_config(
        "grpo_trainer",
        [
            f"actor_rollout_ref.model.path={tiny_model_dir}",
            f"data.train_files={small_arith_data / 'train.parquet'}",
            f"data.val_files={small_arith_data / 'test.parquet'}",
            "data.max_prompt_length=256",
            "data.max_response_length=8",
            "data.train_batch_size=2",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            f"trainer.default_local_dir={out}",
        ],
    )
    assert run(cfg) == 2
    assert f"error: {out / 'global_step_4' / 'trainer_state.json'} cannot be read as JSON" in capsys.readouterr().err
