"""The sweep file: the shipped one parses, the KL shorthand follows the base config, and mistakes name their key."""

import pytest

from app.config import ConfigError
from app.tuning.spec import KL_LOSS_KEY, KL_REWARD_KEY, parse_sweep, resolve_params


def minimal(**changes):
    raw = {
        "name": "s",
        "base": {"config": "quickstart", "overrides": []},
        "params": {"actor_rollout_ref.actor.optim.lr": {"loguniform": [1e-5, 1e-3]}},
    }
    raw.update(changes)
    return raw


def test_shipped_grpo_small_parses_and_resolves_kl_to_the_loss_coefficient(compose, base_cfg):
    spec = parse_sweep(compose("sweep/grpo_small", resolve=True))
    assert spec.name == "grpo_small" and spec.base_config == "quickstart"
    assert spec.output_dir == "outputs/sweeps/grpo_small"  # ${name} interpolated by Hydra
    kinds = {p.key: p.kind for p in spec.params}
    assert kinds == {
        "actor_rollout_ref.actor.optim.lr": "loguniform",
        "actor_rollout_ref.rollout.n": "choice",
        "kl_coef": "choice",
    }
    assert spec.metric == "val-core/reward/mean" and spec.mode == "max"
    assert spec.scheduler.type == "asha" and spec.scheduler.grace_period == 2
    # quickstart is GRPO with a KL loss (actor.use_kl_loss=true), so kl_coef means the loss coefficient
    resolved = resolve_params(spec, base_cfg())
    assert {p.key for p in resolved.params} == {
        "actor_rollout_ref.actor.optim.lr",
        "actor_rollout_ref.rollout.n",
        KL_LOSS_KEY,
    }
    lr = next(p for p in resolved.params if p.key.endswith("lr"))
    assert lr.values == (2e-5, 3e-4)


def test_kl_shorthand_means_the_reward_coefficient_when_kl_is_in_the_reward(base_cfg):
    spec = parse_sweep(minimal(params={"kl_coef": {"grid": [0.001, 0.01]}}))
    base = base_cfg(**{"actor_rollout_ref.actor.use_kl_loss": "false", "algorithm.use_kl_in_reward": "true"})
    assert [p.key for p in resolve_params(spec, base).params] == [KL_REWARD_KEY]


def test_searching_the_unused_kl_coefficient_is_refused_with_a_hint(base_cfg):
    spec = parse_sweep(minimal(params={"actor_rollout_ref": {"actor": {"kl_loss_coef": {"choice": [0.01]}}}}))
    base = base_cfg(**{"actor_rollout_ref.actor.use_kl_loss": "false", "algorithm.use_kl_in_reward": "true"})
    with pytest.raises(
        ConfigError,
        match=r"params.actor_rollout_ref.actor.kl_loss_coef: .*use_kl_loss=false.*"
        r"search algorithm.kl_ctrl.kl_coef",
    ):
        resolve_params(spec, base)


def test_kl_shorthand_and_its_key_together_are_a_duplicate(base_cfg):
    spec = parse_sweep(minimal(params={"kl_coef": {"choice": [0.1]}, KL_LOSS_KEY: {"choice": [0.2]}}))
    with pytest.raises(ConfigError, match=r"actor_rollout_ref.actor.kl_loss_coef is searched twice"):
        resolve_params(spec, base_cfg())


