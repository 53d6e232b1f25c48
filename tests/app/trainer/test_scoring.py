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
    path.write_text("def compute_score(data_sources, solution_strs, ground_truths, extra_infos=None):\n"
                    "    return [float(s == g) for s, g in zip(solution_strs, ground_truths)]\n")
    cfg = TrainerRunConfig()
    cfg.custom_reward_function.path = str(path)
    cfg.reward_model.reward_manager, cfg.reward_model.num_workers = "batch", 0
    scorer = Scorer(cfg, tokenizer=None)
    scores, _, _ = scorer.score(["4", "5"], ["a", "a"], ["4", "4"], [{}, {}], [[], []])
    assert scores == [1.0, 0.0]
    scorer.close()
