import pytest

from algos.rewards import (
    UnknownDataSourceError,
    default_compute_score,
    get_reward_fn,
    ground_truth_check,
    known_data_sources,
    load_callable,
    register_reward,
    unregister_reward,
)


def test_builtin_sources_are_registered():
    for name in ("openai/gsm8k", "gsm8k", "math", "lighteval/MATH", "arithmetic", "format_hash", "format_boxed"):
        assert name in known_data_sources()


def test_unknown_data_source_lists_known_names():
    with pytest.raises(UnknownDataSourceError) as err:
        default_compute_score("no/such-source", "#### 1", "1")
    message = str(err.value)
    assert "no/such-source" in message
    assert "openai/gsm8k" in message and "arithmetic" in message


def test_decorator_registers_under_every_alias():
    @register_reward("test/alias-a", "test/alias-b")
    def exact(solution_str, ground_truth, extra_info=None):
        return float(solution_str == ground_truth)

    try:
        assert get_reward_fn("test/alias-a") is exact
        assert default_compute_score("test/alias-b", "x", "x") == 1.0
        assert default_compute_score("test/alias-b", "x", "y") == 0.0
    finally:
        unregister_reward("test/alias-a")
        unregister_reward("test/alias-b")


def test_reregistering_a_name_needs_overwrite():
    register_reward("test/dup", fn=lambda s, g, e=None: 1.0)
    try:
        with pytest.raises(ValueError, match="test/dup"):
            register_reward("test/dup", fn=lambda s, g, e=None: 0.0)
        register_reward("test/dup", fn=lambda s, g, e=None: 0.5, overwrite=True)
        assert default_compute_score("test/dup", "", "") == 0.5
    finally:
        unregister_reward("test/dup")


def test_module_function_string_is_imported_on_first_lookup():
    register_reward("test/lazy", fn="algos.rewards.gsm8k:compute_score")
    try:
        from algos.rewards.gsm8k import compute_score

        assert get_reward_fn("test/lazy") is compute_score
    finally:
        unregister_reward("test/lazy")


def test_kwargs_reach_the_rule():
    # flexible extraction finds the last number without the #### marker; strict finds nothing
    assert default_compute_score("openai/gsm8k", "the answer is 42", "42") == 0.0
    assert default_compute_score("openai/gsm8k", "the answer is 42", "42", method="flexible") == 1.0


def test_load_callable_from_file(tmp_path):
    path = tmp_path / "my_reward.py"
    path.write_text("def score_it(solution_str, ground_truth, extra_info=None):\n    return 0.25\n")
    assert load_callable(f"{path}:score_it")("", "") == 0.25
    with pytest.raises(AttributeError, match="score_it"):  # the error lists what the file does define
        load_callable(f"{path}:missing")


def test_load_callable_rejects_bad_spec():
    with pytest.raises(ValueError, match="module.path:function"):
        load_callable("no_colon_here")


def test_a_name_ending_in_a_star_matches_by_prefix_and_exact_names_win():
    from algos.rewards import math_dapo

    # verl's default_compute_score: data_source == "math_dapo" or data_source.startswith("aime")
    assert (
        get_reward_fn("aime_2024") is get_reward_fn("aime25") is get_reward_fn("math_dapo") is math_dapo.compute_score
    )
    assert "aime*" in known_data_sources()
    with pytest.raises(UnknownDataSourceError, match="'aim'"):
        get_reward_fn("aim")  # shorter than the prefix

    def exact(solution_str, ground_truth, extra_info=None):
        return 0.5

    def longer_prefix(solution_str, ground_truth, extra_info=None):
        return 0.25

    register_reward("aime_2024", fn=exact)
    register_reward("aime_20*", fn=longer_prefix)
    try:
        assert get_reward_fn("aime_2024") is exact
        assert get_reward_fn("aime_2025") is longer_prefix  # the longest matching prefix
        assert get_reward_fn("aime_1999") is math_dapo.compute_score
    finally:
        unregister_reward("aime_2024")
        unregister_reward("aime_20*")


def test_a_rules_ground_truth_check_is_found_through_its_name_or_prefix():
    from algos.rewards.code_tests import parse_tests
    from algos.rewards.qa_exact_match import check_targets

    assert ground_truth_check("apps") is parse_tests and ground_truth_check("searchR1_nq") is check_targets
    assert ground_truth_check("openai/gsm8k") is None and ground_truth_check("no/such-source") is None

    def positive(ground_truth):
        if ground_truth <= 0:
            raise ValueError("not positive")

    register_reward("test_checked*", fn=lambda s, g, e=None: 1.0, check_ground_truth=positive)
    try:
        assert ground_truth_check("test_checked_b") is positive
        register_reward("test_checked*", fn=lambda s, g, e=None: 0.0, overwrite=True)
        assert ground_truth_check("test_checked_b") is None  # a rule registered over it does not keep its check
    finally:
        unregister_reward("test_checked*")
