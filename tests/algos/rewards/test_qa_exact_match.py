"""Search-R1's exact-match reward (verl's search_r1_like_qa_em) for the searchR1_* data sources."""

import numpy as np
import pytest

from algos.rewards import default_compute_score
from algos.rewards.qa_exact_match import SEARCH_R1_SOURCES, check_targets, compute_score, normalize_answer


def test_squad_normalisation():
    # lower case, punctuation out, then the articles, then the spaces
    assert normalize_answer("  The  Eiffel-Tower! ") == "eiffeltower"
    assert normalize_answer("A Tale of Two Cities") == "tale of two cities"
    assert normalize_answer("Theatre") == "theatre"  # "the" only as a word


def test_the_last_answer_tag_is_matched_against_every_target():
    truth = {"target": np.array(["Paris", "City of Light"])}  # as parquet gives a list back
    assert compute_score("<answer>London</answer> ... <answer> the city of light. </answer>", truth) == {
        "score": 1.0,
        "acc": True,
    }
    assert compute_score("<answer>Lyon</answer>", truth) == {"score": 0.0, "acc": False}
    assert compute_score("<answer>Lyon</answer>", truth, format_score=0.1) == {"score": 0.1, "acc": False}
    assert compute_score("Paris", truth, format_score=0.1) == {"score": 0.0, "acc": False}  # no tag: no format credit
    assert compute_score("<answer>\nparis\n</answer>", "Paris")["score"] == 1.0  # a bare string as the target


def test_more_than_ten_answer_tags_quarter_the_score():
    spam = "<answer>x</answer>" * 10 + "<answer>Paris</answer>"  # 11 of each
    assert compute_score(spam, {"target": ["Paris"]}) == {"score": 0.25, "acc": True}
    assert compute_score("<answer>x</answer>" * 9 + "<answer>Paris</answer>", ["Paris"])["score"] == 1.0  # 10


@pytest.mark.parametrize("source", SEARCH_R1_SOURCES)
def test_every_search_r1_source_uses_it(source):
    assert default_compute_score(source, "<answer>Paris</answer>", {"target": ["paris"]})["score"] == 1.0


def test_a_ground_truth_without_targets_is_refused_by_the_check():
    for truth in ("Paris", ["Paris", "Lutetia"], {"target": np.array(["Paris"])}):
        check_targets(truth)
    with pytest.raises(ValueError, match="needs a 'target'.*'answer': 'Paris'"):
        check_targets({"answer": "Paris"})
    for empty in ([], {"target": []}, 7, None):
        with pytest.raises(ValueError, match="at least one target string"):
            check_targets(empty)
