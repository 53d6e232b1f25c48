"""The reward manager: custom functions in worker processes, time limits, failures, dict results, order."""

import textwrap

import pytest
import torch

from app.config.schema import RewardModelConfig
from app.rewards import RewardComputeError, RewardConfigError, RewardFnSpec, RewardManager, decode_responses

# A user reward file whose behaviour is chosen by the response text.
USER_REWARD = textwrap.dedent(
    """
    import os, time

    def compute_score(data_source, solution_str, ground_truth, extra_info=None, bonus=0.0):
        if solution_str == "hang":
            time.sleep(3600)  # a reward call that never returns
        if solution_str == "boom":
            raise ZeroDivisionError("user code failed")
        if solution_str == "die":
            os._exit(7)
        if solution_str == "nan":
            return float("nan")
        if solution_str == "text":
            return "high"
        if solution_str == "nodict":
            return {"acc": 1.0}
        if solution_str == "wait":  # returns 1.0 only if a "signal" sample runs while this one waits
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                if os.path.exists(extra_info["flag"]):
                    return 1.0
                time.sleep(0.01)
            return 0.0
        if solution_str == "signal":
            open(extra_info["flag"], "w").close()
            return 1.0
        if solution_str.startswith("dict"):
            return {"score": 0.5, "acc": solution_str == "dict1", "length": len(solution_str)}
        return float(solution_str == ground_truth) + bonus
    """
)


@pytest.fixture
def reward_file(tmp_path):
    path = tmp_path / "user_reward.py"
    path.write_text(USER_REWARD)
    return str(path)


def manager_of(compute_score=None, **settings) -> RewardManager:
    """A RewardManager with the config's reward_model defaults, except `settings`."""
    rm = RewardModelConfig()
    defaults = dict(
        num_workers=rm.num_workers,
        timeout_s=rm.timeout_s,
        on_error=rm.on_error,
        max_failed_fraction=rm.max_failed_fraction,
    )
    return RewardManager(compute_score, **{**defaults, **settings})


def _score(manager, responses, truths=None, **kwargs):
    truths = truths if truths is not None else ["7"] * len(responses)
    return manager.score(responses, [f"src{i}" for i in range(len(responses))], truths, **kwargs)


def test_builtin_rules_by_default():
    with manager_of(num_workers=1, timeout_s=30) as manager:
        result = manager.score(
            ["#### 7", "#### 8", r"\boxed{\frac12}"], ["openai/gsm8k", "openai/gsm8k", "math"], ["7", "7", "0.5"]
        )
    assert result.scores == [1.0, 0.0, 1.0]
    assert result.metrics["reward/score/mean"] == pytest.approx(2 / 3, abs=1e-12)


def test_results_come_back_in_order_from_parallel_workers(reward_file, tmp_path):
    flag = str(tmp_path / "flag")
    responses = ["wait", "7", "x", "signal", "7"]
    infos = [{"flag": flag}] * 5
    with manager_of(RewardFnSpec(reward_file), num_workers=2, timeout_s=30) as manager:
        result = _score(manager, responses, extra_infos=infos)
    # "wait" saw the flag, so "signal" ran in the other worker at the same time; order follows the input
    assert result.scores == [1.0, 1.0, 0.0, 1.0, 1.0]


def test_reward_kwargs_are_passed(reward_file):
    spec = RewardFnSpec(reward_file, reward_kwargs={"bonus": 0.25})
    with manager_of(spec, num_workers=1, timeout_s=30) as manager:
        assert _score(manager, ["7", "6"]).scores == [1.25, 0.25]


def test_dict_results_give_extra_metrics(reward_file):
    with manager_of(RewardFnSpec(reward_file), num_workers=2, timeout_s=30) as manager:
        result = _score(manager, ["dict1", "dict2", "7"])
    assert result.scores == [0.5, 0.5, 1.0]
    assert result.extra == {"acc": [True, False, None], "length": [5, 5, None]}
    assert result.metrics["reward/extra/acc/mean"] == 0.5  # True, False -> 1, 0
    assert result.metrics["reward/extra/length/mean"] == 5.0


