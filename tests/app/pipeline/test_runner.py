"""The cards' dotted trainer-config keys are checked against the schema: a misspelt one names the nearest."""

import pytest

from app.pipeline.runner import check_trainer_keys
from app.preflight import PreflightError


def test_a_misspelt_dotted_key_names_the_nearest_trainer_key():
    with pytest.raises(PreflightError) as err:
        check_trainer_keys({"actor_rollout_ref.rollout.name": "hf", "actor_rollout_ref.actor.optim.lrr": "1e-5"})
    assert str(err.value) == (
        "unknown key actor_rollout_ref.actor.optim.lrr; did you mean actor_rollout_ref.actor.optim.lr?"
    )


def test_the_card_command_prints_it_as_one_line(tiny_model_dir, small_arith_data, tmp_path, capfd):
    from app.pipeline.__main__ import main

    args = [
        "verl_finetune",
        f"pytorch_model_path={tiny_model_dir}",
        f"data_train_files={small_arith_data / 'train.parquet'}",
        f"data_val_files={small_arith_data / 'test.parquet'}",
        f"model_output={tmp_path / 'model'}",
        "trainer.total_training_step=3",
        "--dry-run",
    ]
    assert main(args) == 2
    assert capfd.readouterr().err.splitlines() == [
        "error: unknown key trainer.total_training_step; did you mean trainer.total_training_steps?"
    ]
