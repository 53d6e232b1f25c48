"""The nearest valid key to a misspelt one, over the schema's dotted keys."""

import pytest

from app.config.schema import TrainerRunConfig
from app.preflight.config_keys import is_known, nearest_key, unknown_key_message
from app.tuning.spec import SweepFile


@pytest.mark.parametrize(
    "typo, meant",
    [
        ("actor_rollout_ref.actor.optim.lrr", "actor_rollout_ref.actor.optim.lr"),  # the example
        ("trainer.total_training_step", "trainer.total_training_steps"),
        ("data.train_file", "data.train_files"),
        ("actor_rollout_ref.rollout.temprature", "actor_rollout_ref.rollout.temperature"),
        ("actor_rolout_ref.rollout.n", "actor_rollout_ref.rollout.n"),  # a typo in the section
        ("actor_rollout_ref.actor.lr", "actor_rollout_ref.actor.optim.lr"),  # a key one section too high
    ],
)
def test_the_nearest_key_is_the_one_meant(typo, meant):
    assert not is_known(typo, TrainerRunConfig)
    assert nearest_key(typo, TrainerRunConfig) == meant


def test_keys_inside_free_form_mappings_and_sections_are_known():
    assert is_known("custom_reward_function.reward_kwargs.scale", TrainerRunConfig)
    assert is_known("trainer.worker_resources.train_node", TrainerRunConfig)
    assert is_known("actor_rollout_ref.rollout.val_kwargs", TrainerRunConfig)  # a whole section
    assert not is_known("trainer.worker_resourcess.train_node", TrainerRunConfig)


def test_nothing_close_gives_no_suggestion():
    assert unknown_key_message("zzzz.qqqq", TrainerRunConfig) == "unknown key zzzz.qqqq"


def test_the_sweep_files_keys():
    assert nearest_key("search.num_sample", SweepFile) == "search.num_samples"
    assert is_known("params.actor_rollout_ref.actor.optim.lr", SweepFile)  # params is free-form
