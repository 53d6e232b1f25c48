"""`trainer.val_only` in the real trainer (tiny model, one rank, in this process, a recording stand-in for the
rollout service): the model a resume would train from answers the validation prompts, and nothing the training run
wrote changes."""

from __future__ import annotations

from support import saving_in_process_trainer

from app.trainer.launch import validation_history
from app.trainer.tracking import read_jsonl


def _snapshot(out):
    """Every file of the run folder but the validation-only record and the driver's progress file: path -> bytes."""
    skip = {"val_only.jsonl", "progress.jsonl"}
    return {p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file() and p.name not in skip}


def test_a_validation_only_run_validates_the_newest_checkpoint_and_writes_nothing_else(
    compose, tiny_model_dir, small_arith_data, tmp_path
):
    out = tmp_path / "run"
    validation = [f"data.val_files={small_arith_data / 'test.parquet'}", "trainer.logger=[jsonl,console]"]
    saving_in_process_trainer(compose, tiny_model_dir, small_arith_data, out, 2, validation).fit()
    before = _snapshot(out)
    assert (out / "hf_model").is_dir() and (out / "global_step_2").is_dir()

    val_only = [*validation, "trainer.val_only=true", "trainer.val_before_train=true"]
    trainer = saving_in_process_trainer(compose, tiny_model_dir, small_arith_data, out, 4, val_only)
    metrics = trainer.fit()

    assert trainer.step == 2  # resumed from global_step_2 and took no step of the 4
    # the step-2 weights reached the rollout service before the validation's one request (n=1 per prompt)
    assert trainer.rollout.service.calls == ["update_weights", "generate"]
    assert _snapshot(out) == before  # no checkpoint, no export, metrics.jsonl as the training run left it
    [row] = read_jsonl(out / "val_only.jsonl")
    assert row["step"] == 2 and row["val-core/reward/mean"] == metrics["val-core/reward/mean"]
    assert validation_history(out, val_only=True) == [(2, {k: v for k, v in row.items() if k.startswith("val-")})]


def test_without_a_checkpoint_it_validates_the_model_path_and_keeps_earlier_rows(
    compose, tiny_model_dir, small_arith_data, tmp_path
):
    out = tmp_path / "run"
    val_only = [
        f"data.val_files={small_arith_data / 'test.parquet'}",
        "trainer.val_only=true",
        "trainer.val_before_train=true",
        "trainer.resume_mode=disable",
    ]
    for _ in range(2):
        trainer = saving_in_process_trainer(compose, tiny_model_dir, small_arith_data, out, 2, val_only)
        trainer.fit()
        assert trainer.rollout.service.calls == ["generate"]  # the replicas' own model.path: no weights pushed
    rows = read_jsonl(out / "val_only.jsonl")
    assert [r["step"] for r in rows] == [0, 0]  # the second run appended its row
    assert not (out / "metrics.jsonl").exists() and not (out / "hf_model").exists()
    assert not list(out.glob("global_step_*"))
