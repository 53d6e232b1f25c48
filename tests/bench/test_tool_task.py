"""bench/tool_task.py: the before/after table from a run's validation rows, and the overrides it trains with."""

import json
from pathlib import Path

import pytest
from support import load_bench_script


def load_bench():
    return load_bench_script("tool_task")


def test_table_takes_the_first_and_last_validation_rows(tmp_path):
    bench = load_bench()
    rows = [
        {"step": 3, "val-core/reward/mean": 0.25, "val-aux/multi_turn/tool_call_ok/mean": 0.5},
        {"step": 1, "timing_s/step": 60.0},  # a training row: no validation
        {"step": 0, "val-core/reward/mean": 0.0, "val-aux/multi_turn/tool_call_ok/mean": 0.125},
    ]
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    values = bench.before_after(path)
    assert values == {
        "val-core/reward/mean": (0, 0.0, 3, 0.25),
        "val-aux/multi_turn/tool_call_ok/mean": (0, 0.125, 3, 0.5),
    }
    assert bench.table(values).splitlines() == [
        "| greedy validation | step 0 | step 3 |",
        "|---|---|---|",
        "| greedy validation reward (right answers) | 0.000 | 0.250 |",
        "| answers with a clean tool call | 0.125 | 0.500 |",
    ]


def test_one_validation_is_not_a_before_and_after(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text(json.dumps({"step": 0, "val-core/reward/mean": 0.1}) + "\n")
    with pytest.raises(ValueError, match="metrics.jsonl: 1 validation rows"):
        load_bench().before_after(path)


def test_overrides_validate_before_and_after_and_reward_right_answers_only():
    ov = load_bench().training_overrides(Path("/d"), Path("/m"), Path("/o"), steps=5, val_size=16)
    assert {"trainer.total_training_steps=5", "trainer.test_freq=5", "trainer.val_before_train=true"} <= set(ov)
    assert "reward_model.overlong_buffer.enable=false" in ov  # no length shaping: the reward is the answer's
    assert "actor_rollout_ref.rollout.multi_turn.tool_config_path=/d/tool_config.yaml" in ov
    assert "actor_rollout_ref.rollout.cpu_kv_cache_gib=1" in ov  # room for the long prompts of a whole batch
    # its documented result was trained with token-mean; the quickstart has since changed its aggregation
    assert "actor_rollout_ref.actor.loss_agg_mode=token-mean" in ov


def test_the_task_is_prepared_with_the_asked_demonstrations(tmp_path):
    cmd = load_bench().prepare_command(tmp_path / "data", 0)
    assert cmd[1:] == ["-m", "app.prepare", "calculator", "--output", str(tmp_path / "data"), "--demonstrations", "0"]


def test_each_count_of_demonstrations_has_its_own_data_folder(tmp_path):
    """A folder prepared for one K (say by a run that then failed) must not be reused for another K."""
    bench = load_bench()
    folders = {bench.data_dir(tmp_path, k) for k in (0, 1, 2)}
    assert len(folders) == 3
    assert all(folder.parent == tmp_path for folder in folders)


def test_more_demonstrations_than_the_task_has_are_refused_before_anything_runs(tmp_path, capsys):
    with pytest.raises(SystemExit):
        load_bench().main(["--demonstrations", "3", "--out", str(tmp_path / "out")])
    assert "--demonstrations: invalid choice: 3" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # nothing prepared
