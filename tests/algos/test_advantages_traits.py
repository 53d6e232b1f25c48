"""Estimators carry their traits; the trainer reads the traits, so an estimator of one's own can declare them."""

import pytest

from algos.catalog import ADV_ESTIMATORS, EstimatorTraits, estimator_traits
from algos.registry import Registry


def test_built_in_estimators_declare_what_they_need():
    needs = {name: estimator_traits(name) for name in ADV_ESTIMATORS.names()}
    assert [n for n, t in needs.items() if t.needs_critic] == ["gae"]
    assert [n for n, t in needs.items() if t.needs_greedy_baseline] == ["remax"]
    assert [n for n, t in needs.items() if t.needs_sum_pi_squared] == ["optimal_token_baseline"]
    assert sorted(n for n, t in needs.items() if t.needs_groups) == [
        "gpg",
        "grpo",
        "grpo_batch_std",
        "opo",
        "optimal_token_baseline",
        "reinforce_plus_plus_baseline",
        "rloo",
    ]
    assert estimator_traits("reinforce_plus_plus") == EstimatorTraits()  # a per-batch baseline: needs nothing


def own_estimator(token_level_rewards, response_mask):
    return token_level_rewards, token_level_rewards


own_estimator.traits = EstimatorTraits(needs_groups=True)


def test_traits_of_a_registered_or_imported_function():
    reg = Registry("test.key")
    reg.register("mine", EstimatorTraits(needs_critic=True))(own_estimator)
    assert reg.traits("mine").needs_critic  # the registration's traits win over the function's attribute
    assert reg.traits(f"{__name__}:own_estimator") == EstimatorTraits(needs_groups=True)
    assert (
        reg.traits("tests.algos.test_advantages_traits:test_traits_of_a_registered_or_imported_function", "none")
        == "none"
    )  # a function without traits gets the default
    with pytest.raises(ValueError, match="unknown test.key='nope'"):
        reg.traits("nope")
