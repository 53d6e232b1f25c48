import pytest

from algos.rewards.gsm8k import compute_score, extract_answer, marked_answers


@pytest.mark.parametrize(
    "text, strict, flexible",
    [
        ("3 + 4 = 7\n#### 7", "7", "7"),
        ("#### 1,250 dollars", "1,250", "1,250"),
        ("####$18", "18", "18"),
        ("first #### 3 then #### -5", "-5", "-5"),  # the last marker wins
        ("no marker, answer 12 after 5", None, "5"),  # flexible reads the last number written
        ("a list 1,2,3", None, "3"),  # "1,2,3" is not the number 123
        ("nothing numeric", None, None),
        ("#### 2.50", "2.50", "2.50"),
    ],
)
def test_extract_answer(text, strict, flexible):
    assert extract_answer(text, "strict") == strict
    assert extract_answer(text, "flexible") == flexible


def test_marked_answers_are_every_marked_number_in_order():
    assert marked_answers("9 - 8 = 1\n#### 1\n#### 9") == ["1", "9"]  # the strict answer is the last: 9
    assert marked_answers("#### 1,250 then ####$18") == ["1,250", "18"]
    assert marked_answers("no marker, 12") == []


def test_unknown_method_is_an_error():
    with pytest.raises(ValueError, match="strict"):
        extract_answer("#### 1", "fuzzy")


def test_scores():
    assert compute_score("so #### 1,000", "1000") == 1.0  # commas do not matter
    assert compute_score("#### 18.0", "18") == 1.0  # numeric equality
    assert compute_score("#### 17", "18") == 0.0
    assert compute_score("#### 17", "18", format_score=0.1) == 0.1  # well-formed but wrong
    assert compute_score("18", "18", format_score=0.1) == 0.0  # strict: no marker, no answer at all
    assert compute_score("it is 18", "18", method="flexible") == 1.0
    assert compute_score("#### 18", "18", score=2.0) == 2.0
