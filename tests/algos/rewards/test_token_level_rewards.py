import pytest
import torch

from algos.rewards.token_level import scores_to_token_rewards


def test_score_sits_on_last_real_token():
    out = scores_to_token_rewards([1.0, -0.5, 2.0], [3, 1, 0], response_len=4)
    # row 0: 3 tokens -> index 2; row 1: 1 token -> index 0; row 2: empty response gets nothing
    expected = torch.tensor([[0.0, 0.0, 1.0, 0.0], [-0.5, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    assert torch.equal(out, expected)


def test_lengths_are_checked():
    with pytest.raises(ValueError, match="2 scores but 1"):
        scores_to_token_rewards([1.0, 2.0], [1], response_len=3)
    with pytest.raises(ValueError, match=r"\[0, 3\]"):
        scores_to_token_rewards([1.0], [4], response_len=3)
