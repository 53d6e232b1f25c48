"""Rollout samples become the training batch with the layout the roles expect."""
import pytest

from app.trainer.rollout_batch import build_rollout_batch, repeat_per_sample

PAD = 0


def test_layout_left_pads_prompts_and_right_pads_responses():
    batch = build_rollout_batch(prompt_ids=[[5, 6, 7], [8]], response_ids=[[9], [10, 11]],
                                rollout_log_probs=[[-0.5], [-1.0, -2.0]], pad_token_id=PAD)
    # P = 3 (longest prompt), R = 2 (longest response): every response starts at column 3
    assert batch["input_ids"].tolist() == [[5, 6, 7, 9, PAD], [PAD, PAD, 8, 10, 11]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1, 0], [0, 0, 1, 1, 1]]
    # positions count real tokens only, so the left padding does not shift the prompt's positions
    assert batch["position_ids"].tolist() == [[0, 1, 2, 3, 3], [0, 0, 0, 1, 2]]
    assert batch["responses"].tolist() == [[9, PAD], [10, 11]]
    assert batch["response_mask"].tolist() == [[1, 0], [1, 1]]
    assert batch["rollout_log_probs"].tolist() == [[-0.5, 0.0], [-1.0, -2.0]]


def test_empty_response_keeps_one_masked_column():
    batch = build_rollout_batch([[1, 2]], [[]], [[]], PAD)
    assert batch["responses"].shape == (1, 1)
    assert batch["response_mask"].sum() == 0


def test_mismatched_logprobs_name_the_row():
    with pytest.raises(ValueError, match="row 1: 2 response tokens but 1 rollout log-probs"):
        build_rollout_batch([[1], [2]], [[3], [4, 5]], [[-1.0], [-1.0]], PAD)


def test_repeat_per_sample_is_prompt_major():
    assert repeat_per_sample(["a", "b"], 3) == ["a", "a", "a", "b", "b", "b"]