@pytest.mark.parametrize(
    "changes, message",
    [
        (
            {"params": {"actor_rollout_ref.actor.optim.lr": {"loguniform": [0.0, 1e-3]}}},
            r"params.actor_rollout_ref.actor.optim.lr.loguniform: low=0.0 must be > 0",
        ),
        (
            {"params": {"actor_rollout_ref.actor.optim.lr": {"uniform": [1e-3, 1e-4]}}},
            r"params.actor_rollout_ref.actor.optim.lr.uniform: low=0.001 must be below high=0.0001",
        ),
        ({"params": {"actor_rollout_ref.actor.optim.lr": {"uniform": [1e-3]}}}, r"expected \[low, high\]"),
        (
            {"params": {"actor_rollout_ref.rollout.n": {"grid": []}}},
            r"params.actor_rollout_ref.rollout.n.grid: expected a non-empty list",
        ),
        ({"params": {"actor_rollout_ref.rollout.n": {"grid": [2, 2]}}}, r"repeats a value"),
        ({"params": {"actor_rollout_ref.rollout.n": {"sample": [2]}}}, r"params.actor_rollout_ref.rollout.n.sample"),
        ({"params": {"actor_rollout_ref.rollout.n": {"grid": [2], "choice": [4]}}}, r"give exactly one of"),
        ({"params": {"actor_rollout_ref.rollout.n": 4}}, r"params.actor_rollout_ref.rollout.n: expected one of"),
        ({"params": {}}, r"sweep params: nothing to search"),
        # the trainer config's loader reads the sweep file: unknown keys name the nearest known one
        ({"serach": {}}, r"sweep unknown key serach under the top level; did you mean search\?"),
        ({"search": {"metod": "grid"}}, r"sweep unknown key search.metod under search; did you mean search.method\?"),
        ({"search": {"method": "bayes"}}, r"sweep search.method: 'bayes' is not one of 'grid', 'random', 'optuna'"),
        ({"search": {"num_samples": "many"}}, r"sweep search.num_samples: expected an integer, got 'many'"),
        ({"search": {"mode": "maximum"}}, r"search.mode"),
        ({"search": {"num_samples": 0}}, r"search.num_samples: expected an integer >= 1"),
        ({"search": {"method": "grid"}}, r"params.actor_rollout_ref.actor.optim.lr: search.method=grid .* `grid`"),
        (
            {"search": {"method": "optuna"}, "params": {"actor_rollout_ref.rollout.n": {"grid": [2, 4]}}},
            r"params.actor_rollout_ref.rollout.n: search.method=optuna .* use `choice`",
        ),
        ({"scheduler": {"type": "pbt"}}, r"scheduler.type: 'pbt'"),
        ({"scheduler": {"reduction_factor": 1}}, r"scheduler.reduction_factor: 1.0 must be > 1"),
        ({"resume": "maybe"}, r"sweep resume: 'maybe'"),
        ({"base": {"overrides": []}}, r"sweep base.config: expected a non-empty string"),
    ],
)
def test_bad_sweep_files_name_the_key(changes, message):
    with pytest.raises(ConfigError, match=message):
        parse_sweep(minimal(**changes))


@pytest.mark.parametrize(
    "params, message",
    [
        (
            {"actor_rollout_ref.actor.optim.lrr": {"choice": [1e-4]}},
            r"params.actor_rollout_ref.actor.optim.lrr: actor_rollout_ref.actor.optim.lrr is not a trainer config key "
            r"\(known under actor_rollout_ref.actor.optim: .*lr",
        ),
        ({"actor_rollout_ref.actor.optim": {"choice": [1]}}, r"is a section of the config"),
        (
            {"actor_rollout_ref.rollout.n": {"uniform": [2, 8]}},
            r"params.actor_rollout_ref.rollout.n: `uniform` draws real numbers but actor_rollout_ref.rollout.n is int",
        ),
        ({"trainer.seed.x": {"choice": [1]}}, r"trainer.seed is a value, not a section"),
    ],
)
def test_parameter_keys_are_checked_against_the_schema(params, message, base_cfg):
    spec = parse_sweep(minimal(params=params))
    with pytest.raises(ConfigError, match=message):
        resolve_params(spec, base_cfg())


def test_nested_and_dotted_parameter_keys_mean_the_same():
    nested = parse_sweep(minimal(params={"actor_rollout_ref": {"rollout": {"n": {"grid": [2, 4]}}}}))
    dotted = parse_sweep(minimal(params={"actor_rollout_ref.rollout.n": {"grid": [2, 4]}}))
    assert nested.params == dotted.params
    assert nested.params[0].values == (2, 4)


def test_yaml_1_1_exponent_strings_are_numbers():
    spec = parse_sweep(minimal(params={"actor_rollout_ref.actor.optim.lr": {"loguniform": ["1e-5", "1e-3"]}}))
    assert spec.params[0].values == (1e-5, 1e-3)
