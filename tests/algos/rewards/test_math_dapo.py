"""DAPO's math reward (verl's math_dapo): the last "Answer:" of the response's last 300 characters, Minerva-normalised,
equal as a string to the normalised ground truth scores 1.0, anything else -1.0."""

import pytest

from algos.rewards import default_compute_score
from algos.rewards.math_dapo import compute_score, normalize_final_answer


@pytest.mark.parametrize(
    "raw, normal",
    [
        ("34", "34"),
        ("x = 5", "5"),  # the part after the last "="
        ("\\$1,000 dollars", "1000"),  # dollar sign, spaces and the unit go; then the integer's comma
        ("1,000.5", "1,000.5"),  # not an integer: the comma stays
        ("90^\\circ", "90"),
        ("\\frac12", "\\frac{1}{2}"),  # shorthand TeX braced
        ("\\sqrt2", "\\sqrt{2}"),
        ("\\text{(B)}", "(B)"),
        ("$\\boxed{7}$", "7"),  # the $...$ span, then the box, unwrapped
        ("12 students", "12"),
    ],
)
def test_minerva_normalisation(raw, normal):
    assert normalize_final_answer(raw) == normal


def test_the_last_answer_line_is_graded_right_or_wrong():
    assert compute_score("Work.\nAnswer: 3\nNo, wait.\nAnswer: \\$1,000", "1000") == {
        "score": 1.0,
        "acc": True,
        "pred": "1000",
    }
    assert compute_score("answer : 5 hours\n", "5") == {"score": 1.0, "acc": True, "pred": "5"}  # any case
    wrong = compute_score("Answer: 0.5", "\\frac{1}{2}")  # equal in value, but the strings differ, as in verl
    assert wrong == {"score": -1.0, "acc": False, "pred": "0.5"}
    assert compute_score("I think it is 4.", "4") == {"score": -1.0, "acc": False, "pred": "[INVALID]"}


def test_only_the_last_300_characters_are_read():
    near_end = "Answer: 7\n" + "x" * 280
    far = "Answer: 7\n" + "x" * 300  # the answer line starts 310 characters from the end
    assert compute_score(near_end, "7")["score"] == 1.0
    assert compute_score(far, "7") == {"score": -1.0, "acc": False, "pred": "[INVALID]"}


def test_strict_box_verify_compares_the_last_box_of_the_last_100_characters_as_written():
    assert compute_score("so \\boxed{\\frac{1}{2}}", "\\frac{1}{2}", strict_box_verify=True)["score"] == 1.0
    # unnormalised: "1/2" is not "\frac{1}{2}"; "\fbox" is not a box here; a box followed by 100 characters is not read
    assert compute_score("\\boxed{1/2}", "\\frac{1}{2}", strict_box_verify=True)["score"] == -1.0
    assert compute_score("\\fbox{3}", "3", strict_box_verify=True)["pred"] == "[INVALID]"
    assert compute_score("\\boxed{3}" + "." * 100, "3", strict_box_verify=True)["pred"] == "[INVALID]"
    assert compute_score("\\boxed{3", "3", strict_box_verify=True)["pred"] == "[INVALID]"  # never closed


def test_dapo_and_aime_sources_use_it():
    for source in ("math_dapo", "aime_2024", "aime25"):
        assert default_compute_score(source, "Answer: 204", "204")["score"] == 1.0
