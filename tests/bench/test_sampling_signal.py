"""bench/sampling_signal.py's format table: per sampling setting, how often samples mark their answer, how many groups
hold a marked (and a right marked) sample, and how often marked and unmarked samples are right."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from sampling_signal import Sample, format_table  # noqa: E402


def sample(formatted: float, acc: float) -> Sample:
    return Sample(score=0.0, cut=False, formatted=formatted, acc=acc)


def test_the_table_counts_marked_samples_groups_and_each_kinds_accuracy():
    groups = [
        # a group with one right marked sample, one wrong marked, two unmarked of which one is right
        [sample(1, 1), sample(1, 0), sample(0, 1), sample(0, 0)],
        # a group without a marked sample: 1 of 4 unmarked right
        [sample(0, 1), sample(0, 0), sample(0, 0), sample(0, 0)],
    ]
    table = format_table([("0.70", groups)])
    row = table.splitlines()[2]
    # 2 of 8 marked; 1 of 2 groups holds a marked sample, the same one a right marked one;
    # marked right 1 of 2; unmarked right 2 of 6
    assert row == "| 0.70 | 0.250 | 0.500 | 0.500 | 0.500 | 0.333 |"


def test_a_setting_without_marked_samples_shows_a_dash_for_their_accuracy():
    groups = [[sample(0, 1), sample(0, 0)]]
    row = format_table([("greedy", groups)]).splitlines()[2]
    assert row == "| greedy | 0.000 | 0.000 | 0.000 | - | 0.500 |"