def test_hung_sample_times_out_and_counts_as_zero(reward_file):
    with manager_of(RewardFnSpec(reward_file), num_workers=2, timeout_s=1.0, on_error="zero") as manager:
        result = _score(manager, ["7", "hang", "7", "7"])
        assert result.scores == [1.0, 0.0, 1.0, 1.0]
        assert result.metrics["reward/timeouts"] == 1.0 and result.metrics["reward/errors"] == 0.0
        assert "did not finish within 1s" in result.failures[1]
        # the killed worker was replaced: the next batch still runs on two workers
        assert _score(manager, ["7", "7"]).scores == [1.0, 1.0]
        assert manager._pool.workers_replaced == 1


def test_hung_sample_raises_naming_it(reward_file):
    with manager_of(RewardFnSpec(reward_file), num_workers=2, timeout_s=1.0, on_error="raise") as manager:
        with pytest.raises(RewardComputeError, match=r"sample 2 \(data_source='src2'\) did not finish within 1s"):
            _score(manager, ["7", "7", "hang"])
        assert _score(manager, ["7"]).scores == [1.0]  # still usable afterwards


def test_exception_raises_naming_sample_and_error(reward_file):
    with manager_of(RewardFnSpec(reward_file), num_workers=2, timeout_s=30, on_error="raise") as manager:
        with pytest.raises(RewardComputeError) as err:
            _score(manager, ["7", "boom", "7"])
    message = str(err.value)
    assert "sample 1 (data_source='src1') raised ZeroDivisionError: user code failed" in message
    assert "user_reward.py" in message  # the worker's traceback is included


def test_exception_zero_mode_counts_errors(reward_file):
    # 5 of 7 fail: max_failed_fraction=1.0 lets the batch through to show how each failure is counted
    with manager_of(
        RewardFnSpec(reward_file), num_workers=2, timeout_s=30, on_error="zero", max_failed_fraction=1.0
    ) as manager:
        result = _score(manager, ["boom", "7", "nan", "text", "nodict", "die", "7"])
    assert result.scores == [0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0]
    assert result.metrics["reward/errors"] == 5.0 and result.metrics["reward/timeouts"] == 0.0
    assert "ZeroDivisionError" in result.failures[0]
    assert "non-finite" in result.failures[2]
    assert "not a number" in result.failures[3]
    assert "without 'score'" in result.failures[4]
    assert "exit code 7" in result.failures[5]


def test_in_process_mode(reward_file):
    manager = manager_of(RewardFnSpec(reward_file), num_workers=0, on_error="zero")
    result = _score(manager, ["7", "boom"])
    assert result.scores == [1.0, 0.0] and result.metrics["reward/errors"] == 1.0


def test_token_level_rewards_at_last_response_token(reward_file):
    with manager_of(RewardFnSpec(reward_file), num_workers=1, timeout_s=30) as manager:
        result = _score(manager, ["7", "6", "7"], response_lengths=[2, 3, 1], response_len=4)
    expected = torch.tensor([[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]])
    assert torch.equal(result.token_level_rewards, expected)


def test_bad_custom_reward_config(tmp_path, reward_file):
    with pytest.raises(RewardConfigError, match="file not found"):
        manager_of(RewardFnSpec(str(tmp_path / "missing.py")))
    with pytest.raises(RewardConfigError, match="no function 'score_fn'; functions there: compute_score"):
        manager_of(RewardFnSpec(reward_file, name="score_fn"))
    broken = tmp_path / "broken.py"
    broken.write_text("import not_a_module_anywhere\n")
    with pytest.raises(RewardConfigError, match="importing .*broken.py failed: ModuleNotFoundError"):
        manager_of(RewardFnSpec(str(broken)))
    with pytest.raises(ValueError, match="on_error"):
        manager_of(on_error="ignore")


def test_mismatched_lengths():
    manager = manager_of(num_workers=0)
    with pytest.raises(ValueError, match="responses \\(2\\), data_sources \\(1\\)"):
        manager.score(["a", "b"], ["x"], ["1", "2"])


