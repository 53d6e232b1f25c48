"""The JSONL record: one line per step, and on resume the lines past the resumed step are dropped."""
import math

import pytest

from app.trainer.tracking import JsonlSink, Tracking, read_metrics


def test_jsonl_drops_lines_after_the_resumed_step(tmp_path):
    path = tmp_path / "metrics.jsonl"
    sink = JsonlSink(path)
    for step in (1, 2, 3):
        sink.log({"critic/score/mean": step / 10}, step)
    sink.close()
    # resumed from the step-2 checkpoint: step 3 is trained again, so its old line must go
    sink = JsonlSink(path, resume_step=2)
    sink.log({"critic/score/mean": 0.9, "bad": math.nan}, 3)
    sink.close()
    rows = read_metrics(path)
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert rows[-1] == {"step": 3, "critic/score/mean": 0.9}  # NaN is not written


def test_unknown_logger_is_named(tmp_path):
    with pytest.raises(ValueError, match=r"trainer.logger: unknown logger 'wandbb'"):
        Tracking(["wandbb"], tmp_path, total_steps=1, start_step=0, project="p", experiment="e")


def test_fresh_run_replaces_an_old_history(tmp_path):
    path = tmp_path / "metrics.jsonl"
    sink = JsonlSink(path)
    sink.log({"val-core/reward/mean": 0.2}, 0)
    sink.close()
    sink = JsonlSink(path, resume_step=0)  # a new run in the same folder, not a resume
    sink.log({"val-core/reward/mean": 0.3}, 0)
    sink.close()
    assert read_metrics(path) == [{"step": 0, "val-core/reward/mean": 0.3}]
