"""Under `ray job submit` the quickstart's relative, git-ignored paths are named before Ray starts; absolute ones
pass."""

from __future__ import annotations

import logging

import pytest

from app.config import ConfigError, compose_run_config
from app.job_paths import JOB_CONFIG_ENV, check_job_paths


def quickstart(*overrides: str):
    return compose_run_config("quickstart", overrides)


def test_relative_paths_missing_from_the_jobs_working_dir_are_named(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # the uploaded working dir: no models/ or data/
    monkeypatch.setenv(JOB_CONFIG_ENV, "{}")
    with pytest.raises(ConfigError) as err:
        check_job_paths(quickstart())
    message = str(err.value)
    assert "actor_rollout_ref.model.path=models/smollm2-135m-instruct" in message
    assert "data.train_files=data/arithmetic/train.parquet" in message
    assert "data.val_files=data/arithmetic/test.parquet" in message
    assert "git-ignored" in message and "actor_rollout_ref.model.path=$PWD/models/smollm2-135m-instruct" in message


def test_absolute_paths_pass_and_a_relative_output_dir_is_a_warning(monkeypatch, tmp_path, caplog):
    files = tmp_path / "repo"
    (files / "models" / "m").mkdir(parents=True)
    (files / "data").mkdir()
    for name in ("train", "test"):
        (files / "data" / f"{name}.parquet").touch()
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    monkeypatch.chdir(job_dir)
    monkeypatch.setenv(JOB_CONFIG_ENV, "{}")
    cfg = quickstart(
        f"actor_rollout_ref.model.path={files}/models/m",
        f"data.train_files={files}/data/train.parquet",
        f"data.val_files={files}/data/test.parquet",
    )
    with caplog.at_level(logging.WARNING, logger="app.job_paths"):
        check_job_paths(cfg)
    assert "trainer.default_local_dir=outputs/quickstart is relative" in caplog.text


def test_outside_a_job_nothing_is_checked_here(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(JOB_CONFIG_ENV, raising=False)
    check_job_paths(quickstart())  # app.train's data check names missing files itself


def test_a_relative_tokenizer_path_missing_from_the_jobs_working_dir_is_named(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(JOB_CONFIG_ENV, "{}")
    with pytest.raises(ConfigError, match=r"actor_rollout_ref\.model\.tokenizer_path=tokenizers/smollm2"):
        check_job_paths(
            quickstart(
                f"actor_rollout_ref.model.path={tmp_path}", "actor_rollout_ref.model.tokenizer_path=tokenizers/smollm2"
            )
        )
