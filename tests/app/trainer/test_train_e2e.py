"""End-to-end training on real Ray Train + Serve + vLLM with the tiny model: GRPO with 2 workers, checkpoint and
resume, PPO with a critic, and the actor/rollout log-prob match. One rollout deployment serves every test here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import weights_only_copy
from transformers import AutoTokenizer

from app.trainer.launch import train
from app.trainer.tracking import read_metrics

APP = "trainer-e2e-rollout"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def arith_data(tmp_path_factory) -> Path:
    from app.prepare import main as prepare

    out = tmp_path_factory.mktemp("arith")
    assert prepare(["arithmetic", "--output", str(out), "--train-size", "32", "--test-size", "8", "--seed", "3"]) == 0
    return out


@pytest.fixture(scope="module")
def rollout_app(ray_cluster, tiny_model_dir, free_port):
    """fp32 vLLM so the actor (fp32 here) and the rollout agree to rounding; LoRA enabled for the LoRA runs."""
    from ray import serve
    from support import cpu_rollout_config

    from serve import deploy_rollout

    config = cpu_rollout_config(
        dtype="float32",
        max_num_seqs=64,
        max_num_batched_tokens=4096,
        cpu_kv_cache_gib=0.5,
        response_length=16,
        prompt_length=256,
        http_port=free_port(),
    )
    deploy_rollout(config, tiny_model_dir, APP, trust_remote_code=False, max_lora_rank=8)
    yield APP
    serve.delete(APP)


def base_overrides(tiny_model_dir, arith_data, out: Path) -> list[str]:
    return [
        f"actor_rollout_ref.model.path={tiny_model_dir}",
        f"data.train_files={arith_data / 'train.parquet'}",
        f"data.val_files={arith_data / 'test.parquet'}",
        "data.max_prompt_length=256",
        "data.max_response_length=16",
        "data.train_batch_size=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.model.lora_rank=8",
        "actor_rollout_ref.model.lora_alpha=16",
        "actor_rollout_ref.actor.optim.lr=1e-3",
        # fp32 compute on both sides, so the log-prob comparison is tight
        "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp32",
        "actor_rollout_ref.rollout.dtype=float32",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        "trainer.logger=[jsonl]",
        "trainer.cpus_per_worker=1",
        f"trainer.default_local_dir={out}",
        f"trainer.rollout_data_dir={out / 'rollouts'}",
        "reward_model.num_workers=1",
    ]


def dataset_indices(rollouts: Path, step: int) -> set[int]:
    rows = [
        json.loads(line) for f in sorted(rollouts.glob(f"{step}-rank*.jsonl")) for line in f.read_text().splitlines()
    ]
    return {r["dataset_index"] for r in rows}


def test_grpo_two_workers_checkpoints_and_resumes_in_data_order(
    compose, rollout_app, tiny_model_dir, arith_data, tmp_path
):
    out = tmp_path / "grpo"
    overrides = base_overrides(tiny_model_dir, arith_data, out) + [
        "trainer.num_workers=2",
        "trainer.save_freq=3",
        "trainer.experiment_name=grpo-e2e",
        f"trainer.default_hdfs_dir=file://{tmp_path / 'remote'}",  # verl's remote copy of each checkpoint
    ]
    # validation at the last step, with 3 of its samples to TensorBoard (gathered from both ranks) and all of them to
    # trainer.validation_data_dir
    first_run = [
        "trainer.total_training_steps=3",
        "trainer.logger=[jsonl,tensorboard]",
        "trainer.log_val_generations=3",
        f"trainer.validation_data_dir={out / 'val'}",
    ]
    train(compose(overrides + first_run), rollout_app=rollout_app)
    assert (out / "global_step_3" / "trainer_state.json").is_file()
    local, remote = out / "global_step_3", tmp_path / "remote" / "global_step_3"
    files = sorted(p.relative_to(local) for p in local.rglob("*") if p.is_file())
    assert "rng_rank1.pt" in map(str, files)  # both ranks' files, all of them
    assert sorted(p.relative_to(remote) for p in remote.rglob("*") if p.is_file()) == files
    assert all((remote / f).read_bytes() == (local / f).read_bytes() for f in files)
    assert (tmp_path / "remote" / "latest_checkpointed_iteration.txt").read_text() == "3"
    first = read_metrics(out / "metrics.jsonl")
    assert [r["step"] for r in first] == [1, 2, 3]
    assert "val-core/reward/mean" in first[-1]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    [text] = events.Tensors("val/generations/text_summary")
    markdown = text.tensor_proto.string_val[0].decode()
    assert text.step == 3 and markdown.count("### Sample") == 3 and markdown.count("**input:** ") == 3
    # each rank wrote its half of the validation set, every sample with the arithmetic reward's own fields
    val_rows = [
        json.loads(line) for r in (0, 1) for line in (out / "val" / f"3-rank{r}.jsonl").read_text().splitlines()
    ]
    assert sorted(r["index"] for r in val_rows) == list(range(len(val_rows)))
    assert all(r["step"] == 3 and {"acc", "formatted", "strict"} <= r.keys() for r in val_rows)
    step_1 = [json.loads(line) for f in (out / "rollouts").glob("1-rank*.jsonl") for line in f.read_text().splitlines()]
    assert all("ground_truth" in r and "acc" in r for r in step_1)  # the rollout dumps carry them too
    assert all(r["training/policy_version"] >= r["step"] for r in first)  # one sync per step
    # The trainer's log-probs of step 1's samples are vLLM's: same weights, fp32 on both sides, no top-k/top-p, so
    # the only gap is kernel rounding (~1e-6 per token); 1e-3 still catches an off-by-one position or a missing
    # temperature (both give gaps > 0.1). Later steps' gaps also show each LoRA sync reached the replica.
    assert all(r["actor/rollout_logprob_diff"] < 1e-3 for r in first)

    # A second run with a longer horizon resumes from global_step_3 and trains step 4 only (from default_local_dir:
    # verl refuses to resume while default_hdfs_dir is set).
    train(compose(overrides + ["trainer.total_training_steps=4"]), rollout_app=rollout_app)
    rows = read_metrics(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3, 4]

    # The prompts of step 4 are the 4th batch an uninterrupted run draws with this seed.
    from app.data import PromptDataLoader
    from app.trainer.setup import load_datasets, load_tokenizer

    cfg = compose(overrides)
    train_set, _ = load_datasets(cfg, load_tokenizer(cfg))
    loader = PromptDataLoader(train_set, batch_size=4, pad_token_id=0, shuffle=True, seed=cfg.data.seed)
    expected = [set(loader.next_batch().index) for _ in range(4)]
    for step in (1, 2, 3, 4):
        assert dataset_indices(out / "rollouts", step) == expected[step - 1], step
    assert (out / "hf_model" / "config.json").is_file()


def test_ppo_with_critic_runs_two_steps(compose, rollout_app, marked_model_dir, arith_data, tmp_path):
    out = tmp_path / "ppo"
    # actor and critic load the tiny Llama under a model type that only tests/marked_llama.py registers (verl's
    # model.external_lib, imported by each train worker); the replica serves the same weights as a plain Llama
    overrides = base_overrides(marked_model_dir, arith_data, out) + [
        "actor_rollout_ref.model.external_lib=tests.marked_llama",
        "algorithm.adv_estimator=gae",
        "algorithm.lam=0.95",
        "actor_rollout_ref.model.lora_rank=0",
        "actor_rollout_ref.actor.use_kl_loss=false",
        "algorithm.use_kl_in_reward=true",
        "actor_rollout_ref.rollout.n=1",
        "critic.optim.lr=1e-3",
        "trainer.num_workers=1",
        "trainer.total_training_steps=2",
        "trainer.experiment_name=ppo-e2e",
        f"ray_kwargs.timeline_json_file={out / 'timeline.json'}",
    ]
    train(compose(overrides), rollout_app=rollout_app)
    rows = read_metrics(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    for key in ("critic/vf_loss", "critic/values/mean", "actor/pg_loss", "actor/reward_kl_penalty"):
        assert key in rows[-1], key
    # step 2 sampled from the full weights streamed after step 1: the trainer's log-probs of those samples match vLLM's
    # as closely as before any update (as in the GRPO test above), so every updated tensor reached the replica
    assert rows[-1]["actor/rollout_logprob_diff"] < 1e-3
    assert (out / "hf_model" / "model.safetensors").is_file()
    assert json.loads((out / "hf_model" / "config.json").read_text())["model_type"] == "rayrl_marked_llama"
    # verl's ray_kwargs.timeline_json_file: Ray's Chrome trace of the run's tasks and actors, the train worker's too
    events = json.loads((out / "timeline.json").read_text())
    assert any(event.get("cat", "").startswith("task::RayTrainWorker.") for event in events)


def test_async_training_samples_the_next_batch_with_the_previous_policy(
    compose, rollout_app, tiny_model_dir, arith_data, tmp_path
):
    # the real rollout client called from the generation thread, full weights synced between batches
    out = tmp_path / "async"
    # the trainer's model folder holds no tokenizer (a checkpoint saved without one): model.tokenizer_path gives it
    weights_only = weights_only_copy(tiny_model_dir, tmp_path / "weights-only")
    overrides = base_overrides(weights_only, arith_data, out) + [
        f"actor_rollout_ref.model.tokenizer_path={tiny_model_dir}",
        "actor_rollout_ref.model.lora_rank=0",
        "async_training.enable=true",
        "algorithm.rollout_correction.rollout_is=token",
        "trainer.num_workers=1",
        "trainer.total_training_steps=3",
        "trainer.experiment_name=async-e2e",
        # scores that differ within every group, so each update moves the policy (arithmetic gives the random model 0)
        f"custom_reward_function.path={Path(__file__).with_name('char_count_reward.py')}",
    ]
    train(compose(overrides), rollout_app=rollout_app)
    rows = read_metrics(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert [r["async/staleness/mean"] for r in rows] == [0.0, 1.0, 1.0]
    assert [r["training/policy_version"] - rows[0]["training/policy_version"] for r in rows] == [0.0, 1.0, 2.0]
    # step 1 trains on its own policy's samples (fp32 both sides: rounding only); steps 2 and 3 on samples of the
    # policy one update older, which the current weights score visibly differently and the IS weights correct
    assert rows[0]["actor/rollout_logprob_diff"] < 1e-3
    assert all(r["actor/rollout_logprob_diff"] > 10 * rows[0]["actor/rollout_logprob_diff"] for r in rows[1:])
    assert all(0.5 < r["rollout_corr/rollout_is_mean"] < 2.0 for r in rows)
    assert "val-core/reward/mean" in rows[-1] and (out / "hf_model" / "model.safetensors").is_file()
    # the exported model carries the tokenizer it was trained with
    assert (
        AutoTokenizer.from_pretrained(out / "hf_model").get_vocab()
        == AutoTokenizer.from_pretrained(tiny_model_dir).get_vocab()
    )


def test_a_killed_train_worker_restarts_from_the_newest_checkpoint_with_the_same_data(
    compose, rollout_app, tiny_model_dir, arith_data, tmp_path
):
    out, marker = tmp_path / "restart", tmp_path / "marker"
    marker.mkdir()
    overrides = base_overrides(tiny_model_dir, arith_data, out) + [
        "trainer.num_workers=1",
        "trainer.save_freq=1",
        "trainer.total_training_steps=3",
        "trainer.max_failures=1",
        "trainer.experiment_name=restart",
        "reward_model.num_workers=0",  # the reward runs in the train worker
        f"custom_reward_function.path={Path(__file__).parent / 'kill_once_reward.py'}",
        f"+custom_reward_function.reward_kwargs.marker_dir={marker}",
        "+custom_reward_function.reward_kwargs.samples_per_step=8",  # 4 prompts x 2 samples
    ]
    train(compose(overrides), rollout_app=rollout_app)
    assert (marker / "killed").is_file()  # the worker did die during step 2
    rows = read_metrics(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3]  # each step once: the restart resumed after step 1
    assert (out / "latest_checkpointed_iteration.txt").read_text().strip() == "3"

    # no batch repeated or lost: the steps drew the batches an uninterrupted run draws
    from app.data import PromptDataLoader
    from app.trainer.setup import load_datasets, load_tokenizer

    cfg = compose(overrides)
    train_set, _ = load_datasets(cfg, load_tokenizer(cfg))
    loader = PromptDataLoader(train_set, batch_size=4, pad_token_id=0, shuffle=True, seed=cfg.data.seed)
    expected = [set(loader.next_batch().index) for _ in range(3)]
    assert [dataset_indices(out / "rollouts", step) for step in (1, 2, 3)] == expected


def test_a_hung_reward_call_is_cut_off_scored_zero_and_the_run_goes_on(
    compose, rollout_app, tiny_model_dir, arith_data, tmp_path
):
    out, marker = tmp_path / "hang", tmp_path / "marker"
    marker.mkdir()
    overrides = base_overrides(tiny_model_dir, arith_data, out) + [
        "trainer.num_workers=1",
        "trainer.total_training_steps=2",
        "trainer.experiment_name=hang",
        "reward_model.num_workers=1",
        "reward_model.timeout_s=3",
        f"custom_reward_function.path={Path(__file__).parent / 'hang_once_reward.py'}",
        f"+custom_reward_function.reward_kwargs.marker_dir={marker}",
    ]
    train(compose(overrides), rollout_app=rollout_app)
    rows = read_metrics(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]  # the run finished
    assert [r["reward/timeouts"] for r in rows] == [1.0, 0.0]  # the hung call was cut off and counted, once


def test_a_curriculum_sampler_orders_the_prompts_learns_from_both_ranks_and_resumes(
    compose, rollout_app, tiny_model_dir, arith_data, tmp_path
):
    out = tmp_path / "curriculum"
    log = tmp_path / "updates.jsonl"
    overrides = base_overrides(tiny_model_dir, arith_data, out) + [
        "trainer.num_workers=2",
        "trainer.save_freq=2",
        "trainer.experiment_name=curriculum-e2e",
        f"data.sampler.class_path={Path(__file__).parent / 'backwards_sampler.py'}",
        "data.sampler.class_name=Backwards",
        f"+data.sampler.log={log}",  # the sampler's own setting, read as data_config.sampler.log
    ]
    train(compose(overrides + ["trainer.total_training_steps=2"]), rollout_app=rollout_app)
    # a second run resumes from global_step_2: the sampler's state (2 updates) and the data position come back
    train(compose(overrides + ["trainer.total_training_steps=3"]), rollout_app=rollout_app)
    updates = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(u["step"], u["updates"]) for u in updates] == [(1, 1), (2, 2), (3, 3)]  # rank 0 alone learns
    size = 32  # the training split's prompts: the sampler yields 31, 30, ... in batches of 4
    for u in updates:
        backwards = set(range(size - 4 * u["step"], size - 4 * (u["step"] - 1)))
        # every rank's samples of the step (4 prompts x 2), the prompts the sampler yielded and the rollouts hold
        assert len(u["dataset_index"]) == 8 and len(u["uid"]) == 4 and set(u["dataset_index"]) == backwards
        assert dataset_indices(out / "rollouts", u["step"]) == backwards
        assert all(0.0 <= s <= 1.0 for s in u["scores"])
    assert (out / "global_step_2" / "data_sampler_state.pt").is_file()
