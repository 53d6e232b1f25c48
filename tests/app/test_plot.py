"""`python -m app.plot` draws a run's curves and a sweep's trials, and names a folder without metrics."""

import json

import pytest

from app.plot import _reward_field_series, find_runs, main, moving_average, train_reward_key


def write_run(folder, rewards):
    folder.mkdir(parents=True)
    with (folder / "metrics.jsonl").open("w") as f:
        for step, r in enumerate(rewards, start=1):
            f.write(json.dumps({"step": step, "critic/score/mean": r, "timing_s/step": 1.5}) + "\n")


def test_run_folder_gives_a_png(tmp_path):
    write_run(tmp_path / "run", [0.1, 0.3, 0.6])
    assert main([str(tmp_path / "run")]) == 0
    png = (tmp_path / "run" / "curves.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000  # a real picture, not an empty canvas


def test_sweep_folder_has_one_run_per_trial(tmp_path):
    write_run(tmp_path / "sweep" / "trial_a", [0.1])
    write_run(tmp_path / "sweep" / "trial_b", [0.2])
    assert sorted(find_runs(tmp_path / "sweep")) == ["trial_a", "trial_b"]


def test_folder_without_metrics_is_named(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main([str(tmp_path / "empty")]) == 2
    assert "empty: no metrics.jsonl" in capsys.readouterr().err


def test_reward_field_panel_lists_validation_fields_only():
    rows = [
        {
            "step": 0,
            "val-aux/arithmetic/acc/mean": 0.3,
            "val-aux/arithmetic/formatted/mean": 0.2,
            "val-aux/response_length/mean": 20.0,
            "reward/extra/acc/mean": 0.1,
        }
    ]
    assert _reward_field_series({"run": rows}) == [
        ("val-aux/arithmetic/acc/mean", "arithmetic acc"),
        ("val-aux/arithmetic/formatted/mean", "arithmetic formatted"),
    ]


def test_moving_average_is_trailing_and_averages_fewer_at_the_start():
    # window 3 over [0, 3, 6, 3, 0]: [0/1, 3/2, 9/3, 12/3, 9/3]
    assert moving_average([0.0, 3.0, 6.0, 3.0, 0.0], 3) == [0.0, 1.5, 3.0, 4.0, 3.0]
    assert moving_average([2.0, 4.0], 1) == [2.0, 4.0]
    with pytest.raises(ValueError, match="window must be >= 1"):
        moving_average([1.0], 0)


def test_train_reward_is_every_generated_sample_not_the_filtered_batch():
    # with dynamic sampling the trained batch keeps only groups that scored unlike, so its mean (critic/score) stays
    # middling while the policy improves; reward/score is over every sample generated in the step
    rows = [{"step": 1, "critic/score/mean": 0.2, "reward/score/mean": 0.6}]
    assert train_reward_key(rows) == "reward/score/mean"
    assert train_reward_key([{"step": 1, "critic/score/mean": 0.2, "reward/model/mean": 0.4}]) == "reward/model/mean"
    assert train_reward_key([{"step": 1, "critic/score/mean": 0.2}]) == "critic/score/mean"
    assert train_reward_key([{"step": 1, "timing_s/step": 1.0}]) is None
