"""Code rewards by test cases (verl's ``prime_code``, for the data_sources ``codecontests``, ``apps``, ``codeforces``
and ``taco``): the response's last ```python block (the whole response without one; ``<think>...</think>`` removed) runs
against the ground truth's tests, and the score is 1.0 when every test passes, else the share of the first ten tests
that pass (verl's continuous score for these sources).

The ground truth is APPS's test format, as JSON text or a mapping: ``{"inputs": [...], "outputs": [...]}`` for a
program that reads standard input and prints (an output matches when its lines, stripped, match; else its
whitespace-separated tokens, numbers within a relative 1e-5), or with ``"fn_name"`` for a function (or a method of a
class ``Solution``) called with each input's arguments (a list, or a string of one JSON value per line) and compared
with the output (or the output's only element), tuples as lists.

Each test may run ``timeout_s`` seconds (a reward kwarg, 5 by default); after a test that runs out of time the rest
count as failed without running, so a program that hangs costs one timeout (``reward_model.timeout_s``, 10 s by
default, bounds the whole call: raise it for problems whose tests take long). This runs model-written code on the
machine that scores it: in a separate ``python -I`` process in an empty temporary folder, its memory and CPU time
capped, killed when the tests' time is up. That bounds mistakes, not malice: it is not
a sandbox (verl's ``sandbox_fusion.url`` is not supported here).
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from algos.rewards.registry import register_reward

HARNESS = Path(__file__).with_name("code_harness.py")
CODE_SOURCES = ("codecontests", "apps", "codeforces", "taco")
PARTIAL_TESTS = 10  # verl: the continuous score reads the first ten tests
TIMEOUT_S = 5.0  # per test; verl gives its first run, of all the tests at once, 5 s
MEMORY_BYTES = 1 << 30  # the program's address space
REL_TOL = 1e-5  # numbers in printed output, as APPS's np.allclose
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)


def extract_code(response: str) -> str:
    """The last ```python block of `response` (its text after the last fence when it is never closed), without
    ``<think>`` sections; the whole response when it has no such fence."""
    return _THINK.sub("", response).split("```python")[-1].split("```")[0]


def parse_tests(ground_truth: Any) -> tuple[list[Any], list[Any], str | None]:
    """(inputs, outputs, fn_name) of APPS-format tests; ValueError naming what is wrong."""
    tests = ground_truth
    if isinstance(ground_truth, (str, bytes)):
        try:
            tests = json.loads(ground_truth)
        except json.JSONDecodeError as err:
            raise ValueError(f"code tests are not valid JSON ({err}): {ground_truth[:120]!r}") from None
    if not isinstance(tests, Mapping) or "inputs" not in tests or "outputs" not in tests:
        raise ValueError(f"code tests need a mapping with 'inputs' and 'outputs', got {str(tests)[:120]!r}")
    inputs, outputs = list(_plain(tests["inputs"])), list(_plain(tests["outputs"]))
    if len(inputs) != len(outputs):
        raise ValueError(f"code tests: {len(inputs)} inputs but {len(outputs)} outputs")
    return inputs, outputs, tests.get("fn_name") or None


def _plain(value: Any) -> Any:
    return value.tolist() if hasattr(value, "tolist") else value  # numpy arrays, as parquet gives lists back


def _arguments(test_input: Any) -> list[Any]:
    if isinstance(test_input, str):  # one JSON value per line
        return [json.loads(line) for line in test_input.splitlines() if line.strip()]
    return list(_plain(test_input))


def _expected_value(test_output: Any) -> Any:
    if isinstance(test_output, str):
        try:
            return json.loads(test_output)
        except json.JSONDecodeError:
            return test_output
    return _plain(test_output)


def printed_output_matches(printed: str, expected: Any) -> bool:
    """APPS's lenient comparison of a program's stdout with the expected text (a string or a list of lines)."""
    expected = "\n".join(expected) if isinstance(expected, list) else str(expected)
    lines = [line.strip() for line in printed.splitlines() if line.strip()]
    if lines == [line.strip() for line in expected.splitlines() if line.strip()]:
        return True
    got, want = printed.split(), expected.split()
    return len(got) == len(want) and all(_tokens_match(g, w) for g, w in zip(got, want))


def _tokens_match(got: str, want: str) -> bool:
    if got == want:
        return True
    try:
        return math.isclose(float(got), float(want), rel_tol=REL_TOL, abs_tol=1e-8)
    except ValueError:
        return False


def returned_value_matches(returned: Any, expected: Any) -> bool:
    """A function's result (after a JSON round trip: tuples as lists) against the expected value or its only item."""
    if returned == expected:
        return True
    return isinstance(expected, list) and len(expected) == 1 and returned == expected[0]


def run_tests(code: str, inputs: Sequence[Any], fn_name: str | None, timeout_s: float = TIMEOUT_S) -> list[dict]:
    """One result per test, from one harness process: {"out": ...} or {"error": ...}; tests the process did not
    reach (it crashed, or the time for all of them ran out) get {"error": "not run"}."""
    payload = [_arguments(x) for x in inputs] if fn_name else [_stdin_text(x) for x in inputs]
    with tempfile.TemporaryDirectory(prefix="code-reward-") as folder:
        spec, results = Path(folder) / "spec.json", Path(folder) / "results.jsonl"
        budget = timeout_s * len(inputs) + 5.0  # every test at its limit, plus the interpreter's start
        limits = {"memory_bytes": MEMORY_BYTES, "cpu_s": math.ceil(budget)}
        spec.write_text(
            json.dumps({"code": code, "fn_name": fn_name, "inputs": payload, "timeout_s": timeout_s, **limits})
        )
        try:
            subprocess.run(
                [sys.executable, "-I", str(HARNESS), str(spec), str(results)],
                cwd=folder,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=budget,
                env={"PATH": os.environ.get("PATH", ""), "PYTHONHASHSEED": "0"},
            )
        except subprocess.TimeoutExpired:
            pass  # killed: what it wrote counts
        done = _complete_lines(results.read_text()) if results.exists() else []
    return done + [{"error": "not run"}] * (len(inputs) - len(done))


def _complete_lines(text: str) -> list[dict]:
    """The results written in full (a process killed mid-write leaves its last line cut)."""
    done = []
    for line in text.splitlines():
        try:
            done.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return done


def _stdin_text(test_input: Any) -> str:
    return "\n".join(map(str, test_input)) if isinstance(test_input, list) else str(test_input)


def passed(results: Sequence[dict], outputs: Sequence[Any], fn_name: str | None) -> list[bool]:
    """Whether each test's result matches its expected output."""
    if fn_name:
        return [("out" in r and returned_value_matches(r["out"], _expected_value(o))) for r, o in zip(results, outputs)]
    return [("out" in r and printed_output_matches(r["out"], o)) for r, o in zip(results, outputs)]


@register_reward(*CODE_SOURCES, check_ground_truth=parse_tests)
def compute_score(
    solution_str: str,
    ground_truth: Any,
    extra_info: dict | None = None,
    timeout_s: float = TIMEOUT_S,
    **_: Any,
) -> dict[str, Any]:
    """``{"score": 1.0 if every test passes, else the passing share of the first ten; "acc": every test passed}``."""
    inputs, outputs, fn_name = parse_tests(ground_truth)
    if not inputs:
        raise ValueError("code tests: the ground truth holds no test")
    code = extract_code(solution_str)
    every = passed(run_tests(code, inputs, fn_name, timeout_s), outputs, fn_name)
    if all(every):
        return {"score": 1.0, "acc": True}
    first = every[:PARTIAL_TESTS]
    return {"score": sum(first) / len(first), "acc": False}
