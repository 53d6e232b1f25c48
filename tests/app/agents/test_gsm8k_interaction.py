"""The built-in gsm8k interaction: the latest assistant answer against the row's ground truth; a right one ends the
episode with turn score 1, a wrong or missing one asks again with turn score 0; `calculate_score` is the latest."""

import asyncio

import pytest

from app.agents.interactions.gsm8k import Gsm8kInteraction


def run(coroutine):
    return asyncio.run(coroutine)


def test_wrong_then_right_answer():
    gsm8k = Gsm8kInteraction({"name": "gsm8k", "retry_message": "again"})
    instance = run(gsm8k.start_interaction(None, ground_truth="1,250", name="gsm8k"))
    convo = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "#### 1200"}]
    assert run(gsm8k.generate_response(instance, convo)) == (False, "again", 0.0, {})
    assert run(gsm8k.calculate_score(instance)) == 0.0
    # the latest assistant message counts, not an earlier one; 1250 equals 1,250 numerically
    convo += [{"role": "user", "content": "again"}, {"role": "assistant", "content": "So #### 1250"}]
    assert run(gsm8k.generate_response(instance, convo)) == (True, "Your answer is correct.", 1.0, {})
    assert run(gsm8k.calculate_score(instance)) == 1.0
    run(gsm8k.finalize_interaction(instance))
    assert gsm8k._state == {}


def test_strict_needs_the_marker_flexible_takes_the_last_number():
    answer = [{"role": "assistant", "content": "The answer is 7"}]
    strict, flexible = Gsm8kInteraction({}), Gsm8kInteraction({"method": "flexible"})
    assert run(strict.generate_response(run(strict.start_interaction("a", ground_truth=7)), answer))[0] is False
    assert run(flexible.generate_response(run(flexible.start_interaction("a", ground_truth=7)), answer))[0] is True


def test_a_row_without_ground_truth_is_refused():
    with pytest.raises(ValueError, match=r"needs the row's extra_info\['interaction_kwargs'\]\['ground_truth'\]"):
        run(Gsm8kInteraction({"name": "g"}).start_interaction(None, name="g"))
