"""*.model.external_lib before Ray starts: the modules import in the checks' child process, first, so the checks
after them read a model type only they register; a module that cannot be imported is refused naming its key."""

import pytest

from app.config.schema import TrainerRunConfig
from app.preflight import CHECKS, PreflightError, run_preflight
from app.preflight.model_libs import check_model_libs, model_libs

# the import, then the check that reads the model's config
OTHERS = [c.name for c in CHECKS if c.name not in ("model_libs", "model_config")]


def _cfg(model_dir, lib=None):
    cfg = TrainerRunConfig()
    cfg.actor_rollout_ref.model.path = str(model_dir)
    cfg.actor_rollout_ref.model.external_lib = lib
    return cfg


def test_each_sections_libs_are_listed_and_a_missing_one_refused():
    cfg = TrainerRunConfig()
    cfg.actor_rollout_ref.model.external_lib = "json"
    cfg.reward_model.model.external_lib = ["json", "no_such_lib_y"]
    assert list(model_libs(cfg)) == [
        ("actor_rollout_ref.model.external_lib", ("json",)),
        ("reward_model.model.external_lib", ("json", "no_such_lib_y")),
    ]
    with pytest.raises(PreflightError, match=r"^reward_model\.model\.external_lib: cannot import 'no_such_lib_y'"):
        check_model_libs(cfg)


def test_the_checks_after_it_read_a_model_type_the_lib_registers(marked_model_dir):
    # a fresh interpreter (spawn) for the child, so nothing this process imported registers the type
    with pytest.raises(
        PreflightError,
        match=r"^actor_rollout_ref\.model\.path=.*: transformers cannot read its config \(.*rayrl_marked_llama.*\); a "
        r"model type of your own needs the module that registers it in actor_rollout_ref\.model\.external_lib",
    ):
        run_preflight(_cfg(marked_model_dir), skip=OTHERS, start_method="spawn")
    run_preflight(_cfg(marked_model_dir, "marked_llama"), skip=OTHERS, start_method="spawn")
