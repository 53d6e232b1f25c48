import pytest

from algos.rewards.math_answers import compute_score, last_boxed, math_answers_equal, normalize_math_answer


def test_last_boxed_handles_nested_braces_and_space_form():
    assert last_boxed(r"first \boxed{1} then \boxed{\frac{1}{2}}") == r"\frac{1}{2}"
    assert last_boxed(r"so $\boxed 5$.") == "5"
    assert last_boxed(r"\fbox{x^{2}}") == "x^{2}"
    assert last_boxed("no box") is None
    assert last_boxed(r"\boxed{unclosed") is None


@pytest.mark.parametrize(
    "predicted, gold",
    [
        (r"\frac12", "0.5"),
        (r"\dfrac{3}{4}", "3/4"),
        (r"\left( 1, 2 \right)", "(1,2)"),
        (r"10\text{ cm}", "10"),
        (r"\$5.00", "5"),
        (r"$5$", "5"),
        ("x = 5", "5"),
        (r"\text{Monday}", "Monday"),
        (r"90^\circ", "90"),
        (r"50\%", "50"),
        ("1,000", "1000"),
        ("2.0", "2"),
        (".5", r"\frac{1}{2}"),
        (r"\frac{-1}{2}", r"-\frac{1}{2}"),
        (r"\sqrt2", r"\sqrt{2}"),
        (r"\frac{1}{2}\!", r"\tfrac{1}{2}"),
    ],
)
def test_equivalent_answers(predicted, gold):
    assert math_answers_equal(predicted, gold), (normalize_math_answer(predicted), normalize_math_answer(gold))


@pytest.mark.parametrize("predicted, gold", [("3", "4"), (r"\frac{1}{3}", "0.33"), ("(1,2)", "(2,1)"), ("x+1", "x-1")])
def test_different_answers(predicted, gold):
    assert not math_answers_equal(predicted, gold)


def test_compute_score():
    assert compute_score(r"The answer is $\boxed{\dfrac{1}{2}}$.", "0.5") == 1.0
    assert compute_score(r"\boxed{3}", "4") == 0.0
    assert compute_score(r"\boxed{3}", "4", format_score=0.1) == 0.1
    assert compute_score("3", "3") == 0.0  # no boxed answer
    # A ground truth that is a full solution is reduced to its boxed answer (TRL-style `solution` column).
    assert compute_score(r"\boxed{7}", r"We add, so the total is $\boxed{7}$.") == 1.0


def test_the_numina_sources_take_the_math_rule():
    from algos.rewards import default_compute_score
    from algos.rewards.math_answers import NUMINA_SOURCES

    for source in NUMINA_SOURCES:  # verl's six NuminaMath names
        assert default_compute_score(source, r"so $\boxed{\frac{3}{4}}$", "0.75") == 1.0
        assert default_compute_score(source, r"so $\boxed{1}$", "0.75") == 0.0
