"""The registered algorithms have the signatures their registry's Protocol states (algos.protocols)."""

import inspect

from algos.catalog import ADV_ESTIMATORS, POLICY_LOSSES
from algos.protocols import AdvantageFn, PolicyLossFn


def _parameters(fn) -> list[tuple[str, object]]:
    return [(p.name, p.kind) for p in inspect.signature(fn).parameters.values()]


def test_every_built_in_policy_loss_takes_the_protocols_arguments():
    protocol = inspect.signature(PolicyLossFn.__call__).parameters
    expected = _parameters(PolicyLossFn.__call__)[1:]  # without self
    assert [name for name, _ in expected] == [
        "old_log_prob",
        "log_prob",
        "advantages",
        "response_mask",
        "loss_agg_mode",
        "config",
        "normalizer",
    ]
    assert len(POLICY_LOSSES) >= 7
    for name in POLICY_LOSSES:
        fn = POLICY_LOSSES.get(name)
        assert _parameters(fn) == expected, name  # same names, same order, same positional/keyword-only split
        params = inspect.signature(fn).parameters
        for param, spec in protocol.items():  # a default the protocol promises is there (a loss may add one)
            if param != "self" and spec.default is not inspect.Parameter.empty:
                assert params[param].default == spec.default, (name, param)


def test_every_built_in_estimator_needs_only_inputs_the_protocol_names():
    # what AdvantageFn's docstring names is what compute_advantages' callers pass; anything else needs a default
    doc = AdvantageFn.__doc__
    for name in ADV_ESTIMATORS:
        params = inspect.signature(ADV_ESTIMATORS.get(name)).parameters
        assert {"token_level_rewards", "response_mask"} <= set(params), name
        unnamed = [p for p in params if f"``{p}``" not in doc]
        assert all(params[p].default is not inspect.Parameter.empty for p in unnamed), (name, unnamed)
