"""grpo_chat_completion: TRL's arguments translated (batch sizes count completions), values the trainer cannot
honour refused by name, the best validation chosen among the kept weights, and a tiny real run that leaves
checkpoints in `output_model_path` and an MLflow transformers model in `mlflow_model_folder` that loads back."""

from __future__ import annotations

import pytest

from app.pipeline.__main__ import main
from app.pipeline.best_model import choose_best
from app.pipeline.params import PipelineError
from app.pipeline.runner import plan_card


def card_params(tiny_model_dir, data, tmp_path, **more):
    return {
        "pytorch_model_path": str(tiny_model_dir),
        "dataset_train_split": str(data / "train.jsonl"),
        "dataset_validation_split": str(data / "test.jsonl"),
        "output_model_path": str(tmp_path / "ckpt"),
        "mlflow_model_folder": str(tmp_path / "mlflow_model"),
        **more,
    }


def test_card_defaults_map_onto_the_trainer(tiny_model_dir, problem_jsonl, tmp_path):
    plan, cfg, _ = plan_card("grpo_chat_completion", card_params(tiny_model_dir, problem_jsonl, tmp_path), True)
    actor, rollout = cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout
    assert (rollout.n, actor.ppo_epochs, actor.clip_ratio, actor.kl_loss_coef) == (4, 5, 0.5, 0.04)
    assert actor.use_kl_loss is True and actor.optim.lr == 1e-6 and actor.optim.lr_warmup_steps_ratio == 0.1
    assert (cfg.data.prompt_key, cfg.data.max_prompt_length, cfg.data.max_response_length) == ("problem", 512, 256)
    # 8 completions per rank x 2 CPU ranks x 1 accumulation step = 16 completions = 4 prompts x 4 generations
    assert (cfg.data.train_batch_size, actor.ppo_mini_batch_size, actor.ppo_micro_batch_size_per_gpu) == (4, 4, 8)
    assert (cfg.trainer.total_epochs, cfg.trainer.test_freq, cfg.trainer.save_freq) == (4, 1, 100)
    assert cfg.trainer.max_ckpt_to_keep == 20 and cfg.trainer.log_val_generations == 2
    assert "console_samples" in cfg.trainer.logger
    assert cfg.trainer.default_local_dir == str((tmp_path / "ckpt").resolve())
    assert cfg.actor_rollout_ref.model.lora_rank == 64  # apply_lora "true": configs/grpo_trainer.yaml's LoRA
    assert {name for name, _, _ in plan.not_applicable} == {
        "per_device_eval_batch_size",
        "logging_steps",
        "shm_size_finetune",
    }


def test_trl_batch_sizes_count_completions(tiny_model_dir, problem_jsonl, tmp_path):
    params = card_params(
        tiny_model_dir,
        problem_jsonl,
        tmp_path,
        per_device_train_batch_size=6,
        gradient_accumulation_steps=2,
        num_generations=3,
        **{"trainer.num_workers": 1},
    )
    _, cfg, _ = plan_card("grpo_chat_completion", params, True)
    # 6 completions x 1 rank x 2 accumulation = 12 completions per optimizer step = 4 prompts x 3 generations;
    # the micro-batch is one device's 6 completions, so a rank's 12 take the 2 accumulation steps
    assert (cfg.data.train_batch_size, cfg.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu) == (4, 6)
    params |= {"per_device_train_batch_size": 5, "gradient_accumulation_steps": 1}
    with pytest.raises(PipelineError, match="5 x 1 = 5 completions per rank is not a multiple of num_generations=3"):
        plan_card("grpo_chat_completion", params, True)


def test_length_eval_and_kl_switches(tiny_model_dir, problem_jsonl, tmp_path):
    params = card_params(
        tiny_model_dir,
        problem_jsonl,
        tmp_path,
        beta=0,
        eval_strategy="no",
        apply_lora="false",
        num_train_epochs=1.5,
        save_total_limit=0,
    )
    _, cfg, _ = plan_card("grpo_chat_completion", params, True)
    assert cfg.actor_rollout_ref.actor.use_kl_loss is False and cfg.actor_rollout_ref.model.lora_rank == 0
    assert (cfg.trainer.test_freq, cfg.trainer.val_before_train, cfg.trainer.max_ckpt_to_keep) == (-1, False, None)
    # 8 training rows / 4 prompts per step = 2 steps an epoch; 1.5 epochs = 3 steps
    assert cfg.trainer.total_training_steps == 3
    _, cfg, _ = plan_card("grpo_chat_completion", params | {"max_steps": 7, "eval_strategy": "epoch"}, True)
    assert (cfg.trainer.total_training_steps, cfg.trainer.test_freq) == (7, 2)


@pytest.mark.parametrize(
    "key,value,message",
    [
        ("lr_scheduler_type", "polynomial", "lr_scheduler_type='polynomial': the trainer's schedules"),
        ("optim", "adafactor", "optim='adafactor': the trainer's optimizer is AdamW"),
        ("do_eval", "true", "do_eval=true with eval_strategy=no"),
    ],
)
def test_values_the_trainer_cannot_honour_are_refused_by_name(
    tiny_model_dir, problem_jsonl, tmp_path, key, value, message
):
    params = card_params(tiny_model_dir, problem_jsonl, tmp_path, **{key: value})
    if key == "do_eval":
        params["eval_strategy"] = "no"
    with pytest.raises(PipelineError, match=message):
        plan_card("grpo_chat_completion", params, True)


