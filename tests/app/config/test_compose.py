"""`app.config.compose_run_config`: the config `python -m app.train --config-name NAME key=value ...` runs with."""

from __future__ import annotations

import pytest
from hydra import initialize_config_dir
from support import VERL_MULTI_TURN

from app.config import ConfigError, compose_config, compose_run_config


def test_the_file_the_schema_and_the_overrides_compose_as_on_the_command_line():
    cfg = compose_run_config("quickstart", ["trainer.seed=7", "actor_rollout_ref.rollout.n=4"])
    assert cfg.trainer.seed == 7 and cfg.actor_rollout_ref.rollout.n == 4  # the overrides
    assert cfg.actor_rollout_ref.model.lora_rank == 16  # quickstart.yaml
    assert cfg.algorithm.adv_estimator == "grpo"  # grpo_trainer.yaml, which quickstart.yaml starts from
    assert cfg.actor_rollout_ref.rollout.cpu_block_size == 32  # the schema's default, in no file


def test_a_wrong_value_is_refused_naming_its_key():
    with pytest.raises(ConfigError, match="cpu_block_size"):
        compose_run_config("quickstart", ["actor_rollout_ref.rollout.cpu_block_size=48"])


def test_inside_another_hydra_app_its_search_path_is_used(tmp_path):
    (tmp_path / "mine.yaml").write_text("defaults:\n  - rayrl_schema\n  - _self_\ntrainer:\n  seed: 11\n")
    with initialize_config_dir(str(tmp_path), version_base=None):
        assert compose_config("mine").trainer.seed == 11  # configs/ has no mine.yaml


def test_a_users_config_folder_starts_from_configs_ppo_trainer_as_verls_do(tmp_path):
    # verl's examples/sglang_multiturn/config/gsm8k_multiturn_grpo.yaml, run as verl's
    # scripts run it: --config-path <its folder> --config-name gsm8k_multiturn_grpo. Hydra then searches that folder
    # instead of configs/; `ppo_trainer` must still resolve, to ours
    (tmp_path / "gsm8k_multiturn_grpo.yaml").write_text(VERL_MULTI_TURN)
    with initialize_config_dir(str(tmp_path), version_base=None):
        cfg = compose_run_config(
            "gsm8k_multiturn_grpo", ["actor_rollout_ref.model.path=/models/x", "data.train_files=train.parquet"]
        )
    assert cfg.actor_rollout_ref.rollout.multi_turn.enable and cfg.data.max_prompt_length == 1024  # the user's file
    assert cfg.algorithm.adv_estimator == "gae"  # verl's ppo_trainer default, which ours keeps
