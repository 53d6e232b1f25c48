"""verl's `reward_model.model.input_tokenizer`: which tokenizer decodes the policy's ids for the reward model."""

from types import SimpleNamespace

from app.trainer.scoring import _input_tokenizer


def test_input_tokenizer_is_the_policys_unless_a_path_is_given(tiny_model_dir):
    policy = object()  # any tokenizer: with no path it is passed through untouched
    assert _input_tokenizer(SimpleNamespace(input_tokenizer=None, trust_remote_code=False), policy) is policy
    loaded = _input_tokenizer(SimpleNamespace(input_tokenizer=str(tiny_model_dir), trust_remote_code=False), policy)
    assert loaded is not policy and loaded.decode(loaded.encode("2 + 2 = 4"), skip_special_tokens=True) == "2 + 2 = 4"


def test_reward_manager_batch_reaches_the_reward_manager(tmp_path):
    from app.config.schema import TrainerRunConfig
    from app.trainer.scoring import Scorer

    path = tmp_path / "batched.py"
    path.write_text(
        "def compute_score(data_sources, solution_strs, ground_truths, extra_infos=None):\n"
        "    return [float(s == g) for s, g in zip(solution_strs, ground_truths)]\n"
    )
    cfg = TrainerRunConfig()
    cfg.custom_reward_function.path = str(path)
    cfg.reward_model.reward_manager, cfg.reward_model.num_workers = "batch", 0
    scorer = Scorer(cfg, tokenizer=None)
    scores, _, _ = scorer.score(["4", "5"], ["a", "a"], ["4", "4"], [{}, {}], [[], []])
    assert scores == [1.0, 0.0]
    scorer.close()


def test_remax_greedy_baselines_score_one_greedy_response_per_prompt_for_each_of_its_samples():
    import torch

    from app.trainer.scoring import greedy_baselines

    calls = []

    class Rollout:  # greedy (validation) sampling at the version the caller names: one response per prompt
        def generate(self, prompt_token_ids, *, expect_version, validation=False):
            calls.append((len(prompt_token_ids), expect_version, validation))
            return [SimpleNamespace(response_token_ids=list(p)) for p in prompt_token_ids]

    class Tokenizer:
        def batch_decode(self, ids, skip_special_tokens):
            return [" ".join(map(str, row)) for row in ids]

    class Scorer:  # the greedy response's length in tokens, so each prompt's baseline is known
        def score(self, texts, data_sources, ground_truths, extra_infos, messages):
            return [float(len(t.split())) for t in texts], {}, {}

    prompts = SimpleNamespace(
        raw_prompt_ids=[[1, 2, 3], [4]],
        data_source=["a", "a"],
        ground_truth=["", ""],
        extra_info=[{}, {}],
        raw_prompt=[[], []],
    )
    baselines = greedy_baselines(Rollout(), Scorer(), Tokenizer(), prompts, n=2, version=7)
    assert calls == [(2, 7, True)]
    torch.testing.assert_close(baselines, torch.tensor([3.0, 3.0, 1.0, 1.0]))


def test_score_group_adds_the_overlong_penalty_on_each_responses_last_token():
    import torch

    from app.batch import TensorBatch
    from app.config.schema import OverlongBufferConfig
    from app.trainer.collectives import RankGroup
    from app.trainer.rollout_batch import RolloutGroup
    from app.trainer.scoring import score_group

    class OneRank:
        dp_rank, dp_world_size = 0, 1

        def all_reduce(self, tensor, op):
            return tensor

    class LetterTokenizer:
        def batch_decode(self, ids, skip_special_tokens=True):
            return ["".join(chr(96 + i) for i in row) for row in ids]

    class LengthScorer:
        def score(self, responses, data_sources, ground_truths, extra_infos, messages):
            return [1.0] * len(responses), {"reward/mean": 1.0}, {"acc": [True, True], "pred": ["ab", None]}

    # responses of 2 and 4 tokens, limit 4, buffer 2: the 4-token one is 2 past the buffer's start -> -1 * factor 0.5
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])
    batch = TensorBatch(
        {
            "responses": torch.tensor([[1, 2, 0, 0], [1, 2, 3, 4]]),
            "response_mask": mask,
            "attention_mask": torch.cat([torch.ones(2, 3, dtype=mask.dtype), mask], dim=1),
        }
    )  # 3 prompt
    group = RolloutGroup(
        batch=batch,
        uid=["a", "b"],
        dataset_index=[0, 1],
        data_source=["d", "d"],
        ground_truth=[None, None],
        extra_info=[{}, {}],
        messages=[[], []],
        finish_reason=["stop", "length"],
        policy_version=0,
    )
    metrics = score_group(
        LengthScorer(),
        LetterTokenizer(),
        group,
        OverlongBufferConfig(enable=True, len=2, penalty_factor=0.5),
        4,
        RankGroup(OneRank()),
    )
    assert group.batch["token_level_scores"].tolist() == [[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.5]]
    assert group.extras["overlong_penalty"] == [0.0, -0.5] and group.extras["task_score"] == [1.0, 1.0]
    assert group.extras["acc"] == [True, True]
    assert group.extras["reward_extra/acc"] == [True, True] and group.extras["reward_extra/pred"] == ["ab", None]
    assert metrics == {"reward/mean": 1.0, "reward/overlong_penalty/mean": -0.25, "reward/overlong_ratio": 0.5}
