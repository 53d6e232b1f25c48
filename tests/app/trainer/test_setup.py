"""What build_trainer hands the trackers (the run's config without secrets), the total steps it fills in, and the
response budget it gives the roles as seq-mean-token-sum-norm's divisor."""

import json
from pathlib import Path

from support import in_process_run_overrides

from app.config import load_config
from app.config.schema import TrainerRunConfig
from app.trainer.setup import _loggable, total_training_steps

REPO = Path(__file__).resolve().parents[3]


def test_the_logged_config_hides_the_api_key_and_keeps_the_rest():
    cfg = TrainerRunConfig()
    cfg.actor_rollout_ref.rollout.http_api_key = "sk-secret-123"
    tree = _loggable(cfg)
    assert "sk-secret-123" not in json.dumps(tree)
    assert tree["actor_rollout_ref"]["rollout"]["http_api_key"] == "<set>"
    assert tree["trainer"]["project_name"] == cfg.trainer.project_name
    assert cfg.actor_rollout_ref.rollout.http_api_key == "sk-secret-123"  # the run itself still has it
    assert _loggable(TrainerRunConfig())["actor_rollout_ref"]["rollout"]["http_api_key"] is None


def _run_cfg(model_dir, train_file, val_file) -> TrainerRunConfig:
    return load_config(
        {
            "actor_rollout_ref": {"model": {"path": str(model_dir)}, "actor": {"ppo_mini_batch_size": 2}},
            "data": {"train_files": str(train_file), "val_files": str(val_file), "train_batch_size": 2},
        }
    )


def test_total_training_steps_count_the_full_generation_batches_of_every_epoch():
    cfg = TrainerRunConfig()
    cfg.data.train_batch_size, cfg.data.gen_batch_size, cfg.trainer.total_epochs = 4, 6, 2
    # one step per generation round of gen_batch_size prompts; the loader drops the last 2 of the 20 prompts
    assert total_training_steps(cfg, 20) == (20 // 6) * 2 == 6
    cfg.trainer.total_training_steps = 5
    assert total_training_steps(cfg, 20) == 5  # given: it wins


def test_actor_and_critic_divide_seq_mean_token_sum_norm_by_the_response_budget(
    compose, tiny_model_dir, small_arith_data, tmp_path
):
    # verl's horizon: data.max_response_length reaches both roles' seq-mean-token-sum-norm divisor
    from recording_rollout import RecordingRollout

    from app.trainer.setup import build_trainer

    cfg = compose(
        [
            *in_process_run_overrides(tiny_model_dir, small_arith_data),
            "algorithm.adv_estimator=gae",
            "trainer.num_workers=1",
            "trainer.logger=[jsonl]",
            f"trainer.default_local_dir={tmp_path / 'run'}",
            "reward_model.num_workers=0",
        ]
    )
    learner = build_trainer(cfg, RecordingRollout(vocab_size=1000, n=2, response_len=8), device="cpu").learner
    assert learner.actor.config.loss_scale_factor == 8
    assert learner.critic.loss_scale_factor == 8


def test_the_rollout_is_waited_for_after_the_models_load_and_before_it_is_first_asked(
    compose, tiny_model_dir, small_arith_data, tmp_path, monkeypatch
):
    # launch.train starts the replicas beside the rank's model load: the rank may ask them nothing before it waits
    from recording_rollout import RecordingRollout

    from app.roles import factory
    from app.trainer.setup import build_trainer

    events = []

    class AskedRollout(RecordingRollout):
        def replica_versions(self):
            events.append("asked")
            return super().replica_versions()

    real_build_actor = factory.build_actor
    monkeypatch.setattr(factory, "build_actor", lambda *a, **k: events.append("actor") or real_build_actor(*a, **k))
    cfg = compose(
        [
            *in_process_run_overrides(tiny_model_dir, small_arith_data),
            "trainer.num_workers=1",
            "trainer.logger=[jsonl]",
            f"trainer.default_local_dir={tmp_path / 'run'}",
            "reward_model.num_workers=0",
        ]
    )
    rollout = AskedRollout(vocab_size=1000, n=2, response_len=8)
    build_trainer(cfg, rollout, device="cpu", rollout_ready=lambda: events.append("ready"))
    assert events[:3] == ["actor", "ready", "asked"]


def test_the_data_check_builds_the_custom_sampler_and_draws_from_it(smollm2_dir, tmp_path):
    # the pre-flight's data read (check_data) reaches a sampler that yields past the training set before any worker
    import pyarrow as pa
    import pyarrow.parquet as pq
    import pytest

    from app.data import DataError
    from app.trainer.setup import check_data

    rows = [
        {
            "data_source": "openai/gsm8k",
            "prompt": [{"role": "user", "content": f"{i}?"}],
            "reward_model": {"ground_truth": "1"},
        }
        for i in range(6)
    ]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "train.parquet")
    (tmp_path / "s.py").write_text(
        "class Past:\n    def __init__(self, data_source, data_config):\n        self.n = len(data_source)\n"
        "    def __iter__(self):\n        return iter(range(self.n + 4))\n"
    )
    base = {
        "data": {"train_files": str(tmp_path / "train.parquet"), "train_batch_size": 2},
        "actor_rollout_ref": {"model": {"path": str(smollm2_dir)}, "actor": {"ppo_mini_batch_size": 2}},
    }
    base["data"]["sampler"] = {"class_path": str(tmp_path / "s.py"), "class_name": "Past"}
    assert check_data(load_config(base)) == (6, 0)  # its first batch, 0 and 1, is in the set
    (tmp_path / "s2.py").write_text(
        "class Past:\n    def __init__(self, data_source, data_config):\n        self.n = len(data_source)\n"
        "    def __iter__(self):\n        return iter(range(self.n, self.n + 4))\n"
    )
    base["data"]["sampler"]["class_path"] = str(tmp_path / "s2.py")
    with pytest.raises(DataError, match=r"s2\.py:Past yielded 6: a sampler yields indices of the training set"):
        check_data(load_config(base))


