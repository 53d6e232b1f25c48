"""`app.train.run`: the command types the Hydra config once, and what it validated is what it hands to the launch."""

from __future__ import annotations

from omegaconf import OmegaConf
from support import with_dotted

BASE = {
    "data": {"train_files": "train.parquet", "train_batch_size": 4},
    "actor_rollout_ref": {"model": {"path": "/models/x"}, "actor": {"ppo_mini_batch_size": 4}},
    "algorithm": {"adv_estimator": "grpo"},
    "trainer": {"default_local_dir": "out"},
}


def test_the_command_builds_the_typed_config_once_and_launches_that_object(monkeypatch, tmp_path):
    import app.job_paths
    import app.preflight
    import app.train
    from app.config import loader, typed
    from app.config.schema import TrainerRunConfig
    from app.trainer import checkpoints, launch, tracking

    monkeypatch.chdir(tmp_path)
    parses, launched, checked = [], [], []

    def counting_build(cls, data, path=""):
        if cls is TrainerRunConfig and path == "":
            parses.append(path)
        return typed.build_typed(cls, data, path)

    monkeypatch.setattr(loader, "build_typed", counting_build)
    monkeypatch.setattr(app.job_paths, "check_job_paths", lambda cfg: None)
    monkeypatch.setattr(tracking, "check_loggers", lambda loggers: None)
    monkeypatch.setattr(app.preflight, "run_preflight", lambda cfg, skip=(): checked.append(cfg) or {"data": (8, 0)})
    monkeypatch.setattr(checkpoints, "find_resume_dir", lambda root, mode: None)
    monkeypatch.setattr(launch, "train", lambda cfg: launched.append(cfg) or {})
    monkeypatch.setattr(launch, "validation_history", lambda out_dir, val_only: [])
    assert app.train.run(OmegaConf.create(with_dotted(BASE, **{"trainer.total_training_steps": 2}))) == 0
    assert len(parses) == 1  # load_config, once: the launch and its workers get the typed object
    [cfg] = launched
    assert cfg is checked[0] and isinstance(cfg, TrainerRunConfig) and cfg.trainer.total_training_steps == 2


def _launch_that_fails(monkeypatch, tmp_path, capsys, ray_was_initialized: bool) -> tuple[list[str], str]:
    """app.train.run with a launch that fails as a worker would: (what stderr held when Ray was disconnected, for
    each disconnect; stderr at the end)."""
    import ray

    import app.job_paths
    import app.preflight
    import app.train
    from app.trainer import checkpoints, launch, tracking

    monkeypatch.chdir(tmp_path)
    at_shutdown: list[str] = []

    def failing_train(cfg):
        raise RuntimeError("a worker failed")

    monkeypatch.setattr(app.job_paths, "check_job_paths", lambda cfg: None)
    monkeypatch.setattr(tracking, "check_loggers", lambda loggers: None)
    monkeypatch.setattr(app.preflight, "run_preflight", lambda cfg, skip=(): {"data": (8, 0)})
    monkeypatch.setattr(checkpoints, "find_resume_dir", lambda root, mode: None)
    monkeypatch.setattr(launch, "train", failing_train)
    monkeypatch.setattr(ray, "is_initialized", lambda: ray_was_initialized)
    monkeypatch.setattr(ray, "shutdown", lambda: at_shutdown.append(capsys.readouterr().err))
    capsys.readouterr()
    assert app.train.run(OmegaConf.create(BASE)) == 1
    return at_shutdown, capsys.readouterr().err


def test_a_run_that_connected_ray_disconnects_before_it_prints_the_workers_error(monkeypatch, tmp_path, capsys):
    # Ray Train's and Serve's actors log to the driver's console until it disconnects: the error must come after
    at_shutdown, err = _launch_that_fails(monkeypatch, tmp_path, capsys, ray_was_initialized=False)
    assert len(at_shutdown) == 1
    assert not [line for line in at_shutdown[0].splitlines() if line.startswith("error:")]  # nothing printed yet
    assert err.splitlines()[-1].startswith("error: the training run failed (RuntimeError: a worker failed)")


def test_a_run_on_its_callers_ray_leaves_it_connected(monkeypatch, tmp_path, capsys):
    # a test session or a pipeline stage that shares its cluster keeps it after a failed run
    at_shutdown, err = _launch_that_fails(monkeypatch, tmp_path, capsys, ray_was_initialized=True)
    assert at_shutdown == []
    assert err.splitlines()[-1].startswith("error: the training run failed (RuntimeError: a worker failed)")


def test_the_summary_reads_the_first_and_last_validation_or_the_only_one():
    from app.train import validation_summary

    before = {"val-core/reward/mean": 0.1914, "val-aux/arithmetic/acc/mean": 0.289}
    after = {"val-core/reward/mean": 0.507, "val-aux/arithmetic/acc/mean": 0.453}
    assert validation_summary([(0, before), (10, before), (20, after)]) == [
        "validation reward: 0.191 at step 0 -> 0.507 at step 20",
        "  arithmetic/acc: 0.289 -> 0.453",
    ]
    # trainer.val_only: one validation, of the checkpoint it resumed
    assert validation_summary([(20, after)]) == ["validation reward: 0.507 at step 20", "  arithmetic/acc: 0.453"]
    assert validation_summary([]) == []


def test_a_validation_only_run_prints_its_validation_and_no_model(monkeypatch, tmp_path, capsys):
    import app.job_paths
    import app.preflight
    import app.train
    from app.trainer import checkpoints, launch, tracking

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(app.job_paths, "check_job_paths", lambda cfg: None)
    monkeypatch.setattr(tracking, "check_loggers", lambda loggers: None)
    monkeypatch.setattr(app.preflight, "run_preflight", lambda cfg, skip=(): {"data": (8, 2)})
    monkeypatch.setattr(checkpoints, "find_resume_dir", lambda root, mode: None)
    monkeypatch.setattr(launch, "train", lambda cfg: {})
    out = tmp_path / "out"
    out.mkdir()
    (out / "metrics.jsonl").write_text(
        '{"step": 0, "val-core/reward/mean": 0.1}\n{"step": 2, "val-core/reward/mean": 0.3}\n'
    )
    (out / "val_only.jsonl").write_text(
        '{"step": 2, "val-core/reward/mean": 0.3}\n{"step": 1, "val-core/reward/mean": 0.2}\n'
    )
    cfg = with_dotted(BASE, **{"trainer.val_only": True, "data.val_files": "test.parquet"})
    assert app.train.run(OmegaConf.create(cfg)) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[-1] == "validation reward: 0.200 at step 1"  # the latest run's row, not the highest step's
    assert not [line for line in printed if line.startswith("model: ")]
