"""bench/sampling_signal.py's format table: per sampling setting, how often samples mark their answer, how many groups
hold a marked (and a right marked) sample, and how often marked and unmarked samples are right."""

import argparse
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from sampling_signal import (  # noqa: E402
    Sample,
    SamplingSetting,
    format_table,
    holdings_table,
    majority_right,
)


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


def answered(answer, right: bool) -> Sample:
    return Sample(score=0.0, cut=False, formatted=1.0, acc=float(right), answer=answer)


def test_majority_vote_counts_numbers_by_value_and_gives_a_tie_to_the_answer_drawn_first():
    # "10" and "10.0" are one number, so 10 has two votes against 9's one
    assert majority_right([answered("9", False), answered("10", True), answered("10.0", True)], "10")
    # one vote each: the first drawn (9) is the group's answer, so the vote is wrong though a right answer is there
    assert not majority_right([answered("9", False), answered("10", True)], "10")
    assert majority_right([answered("10", True), answered("9", False)], "10")
    # no number at all is an answer of its own, and it can win the vote
    assert not majority_right([answered(None, False), answered(None, False), answered("10", True)], "10")


def test_the_holdings_table_gives_greedy_sampled_majority_and_any_accuracy_per_level_and_overall():
    problems = [
        # level 1, gold 4: greedy wrong; samples 4, 4, 5 -> a sample right 2/3, the vote (4) right, any right
        (1, "4", answered("5", False), [answered("4", True), answered("4", True), answered("5", False)]),
        # level 1, gold 7: greedy right; samples 6, 6, 7 -> 1/3 right, the vote (6) wrong, any right
        (1, "7", answered("7", True), [answered("6", False), answered("6", False), answered("7", True)]),
        # level 2, gold 12: greedy wrong; no sample right
        (2, "12", answered("11", False), [answered("11", False), answered("13", False), answered("11", False)]),
    ]
    lines = holdings_table(problems).splitlines()
    # level 1: greedy 1/2; a sample (2/3 + 1/3) / 2 = 0.5; vote 1/2; any 2/2
    assert lines[2] == "| 1 | 2 | 0.500 | 0.500 | 0.500 | 1.000 |"
    assert lines[3] == "| 2 | 1 | 0.000 | 0.000 | 0.000 | 0.000 |"
    # all: greedy 1/3; a sample (2/3 + 1/3 + 0) / 3 = 1/3; vote 1/3; any 2/3
    assert lines[4] == "| all | 3 | 0.333 | 0.333 | 0.333 | 0.667 |"


@pytest.mark.parametrize(
    "spec, setting, label",
    [
        ("0.7", SamplingSetting(0.7), "0.70"),
        ("0.7:p0.9", SamplingSetting(0.7, top_p=0.9), "0.70 p0.9"),
        ("1:k20", SamplingSetting(1.0, top_k=20), "1.00 k20"),
        ("0.5:p0.8:k5", SamplingSetting(0.5, top_p=0.8, top_k=5), "0.50 p0.8 k5"),
    ],
)
def test_a_sampling_setting_reads_a_temperature_then_top_p_and_top_k(spec, setting, label):
    assert SamplingSetting.parse(spec) == setting
    assert setting.label == label


@pytest.mark.parametrize("spec", ["hot", "0.7:q3", "0.7:pX", "0.7:k0.5"])
def test_a_sampling_setting_it_cannot_read_is_refused_naming_it(spec):
    with pytest.raises(argparse.ArgumentTypeError, match=f"'{spec}': expected a temperature"):
        SamplingSetting.parse(spec)