def test_dataset_name_offline_error_names_the_keys(tiny_model_dir, problem_jsonl, tmp_path, monkeypatch):
    import datasets

    # as where `datasets` was imported before HF_DATASETS_OFFLINE was set: it reads the variable only at its import,
    # and would try the hub (about 20 s of retries without a network) unless the pipeline sets it offline itself
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    params = card_params(
        tiny_model_dir, problem_jsonl, tmp_path, dataset_name="no-such-org/no-such-set", dataset_train_split="train"
    )
    with pytest.raises(
        PipelineError,
        match="dataset_name='no-such-org/no-such-set', dataset_train_split='train': "
        "not a local file or folder, and not in the local Hugging Face",
    ) as refused:
        plan_card("grpo_chat_completion", params, True)
    assert "OfflineModeIsEnabled" in str(refused.value)  # refused offline, without asking the hub
    # a local folder holding <split>.jsonl is found by split name
    params["dataset_name"] = str(problem_jsonl)
    _, cfg, _ = plan_card("grpo_chat_completion", params, True)
    assert cfg.data.train_files == str(problem_jsonl / "train.jsonl")


def test_best_step_is_the_highest_reward_among_kept_weights_ties_to_the_later():
    history = [(0, 0.1), (2, 0.5), (4, 0.3), (6, 0.5)]
    assert choose_best(history, {0, 2, 4, 6}) == (6, 6)  # 2 and 6 tie: the later, more trained one
    assert choose_best(history, {0, 4}) == (6, 4)  # 6 and 2 have no weights left: the best of the rest
    assert choose_best([], {0}) == (None, None)


@pytest.mark.slow
def test_tiny_run_writes_checkpoints_and_an_mlflow_model_that_loads(
    ray_cluster, tiny_model_dir, problem_jsonl, tmp_path
):
    from support import free_port

    params = card_params(
        tiny_model_dir,
        problem_jsonl,
        tmp_path,
        per_device_train_batch_size=2,
        num_generations=2,
        max_prompt_length=128,
        max_completion_length=16,
        max_steps=2,
        eval_steps=1,
        save_steps=1,
        save_total_limit=1,
        num_iterations=1,
        num_completions_to_print=1,
        learning_rate=1e-3,
    )
    params |= {
        "trainer.num_workers": 1,
        "actor_rollout_ref.rollout.name": "hf",
        "actor_rollout_ref.rollout.dtype": "float32",
        "reward_model.num_workers": 1,
        "actor_rollout_ref.model.lora_rank": 8,
        "actor_rollout_ref.model.lora_alpha": 16,
        "actor_rollout_ref.rollout.http_port": free_port(),
    }
    assert main(["grpo_chat_completion", *(f"{k}={v}" for k, v in params.items())]) == 0
    ckpt = tmp_path / "ckpt"
    # save_steps=1 with save_total_limit=1: only the newest checkpoint is kept
    assert sorted(p.name for p in ckpt.glob("global_step_*")) == ["global_step_2"]
    assert (ckpt / "hf_model" / "config.json").is_file()
    from app.trainer.launch import validation_history

    # eval_strategy steps (the default here), eval_steps=1: the base model, then every step
    assert [step for step, _ in validation_history(ckpt)] == [0, 1, 2]

    import mlflow.transformers

    loaded = mlflow.transformers.load_model(str(tmp_path / "mlflow_model"), return_type="components")
    assert type(loaded["model"]).__name__ == "LlamaForCausalLM"
    assert loaded["tokenizer"].chat_template  # SmolLM2's template came along
    import json

    best = json.loads((tmp_path / "mlflow_model" / "best.json").read_text())
    assert best["step"] == 2  # random model: every validation scores 0, the tie goes to the final model


def test_console_samples_logger_prints_each_validation_sample(tmp_path, capsys):
    """num_completions_to_print: rank 0's `console_samples` logger prints the kept validation samples (in a Ray
    worker, which the end-to-end test's cluster does not echo, hence this direct test)."""
    from app.trainer.tracking import Tracking

    tracking = Tracking(["console_samples"], tmp_path, total_steps=2, start_step=0, project="p", experiment="e")
    tracking.log_generations(
        [
            {
                "data_source": "arithmetic",
                "input": "What is 1 + 2?",
                "output": "#### 3",
                "ground_truth": "3",
                "score": 1.0,
            }
        ],
        step=4,
    )
    tracking.close()
    out = capsys.readouterr().out
    assert "validation sample 1/1 at step 4 (score 1.000, ground truth '3')" in out
    assert "prompt: 'What is 1 + 2?'" in out and "completion: '#### 3'" in out


def test_a_deepspeed_config_selects_the_deepspeed_engine_and_must_agree_with_the_card(
    tiny_model_dir, problem_jsonl, tmp_path
):
    import json

    from app.config import ConfigError

    ds_json = tmp_path / "ds.json"
    ds_json.write_text(json.dumps({"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 3}}))
    params = card_params(tiny_model_dir, problem_jsonl, tmp_path, deepspeed_config=str(ds_json))
    _, cfg, _ = plan_card("grpo_chat_completion", params, True)
    actor = cfg.actor_rollout_ref.actor
    assert actor.strategy == "deepspeed" and actor.deepspeed_config.config_path == str(ds_json)
    # the card's accumulation is ppo_mini_batch / ranks / per_device; a file saying otherwise is refused
    accumulation = (
        actor.ppo_mini_batch_size
        * cfg.actor_rollout_ref.rollout.n
        // cfg.trainer.num_workers
        // actor.ppo_micro_batch_size_per_gpu
    )
    ds_json.write_text(json.dumps({"gradient_accumulation_steps": accumulation + 1}))
    with pytest.raises(
        (ConfigError, PipelineError), match=rf"gradient_accumulation_steps={accumulation + 1} disagrees"
    ):
        plan_card("grpo_chat_completion", params, True)
