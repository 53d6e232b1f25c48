"""bench/peak_rss.py groups the processes at the PSS peak by name, so Ray's many small helpers show as one line each."""

from support import load_bench_script

GIB = 2**30


def test_processes_of_one_name_are_counted_and_summed_largest_sum_first():
    peak_rss = load_bench_script("peak_rss")
    # (rss, pss, name): two idle Ray workers of 0.25 GiB outweigh one 0.4 GiB driver; RSS plays no part
    per_process = [
        (9 * GIB, GIB // 4, "ray::IDLE"),
        (0, int(0.4 * GIB), "python"),
        (0, GIB // 4, "ray::IDLE"),
        (0, GIB, "VLLM::Worker"),
    ]
    assert peak_rss.by_name(per_process) == [
        ("VLLM::Worker", 1, GIB),
        ("ray::IDLE", 2, GIB // 2),
        ("python", 1, int(0.4 * GIB)),
    ]


def test_equal_sums_are_listed_by_name():
    peak_rss = load_bench_script("peak_rss")
    assert [name for name, _, _ in peak_rss.by_name([(0, 5, "b"), (0, 5, "a")])] == ["a", "b"]


def test_help_prints_the_usage_and_runs_nothing(capsys):
    peak_rss = load_bench_script("peak_rss")
    # before, "--help" was taken for the command to run and failed with FileNotFoundError
    assert peak_rss.main(["--help"]) == 0
    assert "python bench/peak_rss.py [--interval S] -- CMD" in capsys.readouterr().out
