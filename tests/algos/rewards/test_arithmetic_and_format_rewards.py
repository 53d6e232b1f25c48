import pytest

from algos.rewards import default_compute_score
from algos.rewards.format_reward import compute_score as format_score
from algos.rewards.format_reward import has_expected_format


@pytest.mark.parametrize(
    "response, score, acc, formatted",
    [
        ("3 + 4 = 7\n#### 7", 1.0, 1.0, 1.0),  # right answer in the asked format
        ("3 + 4 = 7", 0.5, 1.0, 0.0),  # right last number, marker missing
        ("#### 8", 0.1, 0.0, 1.0),  # format followed, wrong number
        ("7 is close, #### 8", 0.1, 0.0, 1.0),  # the marked number is graded, not an earlier right one
        ("3 + 4 = 7\n#### 3 = 7", 0.1, 0.0, 1.0),  # the untrained model's habit: the marker before the expression
        ("I think it is 8", 0.0, 0.0, 0.0),
        ("", 0.0, 0.0, 0.0),
    ],
)
def test_arithmetic_reward_grades(response, score, acc, formatted):
    strict = acc * formatted  # right in the asked format
    assert default_compute_score("arithmetic", response, "7") == {
        "score": score,
        "acc": acc,
        "formatted": formatted,
        "strict": strict,
    }


def test_arithmetic_reward_weights_are_configurable():
    assert default_compute_score("arithmetic", "7", "7", unmarked_score=0.0)["score"] == 0.0
    assert default_compute_score("arithmetic", "#### 8", "7", format_score=0.0)["score"] == 0.0


@pytest.mark.parametrize(
    "response, style, expected",
    [
        ("work\n#### 42", "hash", True),
        ("work\n#### 42.\n", "hash", True),
        ("#### 42 and then more text", "hash", False),  # the answer must end the response
        ("#### forty", "hash", False),
        (r"so \boxed{x}", "boxed", True),
        ("so x", "boxed", False),
    ],
)
def test_format_styles(response, style, expected):
    assert has_expected_format(response, style) is expected
    assert format_score(response, style=style) == float(expected)


def test_format_pattern_and_registry_names():
    assert format_score("<answer>1</answer>", pattern=r"<answer>.*</answer>") == 1.0
    assert default_compute_score("format_hash", "#### 3", None) == 1.0
    assert default_compute_score("format_boxed", "#### 3", None) == 0.0
    with pytest.raises(ValueError, match="hash"):
        has_expected_format("x", "xml")