def test_a_data_source_without_a_rule_is_named_with_its_first_row_before_any_worker(smollm2_dir, tmp_path):
    # with the built-in rules it failed at the first step's scoring, after Ray, the workers and vLLM had started
    import pyarrow as pa
    import pyarrow.parquet as pq
    import pytest

    from app.data import DataError
    from app.trainer.setup import check_data

    sources = ["openai/gsm8k", "openai/gsm8k", "aime_2025", "my/new-data", "my/new-data"]  # aime_*: a prefix rule
    rows = [
        {"data_source": ds, "prompt": [{"role": "user", "content": f"{i}?"}], "reward_model": {"ground_truth": "1"}}
        for i, ds in enumerate(sources)
    ]
    pq.write_table(pa.Table.from_pylist(rows[:3]), tmp_path / "train.parquet")
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "val.parquet")
    base = {
        "data": {
            "train_files": str(tmp_path / "train.parquet"),
            "val_files": str(tmp_path / "val.parquet"),
            "train_batch_size": 2,
        },
        "actor_rollout_ref": {"model": {"path": str(smollm2_dir)}, "actor": {"ppo_mini_batch_size": 2}},
    }
    train_only = {**base, "data": {k: v for k, v in base["data"].items() if k != "val_files"}}
    assert check_data(load_config(train_only)) == (3, 0)
    with pytest.raises(
        DataError,
        match=r"val\.parquet row 3, column data_source: no reward function registered for data_source 'my/new-data'; "
        r"known: .*aime\*",
    ):
        check_data(load_config(base))
    (tmp_path / "score.py").write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info):\n    return 0.0\n"
    )
    base["custom_reward_function"] = {"path": str(tmp_path / "score.py")}
    assert check_data(load_config(base)) == (3, 5)  # a reward function of one's own scores every source


def test_a_ground_truth_the_rule_cannot_score_is_named_with_its_row(smollm2_dir, tmp_path):
    # a code source's tests that are not JSON made every sample of that prompt a reward error, at scoring time
    import pyarrow as pa
    import pyarrow.parquet as pq
    import pytest

    from app.data import DataError
    from app.trainer.setup import check_data

    tests = ['{"inputs": ["1\\n"], "outputs": ["2\\n"]}', '{"inputs": ["1\\n"], "outputs": ["2\\n"]}', "{inputs: 1}"]
    rows = [
        {"data_source": "apps", "prompt": [{"role": "user", "content": f"{i}?"}], "reward_model": {"ground_truth": t}}
        for i, t in enumerate(tests)
    ]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "train.parquet")
    base = {
        "data": {"train_files": str(tmp_path / "train.parquet"), "train_batch_size": 2},
        "actor_rollout_ref": {"model": {"path": str(smollm2_dir)}, "actor": {"ppo_mini_batch_size": 2}},
    }
    with pytest.raises(
        DataError,
        match=r"train\.parquet row 2, reward_model\.ground_truth \(data_source 'apps'\): code tests are not valid JSON",
    ):
        check_data(load_config(base))
    pq.write_table(pa.Table.from_pylist(rows[:2]), tmp_path / "train.parquet")
    assert check_data(load_config(base)) == (2, 0)
