import ast
import collections
import operator

import pytest

from algos.rewards import default_compute_score
from app.data.arithmetic_task import LEVEL_WEIGHTS, arithmetic_rows, generate_problems, generate_splits

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv}


def _evaluate(expression):
    """Integer value of an expression made of + - * // and parentheses (independent of the generator's code)."""

    def walk(node):
        if isinstance(node, ast.BinOp):
            return _OPS[type(node.op)](walk(node.left), walk(node.right))
        if isinstance(node, ast.Constant):
            return node.value
        raise ValueError(ast.dump(node))

    return walk(ast.parse(expression, mode="eval").body)


def test_answers_match_their_expressions_and_numbers_in_question():
    for p in generate_problems(2000, seed=0, level_weights=(1, 1, 1, 1)):  # every level equally often
        assert _evaluate(p.expression) == p.answer >= 0, p
        # every operand of the computation is stated in the question
        for number in [n.value for n in ast.walk(ast.parse(p.expression)) if isinstance(n, ast.Constant)]:
            assert str(number) in p.question, p


def test_deterministic_per_seed_and_split():
    assert generate_problems(50, seed=3) == generate_problems(50, seed=3)
    assert generate_problems(50, seed=3) != generate_problems(50, seed=4)
    assert generate_problems(50, seed=3, split="train") != generate_problems(50, seed=3, split="test")


def test_mostly_easy_levels():
    counts = collections.Counter(p.level for p in generate_problems(4000, seed=1))
    assert set(counts) == {1, 2, 3, 4}
    for level, weight in zip((1, 2, 3, 4), LEVEL_WEIGHTS):
        assert abs(counts[level] / 4000 - weight) < 0.03
    assert counts[1] > counts[2] > counts[3] > counts[4]


def test_level_weights_choose_the_mix():
    assert {p.level for p in generate_problems(200, seed=1, level_weights=(0, 0, 0, 1))} == {4}
    train, test = generate_splits(50, 20, seed=1, level_weights=(0, 1, 0, 1))
    assert {p.level for p in train} == {p.level for p in test} == {2, 4}
    for bad in ((1.0,), (1, 1, -1, 1), (0, 0, 0, 0)):
        with pytest.raises(ValueError, match="level_weights"):
            generate_problems(3, seed=0, level_weights=bad)


def test_a_train_mix_of_its_own_leaves_the_test_split_as_it_was():
    train, test = generate_splits(300, 100, seed=1, train_level_weights=(0.45, 0.30, 0, 0))
    assert {p.level for p in train} == {1, 2}
    assert test == generate_splits(300, 100, seed=1)[1]  # validation measures the same problems either way
    assert {p.level for p in test} == {1, 2, 3, 4}
    assert not {p.question for p in train} & {p.question for p in test}
    # without a mix of its own, train draws with the test split's: the split as it always was
    assert generate_splits(300, 100, seed=1, train_level_weights=LEVEL_WEIGHTS) == generate_splits(300, 100, seed=1)
    with pytest.raises(ValueError, match=r"^train_level_weights needs 4 entries"):
        generate_splits(3, 3, seed=0, train_level_weights=(1, 1))
    with pytest.raises(ValueError, match=r"^train_level_weights must be >= 0 with a positive sum"):
        generate_splits(3, 3, seed=0, train_level_weights=(0, 0, 0, 0))


def test_rows_are_verl_schema_and_reward_accepts_the_right_answer():
    problems = generate_problems(20, seed=0, split="test")
    rows = arithmetic_rows(problems, "test")
    for i, (p, row) in enumerate(zip(problems, rows)):
        assert row["data_source"] == "arithmetic"
        content = row["prompt"][0]["content"]
        assert content.startswith(p.question) and "#### <answer>" in content
        assert row["reward_model"]["ground_truth"] == str(p.answer)
        assert row["extra_info"] == {"split": "test", "index": i, "level": p.level, "expression": p.expression}
        assert default_compute_score("arithmetic", f"So the answer is\n#### {p.answer}", str(p.answer))["score"] == 1.0
        assert default_compute_score("arithmetic", f"#### {p.answer + 1}", str(p.answer))["score"] < 1.0


def test_bad_weights():
    with pytest.raises(ValueError, match="4 entries"):
        generate_problems(3, seed=0, level_weights=(1.0,))


def test_splits_share_no_question_and_test_is_the_plain_test_stream():
    train, test = generate_splits(3000, 300, seed=0)
    assert len(train) == 3000 and len(test) == 300
    assert test == generate_problems(300, seed=0, split="test")  # validation numbers stay comparable across versions
    assert not {p.question for p in train} & {p.question for p in test}
    # without the exclusion the two streams do share questions (the easy levels have few forms)
    plain = generate_problems(3000, seed=0, split="train")
    assert {p.question for p in plain} & {p.question for p in test}
