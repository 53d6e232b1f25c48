"""DAPO's soft overlong punishment (algos.rewards.overlong)."""

import pytest
import torch

from algos.rewards.overlong import overlong_penalty


def test_penalty_ramps_linearly_over_the_buffer():
    # budget 10, buffer 4: no penalty up to 6 tokens, then -1/4 per token, reaching -penalty_factor at 10
    got = overlong_penalty([0, 6, 7, 8, 10], max_response_length=10, buffer_len=4, penalty_factor=1.0)
    assert torch.equal(got, torch.tensor([0.0, 0.0, -0.25, -0.5, -1.0]))


def test_penalty_factor_scales_the_ramp():
    got = overlong_penalty(torch.tensor([9, 10]), max_response_length=10, buffer_len=2, penalty_factor=0.5)
    assert torch.equal(got, torch.tensor([-0.25, -0.5]))


def test_buffer_as_long_as_the_budget_penalises_from_the_first_token():
    got = overlong_penalty([1, 4], max_response_length=4, buffer_len=4, penalty_factor=2.0)
    assert torch.equal(got, torch.tensor([-0.5, -2.0]))


@pytest.mark.parametrize("buffer_len", [0, 11, -1])
def test_buffer_outside_the_budget_is_refused(buffer_len):
    with pytest.raises(ValueError, match="overlong buffer length"):
        overlong_penalty([5], max_response_length=10, buffer_len=buffer_len, penalty_factor=1.0)
