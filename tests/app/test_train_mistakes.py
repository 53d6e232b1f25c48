"""`python -m app.train --config-name quickstart` plus one mistake each, as a new user makes them (issue 44): each
ends with exit code 2 and ONE line on stderr that names the key, file or value and what to change, without Ray
having been started (ray.init is never called), in a subprocess as from the shell."""

from __future__ import annotations

import json
import shutil
import socket

import pytest
from entry_run import run_entry
from support import free_port

LIMIT_S = 180  # a hang guard on a shared machine; the measured times are in docs/errors.md


@pytest.fixture()
def train(tiny_model_dir, small_arith_data, tmp_path):
    """Runs app.train on the quickstart config with the tiny model and small data, plus `extra` overrides."""
    base = [
        f"actor_rollout_ref.model.path={tiny_model_dir}",
        f"data.train_files={small_arith_data / 'train.parquet'}",
        f"data.val_files={small_arith_data / 'test.parquet'}",
        f"trainer.default_local_dir={tmp_path / 'out'}",
        f"actor_rollout_ref.rollout.http_port={free_port()}",
    ]

    def run(*extra: str, env: dict | None = None):
        done = run_entry("app.train", ["--config-name", "quickstart", *base, *extra], cwd=tmp_path, env=env)
        assert done.code == 2, (done.code, done.stderr_lines[-20:])
        assert not done.ray_init_called
        assert done.seconds < LIMIT_S
        return done.error

    return run


# ------------------------------------------------------------------ the rows of the table
def test_a_misspelt_key_names_the_nearest_valid_key(train):
    assert train("actor_rollout_ref.actor.optim.lrr=1e-5") == (
        "error: unknown key actor_rollout_ref.actor.optim.lrr; did you mean actor_rollout_ref.actor.optim.lr?"
    )


def test_a_model_path_that_does_not_exist_says_how_to_make_one(train):
    line = train("actor_rollout_ref.model.path=/nonexistent/model")
    assert line.startswith("error: actor_rollout_ref.model.path=/nonexistent/model: no such folder")
    assert "python -m app.import_model --source" in line and "--output" in line


def test_a_hub_id_with_no_local_copy_says_to_import_it(train, tmp_path):
    empty_cache = tmp_path / "hf-cache"
    empty_cache.mkdir()
    line = train("actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct", env={"HF_HUB_CACHE": str(empty_cache)})
    assert "hub id Qwen/Qwen2.5-0.5B-Instruct has no copy in the local Hugging Face cache" in line
    assert (
        "python -m app.import_model --source Qwen/Qwen2.5-0.5B-Instruct --output models/qwen2.5-0.5b-instruct" in line
    )


def test_a_custom_reward_file_that_does_not_exist(train, tmp_path):
    missing = tmp_path / "my_reward.py"
    assert train(f"custom_reward_function.path={missing}") == (
        f"error: custom_reward_function.path={missing}: no such file"
    )


def test_a_custom_reward_file_with_a_syntax_error_names_file_and_line(train, tmp_path):
    bad = tmp_path / "bad_reward.py"
    bad.write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info):\n    return 1.0\ndef broken(:\n"
    )
    line = train(f"custom_reward_function.path={bad}")
    assert line.startswith(f"error: custom_reward_function.path={bad}: {bad} line 3: SyntaxError: ")


def test_a_cluster_address_that_does_not_answer_names_it_and_its_key(train):
    port = free_port()  # nothing listens there
    line = train(f"trainer.ray_address=127.0.0.1:{port}")
    assert line.startswith(
        f"error: trainer.ray_address=127.0.0.1:{port}: no Ray cluster answers at 127.0.0.1:{port} (connection refused)"
    )


def test_a_ray_address_variable_that_does_not_answer_names_the_variable(train):
    port = free_port()
    line = train(env={"RAY_ADDRESS": f"127.0.0.1:{port}"})
    assert line.startswith(f"error: RAY_ADDRESS=127.0.0.1:{port}: no Ray cluster answers")


# ------------------------------------------------------------------ more mistakes of the kinds users make
def test_a_prompt_column_that_is_not_in_the_file(train, small_arith_data):
    line = train("data.prompt_key=question")
    assert line.startswith("error: ") and "question" in line and "train.parquet" in line


