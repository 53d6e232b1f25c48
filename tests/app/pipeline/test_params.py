"""Parsing flat parameters against a card's table: types, defaults, required keys, prefix keys, unknown keys."""

from __future__ import annotations

import pytest

from app.pipeline.params import REQUIRED, Param, PipelineError, parse_cli_pairs, parse_values, read_params_file

TABLE = (
    Param("data_train_batch_size", 512, "int", "Data", target="data.train_batch_size"),
    Param("apply_lora", True, "bool", "Training", mapping="lora on or off"),
    Param("data_train_files", REQUIRED, "path", "Data", target="data.train_files"),
    Param("data_truncation", "error", "choice", "Data", target="data.truncation", choices=("error", "left")),
    Param("instance_type_*", None, "str", "Infra", na="managed compute"),
)


def test_defaults_filled_types_coerced_and_given_keys_tracked():
    values = parse_values(
        TABLE,
        {
            "data_train_files": "a.jsonl",
            "apply_lora": "false",
            "data_train_batch_size": "16",
            "instance_type_finetune": "NC24",
        },
        "card",
    )
    assert values["data_train_batch_size"] == 16 and values["apply_lora"] is False
    assert values["data_truncation"] == "error"  # the card default
    assert values.given == {"data_train_files", "apply_lora", "data_train_batch_size"}
    assert values.extra_keys == {"instance_type_finetune": "NC24"}  # matched by the instance_type_* row


def test_unknown_key_names_the_nearest_valid_key():
    with pytest.raises(PipelineError, match=r"'data_train_batchsize' \(did you mean 'data_train_batch_size'\?\)"):
        parse_values(TABLE, {"data_train_files": "a", "data_train_batchsize": "8"}, "card")


def test_wrong_values_and_missing_required_keys_name_the_parameter():
    with pytest.raises(PipelineError, match="data_train_batch_size='eight': expected an integer"):
        parse_values(TABLE, {"data_train_files": "a", "data_train_batch_size": "eight"}, "card")
    with pytest.raises(PipelineError, match="data_train_batch_size=2.5: expected an integer"):
        parse_values(TABLE, {"data_train_files": "a", "data_train_batch_size": 2.5}, "card")
    with pytest.raises(PipelineError, match="data_truncation='middle': choose one of error, left"):
        parse_values(TABLE, {"data_train_files": "a", "data_truncation": "middle"}, "card")
    with pytest.raises(PipelineError, match="parameter data_train_files is required"):
        parse_values(TABLE, {}, "card")


def test_dotted_keys_are_trainer_overrides_left_for_the_schema():
    values = parse_values(TABLE, {"data_train_files": "a", "trainer.num_workers": "1"}, "card")
    assert values.trainer_overrides == {"trainer.num_workers": "1"}


def test_params_file_and_cli_pairs(tmp_path):
    (tmp_path / "p.yaml").write_text("data_train_batch_size: 16\napply_lora: 'true'\n")
    (tmp_path / "p.json").write_text('{"data_train_batch_size": 8}')
    assert read_params_file(str(tmp_path / "p.yaml")) == {"data_train_batch_size": 16, "apply_lora": "true"}
    assert read_params_file(str(tmp_path / "p.json")) == {"data_train_batch_size": 8}
    (tmp_path / "nested.yaml").write_text("data:\n  train_batch_size: 8\n")
    with pytest.raises(PipelineError, match="flat keys; data holds a mapping"):
        read_params_file(str(tmp_path / "nested.yaml"))
    assert parse_cli_pairs(["a=1", "b=x=y"]) == {"a": "1", "b": "x=y"}  # only the first = splits
    with pytest.raises(PipelineError, match="'a' is not key=value"):
        parse_cli_pairs(["a"])
