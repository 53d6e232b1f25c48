"""algos.group_filter: which GRPO groups carry a signal (DAPO dynamic sampling)."""

import pytest
import torch

from algos.group_filter import informative_groups


def test_groups_whose_samples_all_agree_are_dropped_and_singletons_kept():
    # a: 1,1,0,1 disagree -> keep; b: all 0 -> drop; c: a single sample -> keep (verl's rule); d: all 0.5 -> drop
    metric = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.5, 0.5, 0.5])
    uid = ["a", "a", "a", "a", "b", "b", "b", "b", "c", "d", "d"]
    assert informative_groups(metric, uid) == {"a": True, "b": False, "c": True, "d": False}
    assert list(informative_groups(metric, uid)) == ["a", "b", "c", "d"]  # first-appearance order


def test_interleaved_rows_are_grouped_by_id_not_by_position():
    metric = torch.tensor([0.0, 1.0, 0.0, 1.0])
    # x holds rows 0 and 2 (both 0), y rows 1 and 3 (both 1): neither group has a spread
    assert informative_groups(metric, ["x", "y", "x", "y"]) == {"x": False, "y": False}


def test_tiny_differences_count_as_a_spread():
    assert informative_groups(torch.tensor([0.1, 0.1 + 1e-6]), [7, 7]) == {7: True}


def test_length_mismatch_is_an_error():
    with pytest.raises(ValueError, match="3 metric values but 2 group ids"):
        informative_groups(torch.zeros(3), ["a", "a"])
