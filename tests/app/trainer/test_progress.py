"""The driver's console: one line per step from rank 0's progress file, with the ETA from the step times."""

from __future__ import annotations

import io
import json

import numpy

from app.trainer.progress import PROGRESS_FILE, ProgressWriter, StepLines, _Follower, follow_progress, format_duration


def test_lines_say_step_reward_validation_seconds_and_eta():
    lines = StepLines()
    assert lines.line({"total_steps": 10, "start_step": 0}) is None
    assert lines.line({"step": 0, "val-core/reward/mean": 0.1912}) == "validation before training: reward 0.191"
    assert (
        lines.line({"step": 1, "critic/score/mean": 0.25, "reward/score/mean": 0.25, "timing_s/step": 20.0})
        == "step 1/10 | reward 0.250 | 20.0 s | ETA 3m00s"
    )  # 9 steps left x 20 s
    # the mean of 20 and 10 s is 15 s: 8 steps left x 15 s = 2 min; samples differ from the trained batch
    assert (
        lines.line(
            {
                "step": 2,
                "critic/score/mean": 0.5,
                "reward/score/mean": 0.375,
                "filter_groups/generated_groups": 8,
                "timing_s/step": 10.0,
                "val-core/reward/mean": 0.3,
            }
        )
        == "step 2/10 | reward 0.500 (all samples 0.375) | validation 0.300 | 10.0 s | ETA 2m00s"
    )
    assert lines.line({"step": 2, "critic/score/mean": 0.5, "timing_s/step": 10.0}) is None  # a restart's repeat


def test_a_validation_outside_a_step_says_which_step_it_validated():
    lines = StepLines()
    assert lines.line({"total_steps": 0, "start_step": 20}) is None  # a validation-only run trains no step
    assert lines.line({"step": 20, "val-core/reward/mean": 0.507}) == "validation at step 20: reward 0.507"


def test_one_mean_summed_in_two_precisions_is_not_told_as_two():
    # the trained batch's mean comes from a float32 tensor, all samples' from float64 (step 1 of a run without
    # dynamic sampling printed "reward 0.134 (all samples 0.134)")
    lines = StepLines()
    lines.line({"total_steps": 2, "start_step": 0})
    row = {"step": 1, "critic/score/mean": 0.13437500596046448, "reward/score/mean": 0.134375, "timing_s/step": 1.0}
    row["filter_groups/generated_groups"] = 4  # dynamic sampling ran and kept every group
    assert lines.line(row) == "step 1/2 | reward 0.134 | 1.0 s | ETA 0m01s"
    # 0.2125 on a rounding boundary: float32's prints 0.213, float64's 0.212 ("reward 0.212 (all samples 0.213)")
    row = {
        "step": 2,
        "critic/score/mean": float(numpy.float32(0.2125)),
        "reward/score/mean": 0.2125,
        "timing_s/step": 1.0,
        "filter_groups/generated_groups": 8,
    }
    assert lines.line(row) == "step 2/2 | reward 0.213 | 1.0 s | ETA 0m00s"


def test_all_samples_are_told_apart_only_where_dynamic_sampling_dropped_some():
    # without dynamic sampling the trained batch is every sample; its mean differs by the overlong penalty only
    lines = StepLines()
    lines.line({"total_steps": 2, "start_step": 0})
    row = {"step": 1, "critic/score/mean": 0.184, "reward/score/mean": 0.2, "timing_s/step": 1.0}
    assert lines.line(row) == "step 1/2 | reward 0.184 | 1.0 s | ETA 0m01s"
    row = {**row, "step": 2, "filter_groups/generated_groups": 8}
    assert lines.line(row) == "step 2/2 | reward 0.184 (all samples 0.200) | 1.0 s | ETA 0m00s"


def test_format_duration():
    assert format_duration(59.6) == "1m00s" and format_duration(3725) == "1h02m"


def test_the_follower_prints_what_rank_0_wrote_once(tmp_path):
    path = tmp_path / PROGRESS_FILE
    writer = ProgressWriter(path, total_steps=2, start_step=0)
    out = io.StringIO()
    follower = _Follower(path, out)
    writer.log({"val-core/reward/mean": 0.2, "actor/pg_loss": 1.0}, step=0)
    follower.poll()
    with path.open("a") as f:  # half a line: not printed until complete
        f.write('{"step": 1, "critic/score/mean": 0.5, ')
    follower.poll()
    with path.open("a") as f:
        f.write('"timing_s/step": 4.0}\n')
    follower.poll()
    follower.poll()
    writer.close()
    assert out.getvalue().splitlines() == [
        "validation before training: reward 0.200",
        "step 1/2 | reward 0.500 | 4.0 s | ETA 0m04s",
    ]
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert rows[1] == {"step": 0, "val-core/reward/mean": 0.2}  # only the watched keys travel


def test_follow_progress_drops_an_earlier_runs_file_and_prints_the_last_step_at_exit(tmp_path):
    (tmp_path / PROGRESS_FILE).write_text(json.dumps({"step": 7, "critic/score/mean": 0.9, "timing_s/step": 1}) + "\n")
    out = io.StringIO()
    with follow_progress(tmp_path, out):
        writer = ProgressWriter(tmp_path / PROGRESS_FILE, total_steps=1, start_step=0)
        writer.log({"critic/score/mean": 0.25, "timing_s/step": 3.0}, step=1)
        writer.close()
    assert out.getvalue().splitlines() == ["step 1/1 | reward 0.250 | 3.0 s | ETA 0m00s"]
