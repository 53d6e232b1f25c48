"""bench/quickstart_repeat.py reads a run's before/after validation reward and its minutes of steps."""

import json
from pathlib import Path

import pytest
from support import load_bench_script


def load_bench():
    return load_bench_script("quickstart_repeat")


def write_metrics(path: Path, rows: list[dict]) -> Path:
    # written out of step order: the summary must not depend on the file's order
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_summary_takes_the_first_and_last_validation_and_sums_step_time(tmp_path):
    bench = load_bench()
    rows = [
        {"step": 2, "timing_s/step": 30.0, "val-core/reward/mean": 0.45},
        {"step": 0, "val-core/reward/mean": 0.2},
        {"step": 1, "timing_s/step": 60.0, "val-core/reward/mean": 0.3},
        {"step": 3, "timing_s/step": 30.0, "val-core/reward/mean": 0.55},
    ]
    run = bench.summarize_run(write_metrics(tmp_path / "metrics.jsonl", rows))
    assert (run.first_step, run.last_step) == (0, 3)
    assert run.curve == [0.2, 0.3, 0.45, 0.55]
    assert run.gain == pytest.approx(0.35)
    assert run.train_minutes == pytest.approx(2.0)  # (60 + 30 + 30) s; step 0 is validation before training


def test_a_run_without_a_before_and_after_is_named(tmp_path):
    bench = load_bench()
    path = write_metrics(tmp_path / "metrics.jsonl", [{"step": 1, "timing_s/step": 3.0, "val-core/reward/mean": 0.2}])
    with pytest.raises(ValueError, match="metrics.jsonl: 1 rows with val-core/reward/mean"):
        bench.summarize_run(path)


def test_bad_arguments_are_refused_before_any_run(tmp_path, capsys):
    bench = load_bench()
    assert bench.main(["--runs", "0", "--output-root", str(tmp_path)]) == 2
    assert "--runs must be >= 1, got 0" in capsys.readouterr().err
    assert bench.main(["--bogus", "--output-root", str(tmp_path)]) == 2
    assert "'--bogus' is neither an option of this bench nor a key=value or ~key override" in capsys.readouterr().err
    (tmp_path / "run_1").mkdir()  # the second run's folder: refused before the first run trains
    assert bench.main(["--runs", "2", "--output-root", str(tmp_path)]) == 2
    assert f"{tmp_path / 'run_1'} exists" in capsys.readouterr().err
    # a Hydra deletion (the quickstart in its shuffled order) is an override, not a bad argument: it reaches the check
    # of the run folders, as above
    assert bench.main(["--runs", "2", "--output-root", str(tmp_path), "~data.sampler.group_key"]) == 2
    assert f"{tmp_path / 'run_1'} exists" in capsys.readouterr().err
    assert not (tmp_path / "run_0").exists()


def test_each_run_trains_with_its_own_seed(tmp_path):
    # runs are reproducible per seed, so repeating one seed would repeat one curve
    bench = load_bench()
    first = bench.train_command(tmp_path / "run_0", 0, 5, ["data.seed=3"])
    second = bench.train_command(tmp_path / "run_1", 1, 6, ["data.seed=3"])
    assert "trainer.seed=5" in first and "trainer.seed=6" in second
    assert first[-1] == second[-1] == "data.seed=3"  # the user's overrides still apply, last


def test_a_seed_override_is_refused(tmp_path, capsys):
    bench = load_bench()
    assert bench.main(["--output-root", str(tmp_path), "trainer.seed=4"]) == 2
    assert "trainer.seed is set for each run by --first-seed" in capsys.readouterr().err


def test_the_row_names_each_validation_step_and_the_tasks_acc_and_format(tmp_path):
    bench = load_bench()
    rows = [
        {
            "step": 0,
            "val-core/reward/mean": 0.2,
            "val-aux/arithmetic/acc/mean": 0.25,
            "val-aux/arithmetic/formatted/mean": 0.1,
            "val-aux/arithmetic/strict/mean": 0.05,
        },
        {
            "step": 15,
            "timing_s/step": 60.0,
            "val-core/reward/mean": 0.6,
            "val-aux/arithmetic/acc/mean": 0.5,
            "val-aux/arithmetic/formatted/mean": 0.95,
            "val-aux/arithmetic/strict/mean": 0.45,
            "reward/extra/acc/mean": 0.9,
        },  # a training field is not validation
    ]
    run = bench.summarize_run(write_metrics(tmp_path / "metrics.jsonl", rows))
    assert run.aspects == {"acc": (0.25, 0.5), "formatted": (0.1, 0.95), "strict": (0.05, 0.45)}
    assert bench.describe(run) == (
        "validation reward 0.200 at 0, 0.600 at 15 (+0.400); acc 0.250 -> 0.500; formatted 0.100 -> 0.950; "
        "strict 0.050 -> 0.450; 1.0 min of steps"
    )


def test_the_row_names_the_first_step_that_drew_a_right_marked_sample(tmp_path):
    bench = load_bench()
    val = [{"step": 0, "val-core/reward/mean": 0.2}, {"step": 3, "timing_s/step": 60.0, "val-core/reward/mean": 0.3}]
    # training rows of steps 1-3: the task's strict share is 0 until step 2 (1 of 32 samples)
    strict = [{"step": s, "reward/extra/strict/mean": share} for s, share in ((1, 0.0), (2, 1 / 32))]
    run = bench.summarize_run(write_metrics(tmp_path / "a.jsonl", [val[0], strict[1], strict[0], val[1]]))
    assert run.first_strict_step == 2
    assert bench.describe(run).endswith("; first right marked sample at step 2; 1.0 min of steps")
    run = bench.summarize_run(write_metrics(tmp_path / "b.jsonl", [*val, strict[0]]))
    assert run.first_strict_step is None and "; no right marked sample;" in bench.describe(run)
    run = bench.summarize_run(write_metrics(tmp_path / "c.jsonl", val))  # a task that does not log it
    assert "marked sample" not in bench.describe(run)
