"""Registry lookup, 'module:function' import, and kwargs filtering."""

import operator

import pytest
import torch

from algos.advantages import compute_advantages, rloo
from algos.catalog import ADV_ESTIMATORS, POLICY_LOSSES
from algos.registry import Registry, call_with_supported_kwargs


def test_register_and_get_returns_the_same_function():
    reg = Registry("demo.key")

    @reg.register("double")
    def double(x):
        return 2 * x

    assert reg.get("double") is double
    assert "double" in reg and reg.names() == ("double",) and len(reg) == 1


def test_unknown_name_lists_known_names_and_config_key():
    with pytest.raises(ValueError) as err:
        ADV_ESTIMATORS.get("gpro")
    msg = str(err.value)
    assert "algorithm.adv_estimator" in msg and "'gpro'" in msg
    for name in ("gae", "grpo", "rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "remax", "opo"):
        assert name in msg
    with pytest.raises(ValueError, match=r"actor\.policy_loss\.loss_mode.*gspo.*reinforce.*vanilla"):
        POLICY_LOSSES.get("ppo")


def test_module_function_spec_is_imported():
    assert ADV_ESTIMATORS.get("operator:add") is operator.add
    assert ADV_ESTIMATORS.get("algos.advantages:rloo") is rloo
    # Nested attribute after the colon.
    assert Registry("k").get("algos.policy_loss_config:PolicyLossConfig.from_mapping").__name__ == "from_mapping"


@pytest.mark.parametrize(
    "spec, fragment",
    [
        ("no_such_module_xyz:f", "cannot import module"),
        ("operator:no_such_function", "has no function"),
        ("algos.aggregation:LOSS_AGG_MODES", "not a function"),
        ("operator:", "expected 'module.path:function'"),
    ],
)
def test_bad_module_function_spec_names_key_and_problem(spec, fragment):
    with pytest.raises(ValueError) as err:
        Registry("algorithm.adv_estimator").get(spec)
    assert "algorithm.adv_estimator" in str(err.value) and fragment in str(err.value)


def test_registering_a_second_function_under_a_taken_name_fails():
    reg = Registry("k")
    reg.register("a")(len)
    reg.register("a")(len)  # same function again is harmless (module reloads)
    with pytest.raises(ValueError, match="already registered"):
        reg.register("a")(abs)


def test_call_with_supported_kwargs_passes_only_accepted_parameters():
    def needs_x(x, y=10, *, z=100):
        return x + y + z

    assert call_with_supported_kwargs(needs_x, x=1, z=2, unrelated="ignored") == 1 + 10 + 2


def test_call_with_supported_kwargs_gives_everything_to_var_keyword():
    def takes_all(a, **rest):
        return a, rest

    assert call_with_supported_kwargs(takes_all, a=1, b=2) == (1, {"b": 2})


def test_call_with_supported_kwargs_names_missing_required_parameter():
    def needs_values(values, gamma=1.0):
        return values

    with pytest.raises(TypeError, match="needs_values needs \\['values'\\]"):
        call_with_supported_kwargs(needs_values, gamma=0.9)


def test_compute_advantages_accepts_module_function_spec_and_extra_inputs():
    rewards = torch.tensor([[1.0], [3.0]])
    mask = torch.ones(2, 1)
    # rloo ignores gamma/values; through the spec it must behave like the registered name.
    by_spec = compute_advantages(
        "algos.advantages:rloo", token_level_rewards=rewards, response_mask=mask, index=[0, 0], gamma=0.9
    )
    by_name = compute_advantages("rloo", token_level_rewards=rewards, response_mask=mask, index=[0, 0], values=None)
    assert torch.equal(by_spec[0], by_name[0])
    # Each response's baseline is the other one's score: 1 - 3 = -2 and 3 - 1 = 2.
    assert by_spec[0].flatten().tolist() == [-2.0, 2.0]


def test_a_lazy_entry_is_checked_and_has_traits_without_importing_its_module():
    reg = Registry("k")
    reg.add("later", "no_such_module_xyz:f", traits="its traits")
    reg.check("later")  # registered: its module is imported only by get
    assert reg.traits("later") == "its traits" and "later" in reg.names()
    with pytest.raises(ValueError, match="k='no_such_module_xyz:f': cannot import module"):
        reg.get("later")
    with pytest.raises(ValueError, match="unknown k='other'"):
        reg.check("other")
    with pytest.raises(ValueError, match="cannot import module"):
        reg.check("no_such_module_xyz:g")  # a user's function is imported: that is what would run
    reg.add("later", "operator:add", overwrite=True)
    assert reg.get("later") is operator.add  # imported once, then kept
    reg.remove("later")
    assert "later" not in reg and reg.traits("operator:add") is None