def test_decode_responses_uses_mask(smollm2_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    a = tokenizer("#### 7", add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    b = tokenizer("no", add_special_tokens=False)["input_ids"]
    width = max(len(a), len(b)) + 1
    ids = torch.full((2, width), tokenizer.pad_token_id)
    mask = torch.zeros((2, width), dtype=torch.long)
    for row, seq in enumerate((a, b)):
        ids[row, : len(seq)] = torch.tensor(seq)
        mask[row, : len(seq)] = 1
    texts, lengths = decode_responses(tokenizer, ids, mask)
    assert texts == ["#### 7", "no"] and lengths == [len(a), len(b)]  # EOS is counted but not decoded
    manager = manager_of(num_workers=0)
    result = manager.score_token_batch(tokenizer, ids, mask, ["openai/gsm8k"] * 2, ["7", "7"])
    assert result.token_level_rewards.shape == (2, width)
    assert result.token_level_rewards[0, len(a) - 1] == 1.0 and result.token_level_rewards.sum() == 1.0


def test_spec_from_verl_config_section():
    assert RewardFnSpec.from_config({"path": None, "name": "compute_score"}) == RewardFnSpec()
    assert RewardFnSpec.from_config(None) == RewardFnSpec()
    spec = RewardFnSpec.from_config({"path": "/x/r.py", "name": "fn", "reward_kwargs": {"a": 1}})
    assert spec == RewardFnSpec("/x/r.py", "fn", {"a": 1})


def test_unknown_data_source_with_builtin_rules_raises_even_in_zero_mode():
    from algos.rewards import UnknownDataSourceError

    manager = manager_of(num_workers=0, on_error="zero")
    with pytest.raises(UnknownDataSourceError, match="'my/new-data'.*known: .*openai/gsm8k"):
        manager.score(["#### 1"], ["my/new-data"], ["1"])


def test_a_batch_where_most_calls_fail_stops_naming_the_first_failure(reward_file):
    # 2 of 4 failed: exactly the 0.5 allowed, so the batch is scored; 3 of 4 is more, so the run stops
    with manager_of(
        RewardFnSpec(reward_file), num_workers=1, timeout_s=30, on_error="zero", max_failed_fraction=0.5
    ) as manager:
        assert _score(manager, ["7", "boom", "boom", "7"]).scores == [1.0, 0.0, 0.0, 1.0]
        with pytest.raises(
            RewardComputeError,
            match=r"3 of 4 reward calls failed in one batch, more than "
            r"max_failed_fraction=0\.5 allows; the first, sample 0 "
            r"\(data_source='src0'\): raised ZeroDivisionError",
        ):
            _score(manager, ["boom", "7", "boom", "boom"])


BATCHED = """
import os

def compute_score(data_sources, solution_strs, ground_truths, extra_infos=None, bonus=0.0):
    # one call for the whole batch: the pid shows every score came from the same call
    if "boom" in solution_strs:
        raise RuntimeError("the batch failed")
    if "short" in solution_strs:
        return [1.0]
    return [{"score": float(s == g) + bonus, "calls": os.getpid()} for s, g in zip(solution_strs, ground_truths)]
"""


def test_batched_manager_calls_once_with_lists(tmp_path):
    path = tmp_path / "batched.py"
    path.write_text(BATCHED)
    spec = RewardFnSpec(str(path), reward_kwargs={"bonus": 0.5})
    with manager_of(spec, num_workers=1, timeout_s=30, on_error="zero", batched=True) as manager:
        result = _score(manager, ["7", "6", "7"])
        assert result.scores == [1.5, 0.5, 1.5]
        assert len(set(result.extra["calls"])) == 1  # one call scored all three
    with manager_of(spec, num_workers=0, on_error="zero", max_failed_fraction=1.0, batched=True) as manager:
        failed = _score(manager, ["7", "boom"])  # a failed call fails every sample of its batch
        assert failed.scores == [0.0, 0.0] and failed.metrics["reward/errors"] == 2.0
        assert "RuntimeError: the batch failed" in failed.failures[0]
        wrong = _score(manager, ["7", "short"])
        assert "returned 1 results for 2 responses" in wrong.failures[1]
