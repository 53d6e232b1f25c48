"""Code rewards by test cases (verl's prime_code): the program runs in a process of its own against APPS-format tests;
1.0 when every test passes, else the passing share of the first ten."""

import json
import time

import numpy as np
import pytest

from algos.rewards import default_compute_score
from algos.rewards.code_tests import (
    CODE_SOURCES,
    compute_score,
    extract_code,
    parse_tests,
    printed_output_matches,
    returned_value_matches,
    run_tests,
)

ADD = {"inputs": ["1 2\n", "3 4\n", "5 6\n"], "outputs": ["3\n", "7\n", "11\n"]}


def fenced(code: str) -> str:
    return f"Here it is.\n```python\n{code}\n```\nDone."


def test_the_last_python_block_is_the_program():
    assert extract_code("```python\nfirst\n```\ntext\n```python\nsecond\n```") == "\nsecond\n"
    assert extract_code("```python\nnever closed") == "\nnever closed"
    assert extract_code("<think>```python\nthought\n```</think>print(1)") == "print(1)"  # thoughts removed first
    assert extract_code("print(2)") == "print(2)"  # pure code


def test_tests_parse_from_json_text_mappings_and_arrays():
    assert parse_tests(json.dumps(ADD)) == (ADD["inputs"], ADD["outputs"], None)
    call = {"fn_name": "f", "inputs": np.array(["1"]), "outputs": np.array(["2"])}  # as parquet gives lists back
    assert parse_tests(call) == (["1"], ["2"], "f")
    with pytest.raises(ValueError, match="'inputs' and 'outputs'"):
        parse_tests({"inputs": []})
    with pytest.raises(ValueError, match="2 inputs but 1 outputs"):
        parse_tests({"inputs": ["a", "b"], "outputs": ["c"]})
    with pytest.raises(ValueError, match=r"^code tests are not valid JSON \(Expecting .*\): '\{inputs: \[1\]\}'"):
        parse_tests("{inputs: [1]}")


def test_printed_output_is_compared_by_lines_then_tokens_then_numbers():
    assert printed_output_matches("3  \n\n7\n", "3\n7")  # trailing spaces and blank lines do not count
    assert printed_output_matches("3 7\n", ["3", "7"])  # the same tokens on other lines; expected as a list of lines
    assert printed_output_matches("0.3333333\n", "0.33333333333")  # within a relative 1e-5
    assert not printed_output_matches("0.3334\n", "0.3333")  # 3e-4 apart
    assert not printed_output_matches("3\n", "3\n7")
    assert not printed_output_matches("yes\n", "YES")


def test_a_returned_value_matches_the_output_or_its_only_item():
    assert returned_value_matches([1, 2], [1, 2])
    assert returned_value_matches(3, [3])  # APPS often wraps the value in a list
    assert not returned_value_matches([3], [[3], [4]])


def test_a_stdin_program_scores_all_or_the_passing_share():
    # input(), sys.stdin.buffer and open(0) all read the test's input
    assert compute_score(fenced("a, b = map(int, input().split())\nprint(a + b)"), ADD) == {"score": 1.0, "acc": True}
    buffered = "import sys\na, b = map(int, sys.stdin.buffer.read().split())\nprint(a + b if a < 5 else 0)"
    assert compute_score(fenced(buffered), json.dumps(ADD)) == {"score": 2 / 3, "acc": False}
    assert compute_score(fenced("print(sum(map(int, open(0).read().split())))\nexit()"), ADD)["score"] == 1.0
    assert compute_score(fenced("print(3"), ADD) == {"score": 0.0, "acc": False}  # a syntax error fails every test


def test_only_the_first_ten_tests_make_the_partial_score():
    tests = {"inputs": [str(i) for i in range(12)], "outputs": [str(i) for i in range(10)] + ["x", "y"]}
    # tests 11 and 12 fail: not every test passes, but the first ten do (verl's continuous score)
    assert compute_score(fenced("print(input())"), tests) == {"score": 1.0, "acc": False}
    tests["outputs"][0] = "wrong"
    assert compute_score(fenced("print(input())"), tests) == {"score": 0.9, "acc": False}


def test_a_function_or_a_solution_method_is_called_with_each_tests_arguments():
    tests = {"fn_name": "pair", "inputs": ["1\n2", [[3], [4]]], "outputs": ["[1, 2]", [[3, 4]]]}
    returns_tuple = "def pair(a, b):\n    return (a, b) if isinstance(a, int) else a + b"
    assert compute_score(returns_tuple, tests) == {"score": 1.0, "acc": True}  # a tuple compares as a list
    method = "class Solution:\n    def pair(self, a, b):\n        print('noise')\n        return [a, b]"
    assert compute_score(fenced(method), tests) == {"score": 0.5, "acc": False}  # [[3], [4]] is not [3, 4]
    assert compute_score("def other(a, b):\n    return 0", tests)["score"] == 0.0  # no such function


def test_a_hanging_program_costs_one_timeout_and_fails_the_rest():
    started = time.monotonic()
    results = run_tests(
        "import time\nif int(input()) == 2:\n    time.sleep(60)\nprint('ok')", ["1", "2", "3"], None, 0.5
    )
    assert results == [{"out": "ok\n"}, {"error": "timeout"}, {"error": "not run"}]
    assert time.monotonic() - started < 5  # one timeout, not three, and not the sleep


def test_a_program_over_the_memory_cap_fails_its_test_and_the_next_runs():
    hog = "n = int(input())\nblock = bytearray(n << 30)\nprint(len(block) >> 30)"
    results = run_tests(hog, ["2", "0"], None)
    assert results[0]["error"].startswith("MemoryError") and results[1] == {"out": "0\n"}


@pytest.mark.parametrize("source", CODE_SOURCES)
def test_every_code_source_uses_it(source):
    assert default_compute_score(source, fenced("print(int(input()) * 2)"), {"inputs": ["4"], "outputs": ["8"]}) == {
        "score": 1.0,
        "acc": True,
    }


def test_a_result_line_cut_short_counts_as_not_run():
    from algos.rewards.code_tests import _complete_lines

    assert _complete_lines('{"out": "1\\n"}\n{"out": "2') == [{"out": "1\n"}]
