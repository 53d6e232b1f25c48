"""Command-line overrides checked against the schema before Hydra composes: which parts of argv are keys."""

import pytest

from app.config.schema import TrainerRunConfig
from app.preflight import PreflightError
from app.preflight.overrides import check_overrides, hydra_overrides, override_keys


def test_the_overrides_are_split_from_hydras_options_as_hydra_splits_them():
    argv = ["--config-name", "quickstart", "-cp", "/x", "a.b=1", "+c.d=2", "++e=3", "~f", "--multirun"]
    assert hydra_overrides(argv) == ["a.b=1", "+c.d=2", "++e=3", "~f"]
    assert override_keys(hydra_overrides(argv)) == ["a.b", "c.d", "e", "f"]


def test_hydra_settings_groups_and_unparsable_overrides_are_left_to_hydra():
    assert override_keys(["hydra.run.dir=x", "hydra/job_logging=none", "a.b=[1,", "x@pkg=1"]) == []


@pytest.mark.parametrize(
    "override",
    [
        "actor_rollout_ref.actor.optim.lrr=1e-5",
        "+actor_rollout_ref.actor.optim.lrr=1",
        "++actor_rollout_ref.actor.optim.lrr=1",
        "~actor_rollout_ref.actor.optim.lrr",
    ],
)
def test_a_misspelt_key_is_refused_however_it_is_given(override):
    with pytest.raises(PreflightError) as err:
        check_overrides(["data.train_files=x.parquet", override], TrainerRunConfig)
    assert str(err.value) == (
        "unknown key actor_rollout_ref.actor.optim.lrr; did you mean actor_rollout_ref.actor.optim.lr?"
    )


def test_adding_a_key_inside_a_free_form_mapping_is_accepted():
    check_overrides(["+custom_reward_function.reward_kwargs.scale=2", "trainer.seed=3"], TrainerRunConfig)


def test_a_custom_samplers_own_settings_are_accepted_under_data_sampler():
    check_overrides(["data.sampler.class_path=s.py", "+data.sampler.tau=0.5"], TrainerRunConfig)
    with pytest.raises(PreflightError, match="unknown key data.samplr.tau"):
        check_overrides(["+data.samplr.tau=0.5"], TrainerRunConfig)