def test_a_model_whose_tokenizer_has_no_chat_template(train, tiny_model_dir, tmp_path):
    plain = tmp_path / "no-template"
    shutil.copytree(tiny_model_dir, plain)
    (plain / "chat_template.jinja").unlink(missing_ok=True)
    config = json.loads((plain / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (plain / "tokenizer_config.json").write_text(json.dumps(config))
    line = train(f"actor_rollout_ref.model.path={plain}")
    assert line.startswith(f"error: actor_rollout_ref.model.path={plain}: its tokenizer has no chat template")


def test_a_checkpoint_of_another_model(train, smollm2_dir, tiny_model_dir, tmp_path):
    from checkpoint_fixture import write_checkpoint

    ckpt = write_checkpoint(tiny_model_dir, tmp_path / "other-run", step=3)
    line = train(f"actor_rollout_ref.model.path={smollm2_dir}", f"trainer.resume_mode={ckpt}")
    assert line.startswith(
        f"error: trainer.resume_mode: the checkpoint {ckpt} was not written for "
        f"actor_rollout_ref.model.path={smollm2_dir}"
    )
    assert "[576]" in line or "576" in line  # SmolLM2-135M's hidden size, against the tiny model's 64


def test_an_http_port_already_taken(train):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        line = train(f"actor_rollout_ref.rollout.http_port={port}")
    assert line.startswith(f"error: actor_rollout_ref.rollout.http_port={port}: 127.0.0.1:{port} cannot be bound")


def test_a_train_path_that_is_a_folder_without_data(train, tmp_path):
    folder = tmp_path / "not-data"
    folder.mkdir()
    (folder / "notes.txt").write_text("no parquet here")
    line = train(f"data.train_files={folder}")
    assert line.startswith(f"error: {folder} is a folder but not one written by datasets' save_to_disk")


def test_validation_files_that_do_not_exist(train, tmp_path):
    missing = tmp_path / "test.parquet"
    assert train(f"data.val_files={missing}") == f"error: data file not found: {missing}"


def test_no_samples_per_prompt(train):
    assert train("actor_rollout_ref.rollout.n=0") == "error: actor_rollout_ref.rollout.n=0 must be a positive integer"


def test_a_sequence_budget_beyond_the_models_positions(train):
    # the tiny model's config.json has max_position_embeddings=2048; the quickstart's prompts are 192 tokens
    line = train("data.max_response_length=2000", "reward_model.overlong_buffer.enable=false")
    assert line == (
        "error: actor_rollout_ref.rollout.prompt_length=192 + response_length=2000 = 2192 tokens, more "
        f"than the 2048 positions of actor_rollout_ref.model.path={line.split('model.path=')[1].split()[0]}"
        " (config.json); lower data.max_prompt_length / data.max_response_length"
    )


def test_a_reward_function_with_the_wrong_arguments(train, tmp_path):
    reward = tmp_path / "two_args.py"
    reward.write_text("def compute_score(response, answer):\n    return float(response == answer)\n")
    line = train(f"custom_reward_function.path={reward}")
    assert line.startswith(
        f"error: custom_reward_function.name=compute_score: compute_score(response, answer) at "
        f"{reward} line 1 cannot be called as compute_score(data_source=, solution_str=, "
        "ground_truth=, extra_info=)"
    )


def test_a_misspelt_reward_function_name(train, tmp_path):
    reward = tmp_path / "reward.py"
    reward.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 0.0\n")
    assert train(f"custom_reward_function.path={reward}", "custom_reward_function.name=compute_scor") == (
        f"error: custom_reward_function.name=compute_scor: {reward} defines no function compute_scor; "
        "did you mean compute_score?"
    )


def test_a_gguf_file_given_as_the_model_path(train, tmp_path):
    gguf = tmp_path / "SmolLM2.Q4.gguf"
    gguf.write_bytes(b"GGUF" + b"\0" * 60)
    line = train(f"actor_rollout_ref.model.path={gguf}")
    assert line.startswith(f"error: actor_rollout_ref.model.path={gguf} is a file, not a model folder")
    assert f"python -m app.import_model --source {gguf} --output models/smollm2.q4" in line


def test_a_model_folder_without_weights(train, tiny_model_dir, tmp_path):
    config_only = tmp_path / "config-only"
    config_only.mkdir()
    shutil.copy(tiny_model_dir / "config.json", config_only / "config.json")
    line = train(f"actor_rollout_ref.model.path={config_only}")
    assert line.startswith(f"error: actor_rollout_ref.model.path={config_only} has config.json but no weights")
