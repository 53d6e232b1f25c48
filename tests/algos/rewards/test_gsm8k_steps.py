from decimal import Decimal

import pytest

from algos.rewards.gsm8k_steps import compute_score, reference_results, step_credit, well_formed, written_results

# GSM8K train item 0: 48/2 = 24 clips in May, 48 + 24 = 72 altogether.
QUESTION = (
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
    "How many clips did Natalia sell altogether in April and May?"
)
SOLUTION = (
    "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
    "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72"
)
INFO = {"answer": SOLUTION, "question": QUESTION}


def test_reference_results_are_the_annotated_results_in_order():
    assert reference_results(SOLUTION, QUESTION) == [Decimal(24), Decimal(72)]


def test_reference_results_leave_out_numbers_given_in_the_question_and_repeats():
    solution = "<<2*3=6>> then <<10-4=6>> and <<1,000+250=1,250>> and <<5*1=5>>"
    # 6 appears twice (kept once); 5 is given in the question, so computing it proves nothing
    assert reference_results(solution, "She has 5 boxes.") == [Decimal(6), Decimal(1250)]


def test_written_results_reads_numbers_after_an_equals_sign_up_to_the_limit():
    text = "2 * 3 = 6, so = $1,250.50 and 7 apples =8; 9 = 6 again = 10"
    assert written_results(text, limit=10) == {Decimal(6), Decimal("1250.50"), Decimal(8), Decimal(10)}
    assert written_results(text, limit=2) == {Decimal(6), Decimal("1250.50")}  # the first two distinct ones


def test_step_credit_is_the_share_of_reference_results_computed():
    reference = reference_results(SOLUTION, QUESTION)
    assert step_credit("48 / 2 = 24 clips in May.", reference) == 0.5  # one of the two results
    assert step_credit("48 / 2 = 24, 48 + 24 = 72", reference) == 1.0
    assert step_credit("She sold 24 and 72 clips.", reference) == 0.0  # written, but not as a computed result
    assert step_credit("anything = 24", []) == 0.0  # nothing to find


def test_step_credit_does_not_pay_for_listing_guesses():
    reference = reference_results(SOLUTION, QUESTION)  # two results, so the first 2*2+2 = 6 distinct ones count
    guesses = " ".join(f"= {n}" for n in range(1, 7))  # six wrong results first
    assert step_credit(guesses + " = 24 = 72", reference) == 0.0
    assert step_credit("= 1 = 2 = 3 = 4 = 24 = 72", reference) == 1.0  # within the first six


@pytest.mark.parametrize(
    "response, expected",
    [
        ("48/2 = 24\n48 + 24 = 72\n#### 72", True),
        ("She sold 48 / 2 = 24 clips.\n\n#### $1,250.", True),  # blank lines, a dollar sign, a full stop
        ("#### 72", False),  # a bare marker: no work
        ("She sold 24 and then 72.\n#### 72", False),  # work without a computed result
        ("#### 72\n48/2 = 24", False),  # the marker is not the last line
        ("48/2 = 24\n#### 72 clips", False),  # the last line is more than the answer
        ("48/2 = 24\n72", False),
    ],
)
def test_well_formed(response, expected):
    assert well_formed(response) is expected


@pytest.mark.parametrize(
    "response, score, acc, formatted, steps",
    [
        ("48/2 = 24\n48 + 24 = 72\n#### 72", 1.0, 1.0, 1.0, 1.0),  # right answer: full score whatever the rest
        ("#### 72", 1.0, 1.0, 0.0, 0.0),
        ("48/2 = 24\n48 + 24 = 70\n#### 70", 0.1 + 0.5 * 0.5, 0.0, 1.0, 0.5),  # well formed, one step of two right
        ("48/2 = 24. 48 + 24 = 72.", 0.5 * 1.0, 0.0, 0.0, 1.0),  # every step right but unmarked: half a right answer
        ("12 + 5 = 17\n#### 17", 0.1, 0.0, 1.0, 0.0),  # well formed, nothing right
        ("#### 5", 0.0, 0.0, 0.0, 0.0),  # a bare guess earns nothing
        ("I do not know.", 0.0, 0.0, 0.0, 0.0),
    ],
)
def test_compute_score(response, score, acc, formatted, steps):
    result = compute_score(response, "72", INFO)
    assert result == {"score": pytest.approx(score), "acc": acc, "formatted": formatted, "steps": steps}


def test_compute_score_weights_are_arguments():
    result = compute_score("48/2 = 24\n#### 1", "72", INFO, format_score=0.0, step_score=1.0)
    assert result["score"] == 0.5


def test_compute_score_without_the_reference_solution_names_the_missing_key():
    with pytest.raises(KeyError, match="extra_info\\['answer'\\]"):
        compute_score("#### 72", "72", {"question": QUESTION})
