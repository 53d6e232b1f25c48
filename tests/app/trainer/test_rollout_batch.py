"""Rollout samples become the training batch with the layout the roles expect."""

import pytest

from app.trainer.rollout_batch import build_rollout_batch, repeat_per_sample

PAD = 0


def test_layout_left_pads_prompts_and_right_pads_responses():
    batch = build_rollout_batch(
        prompt_ids=[[5, 6, 7], [8]],
        response_ids=[[9], [10, 11]],
        rollout_log_probs=[[-0.5], [-1.0, -2.0]],
        pad_token_id=PAD,
    )
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


def test_a_sampled_group_keeps_each_samples_prompt_fields_and_dumps_a_line_per_sample(tmp_path):
    import json
    from types import SimpleNamespace

    import torch

    from app.trainer.rollout_batch import dump_rollouts, sampled_group
    from serve.types import RolloutSample

    prompts = SimpleNamespace(
        raw_prompt_ids=[[1, 2], [3]],
        uid=["u0", "u1"],
        index=[10, 11],
        data_source=["a", "b"],
        ground_truth=["g0", "g1"],
        extra_info=[{}, {"k": 1}],
        raw_prompt=[[{"role": "user", "content": "p0"}], [{"role": "user", "content": "p1"}]],
    )
    # the service returns the samples of prompt 1 first: every field must follow prompt_index, not the order
    samples = [RolloutSample(1, 0, [7], [-0.5], "stop", 4), RolloutSample(0, 0, [8, 9], [-0.1, -0.2], "length", 4)]
    group = sampled_group(prompts, samples, version=4, pad_token_id=0, temperature=0.7)
    assert group.uid == ["u1", "u0"] and group.dataset_index == [11, 10] and group.ground_truth == ["g1", "g0"]
    assert group.finish_reason == ["stop", "length"] and group.policy_version == 4
    assert group.batch.meta["temperature"] == 0.7
    assert group.batch["input_ids"].tolist() == [[0, 3, 7, 0], [1, 2, 8, 9]]  # left-padded prompt, right-padded reply
    group.batch["token_level_scores"] = torch.tensor([[1.0, 0.0], [0.0, 0.5]])
    group.extras |= {"reward_extra/acc": [1.0, 0.0], "reward_extra/pred": ["7", None], "task_score": [1.0, 0.5]}
    path = dump_rollouts(str(tmp_path / "dump"), step=2, rank=1, group=group, texts=["x", "yz"], log_overlong=True)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert path.name == "2-rank1.jsonl"
    assert [(r["uid"], r["response"], r["score"]) for r in rows] == [("u1", "x", 1.0), ("u0", "yz", 0.5)]
    # each sample's ground truth and the reward's own fields, by sample; the trainer's other extras stay out
    assert [(r["ground_truth"], r["acc"], r["pred"]) for r in rows] == [("g1", 1.0, "7"), ("g0", 0.0, None)]
    assert "task_score" not in rows[0]
    assert "overlong_penalty" not in rows[0]  # asked for, but no penalty was applied to this group
