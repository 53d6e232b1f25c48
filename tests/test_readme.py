"""The README's commands work as written: every `bash` block that runs an `app.*` entry point is expanded by bash
(with `python` and `ray` recorded, not run) and each call is checked with the loader its entry point uses; a `...`
in a command stands for "the rest of your command" and is read as the quickstart's config. The data row it shows
loads, and the job-submit command passes the check a Ray job makes of its paths."""

from __future__ import annotations

import json
import re

from command_check import REPO, check_call, load_train_config, record_calls

from app.job_paths import JOB_CONFIG_ENV, check_job_paths

README = (REPO / "README.md").read_text()


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, re.S)


def entry_point_blocks() -> list[str]:
    return [b for b in blocks("bash") if "-m app." in b]


def as_written(call: list[str]) -> list[str]:
    if "..." in call:  # "python -m app.train ... key=value": the keys on top of a complete command
        call = [*call[:3], "--config-name", "quickstart", *(a for a in call[3:] if a != "...")]
    return call


def test_the_two_setup_commands_come_first():
    first = blocks("bash")[0]
    assert first.splitlines()[0].startswith("make run") and first.splitlines()[1].startswith("make test")


def test_every_entry_point_command_loads(tmp_path, monkeypatch):
    checked = []
    for block in entry_point_blocks():
        for call in record_calls(block, tmp_path / "calls"):
            checked.append(check_call(as_written(call), monkeypatch))
    assert {"app.train", "app.sweep", "app.prepare", "app.import_model"} <= set(checked), checked


def test_the_job_submit_command_gives_paths_a_job_can_read(tmp_path, monkeypatch):
    [block] = [b for b in entry_point_blocks() if "ray job submit" in b]
    [call] = record_calls(block, tmp_path / "calls")
    cfg = load_train_config(call[3:])
    assert cfg.actor_rollout_ref.model.path == f"{REPO}/models/smollm2-135m-instruct"
    assert cfg.trainer.default_local_dir == f"{REPO}/outputs/quickstart"
    job_dir = tmp_path / "job"  # what Ray uploads: no models/ or data/
    job_dir.mkdir()
    monkeypatch.chdir(job_dir)
    monkeypatch.setenv(JOB_CONFIG_ENV, "{}")
    check_job_paths(cfg)  # raises ConfigError for a relative path the job lacks


def test_the_data_row_shown_loads(tmp_path, tiny_model_dir):
    from support import prompt_options
    from transformers import AutoTokenizer

    from app.data import load_prompt_dataset

    [row_text] = blocks("json")
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(json.loads(row_text)) + "\n")
    dataset = load_prompt_dataset(str(path), AutoTokenizer.from_pretrained(tiny_model_dir), prompt_options())
    assert len(dataset) == 1


# pages written on other branches at the same time as this README; they exist once the branches are merged
PAGES_ELSEWHERE = ("docs/gpus.md", "docs/gpu_engine.md", "docs/errors.md", "docs/fault_tolerance.md")


def test_links_to_local_files_resolve():
    for target in re.findall(r"\]\(([^)#]+)\)", README):
        if not target.startswith("http"):
            assert (REPO / target).exists() or target in PAGES_ELSEWHERE, target
