"""A trial's config is the base plus its parameters, isolated (name, folder, seed), and its metrics relay is exact."""

import json
import math
from pathlib import Path

import pytest

from app.config import ConfigError
from app.config.schema import TrainerRunConfig
from app.trainer.launch import rollout_app_name
from app.tuning.runner import _worst_case, check_param_values, make_context
from app.tuning.spec import parse_sweep, resolve_params
from app.tuning.trial import (
    JsonlFollower,
    TuneRows,
    build_trial_config,
    seed_for_trial,
    trial_app_name,
)


def context(tmp_path, compose, **kw):
    spec = parse_sweep(
        {
            "name": "lrsweep",
            "base": {"config": "quickstart"},
            "output_dir": str(tmp_path / "sw"),
            "params": {"actor_rollout_ref.actor.optim.lr": {"choice": [1e-4]}},
            **kw,
        }
    )
    return spec, make_context(spec, compose("quickstart"), total_steps=5)


def test_trial_config_applies_params_and_isolates_the_trial(tmp_path, compose, base_cfg):
    _, ctx = context(tmp_path, compose)
    params = {
        "actor_rollout_ref.actor.optim.lr": 3e-5,
        "actor_rollout_ref.rollout.n": 2,
        "actor_rollout_ref.actor.kl_loss_coef": 0.02,
    }
    cfg = build_trial_config(ctx, params, "ab12c_00003")
    assert cfg.actor_rollout_ref.actor.optim.lr == 3e-5
    assert cfg.actor_rollout_ref.rollout.n == 2
    assert cfg.actor_rollout_ref.actor.kl_loss_coef == 0.02
    assert cfg.trainer.experiment_name == "lrsweep-ab12c_00003"
    assert cfg.trainer.default_local_dir == str(tmp_path / "sw" / "trials" / "ab12c_00003")
    assert cfg.trainer.total_training_steps == 5
    assert "jsonl" in cfg.trainer.logger  # the relay reads metrics.jsonl
    # the Serve application is the trial's own, and the cleanup callback derives the same name
    assert rollout_app_name(cfg) == "rollout-rayrl-lrsweep-ab12c_00003" == trial_app_name(ctx, "ab12c_00003")
    # the trial adds a stable number from its id to the base's trainer.seed
    base = base_cfg()
    assert cfg.trainer.seed == seed_for_trial(base.trainer.seed, "ab12c_00003", "per_trial") != base.trainer.seed
    # untouched keys keep the base values
    assert cfg.data == base.data and cfg.actor_rollout_ref.model == base.actor_rollout_ref.model


def test_seeds_differ_between_trials_and_repeat_for_the_same_trial(tmp_path, compose, base_cfg):
    seeds = {seed_for_trial(7, f"abc_{i:05d}", "per_trial") for i in range(20)}
    assert len(seeds) == 20
    assert seed_for_trial(7, "abc_00001", "per_trial") == seed_for_trial(7, "abc_00001", "per_trial")
    assert seed_for_trial(7, "abc_00001", "fixed") == 7
    _, ctx = context(tmp_path, compose, trial_seed="fixed")
    assert build_trial_config(ctx, {}, "t1").trainer.seed == base_cfg().trainer.seed  # the base's
    # a searched seed wins over both policies
    assert build_trial_config(ctx, {"trainer.seed": 42}, "t1").trainer.seed == 42


def test_interpolations_follow_a_searched_key(tmp_path, compose):
    # rollout.response_length is ${data.max_response_length} in the base: the base must stay unresolved so a
    # searched data.max_response_length reaches the rollout too
    _, ctx = context(tmp_path, compose)
    cfg = build_trial_config(ctx, {"data.max_response_length": 24}, "t1")
    assert cfg.actor_rollout_ref.rollout.response_length == 24


def test_param_values_are_checked_against_the_whole_config_before_tune_starts(tmp_path, compose, base_cfg):
    spec = parse_sweep(
        {
            "name": "s",
            "base": {"config": "quickstart"},
            "output_dir": str(tmp_path),
            "params": {"actor_rollout_ref.rollout.n": {"grid": [4, 1]}},
        }
    )
    micro = "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"  # 4 so that n=1 passes the batch-size checks
    base = {micro: 4, "algorithm.filter_groups.enable": True}
    spec = resolve_params(spec, base_cfg(**base))
    ctx = make_context(spec, compose("quickstart", [f"{k}={v}" for k, v in base.items()]), total_steps=3)
    # a group filter (algorithm.filter_groups) needs several samples per prompt: n=1 is refused by the trainer's own
    # validation, named here
    with pytest.raises(ConfigError, match=r"sweep params.actor_rollout_ref.rollout.n=1: .*must be at least 2"):
        check_param_values(spec, ctx)


@pytest.mark.parametrize(
    "override, message",
    [
        ("data.val_files=''", r"search.metric='val-core/reward/mean' .* no data.val_files"),
        ("trainer.val_only=true", r"^trainer\.val_only=true in a sweep's base config: its trials would train"),
    ],
)
def test_a_base_config_the_sweep_cannot_compare_trials_on_is_refused(tmp_path, compose, override, message):
    spec = parse_sweep(
        {
            "name": "s",
            "base": {"config": "quickstart"},
            "output_dir": str(tmp_path),
            "params": {"actor_rollout_ref.actor.optim.lr": {"choice": [1e-4]}},
        }
    )
    with pytest.raises(ConfigError, match=message):
        check_param_values(spec, make_context(spec, compose("quickstart", [override]), total_steps=3))


def test_a_sweep_types_the_base_tree_once_for_its_checks_and_three_trials(tmp_path, compose, monkeypatch):
    from app.config import loader, typed
    from app.tuning import trial

    parses = []  # every tree turned into a TrainerRunConfig (load_config and built_config both come through here)

    def counting_build(cls, data, path=""):
        if cls is TrainerRunConfig and path == "":
            parses.append(path)
        return typed.build_typed(cls, data, path)

    monkeypatch.setattr(loader, "build_typed", counting_build)
    monkeypatch.setattr(trial, "build_typed", counting_build)
    lr = "actor_rollout_ref.actor.optim.lr"
    spec = parse_sweep(
        {
            "name": "s",
            "base": {"config": "quickstart"},
            "output_dir": str(tmp_path),
            "params": {lr: {"grid": [1e-5, 3e-5, 1e-4]}, "trainer.num_workers": {"grid": [1, 2]}},
        }
    )
    tree = compose("quickstart")
    assert parses == []
    ctx = make_context(spec, tree, total_steps=5)
    check_param_values(spec, ctx)
    worst = _worst_case(spec, ctx)
    trials = [build_trial_config(ctx, {lr: value}, f"t{i}") for i, value in enumerate([1e-5, 3e-5, 1e-4])]
    assert len(parses) == 1  # make_context's; the checks and the trials copy the typed base
    assert [t.actor_rollout_ref.actor.optim.lr for t in trials] == [1e-5, 3e-5, 1e-4]
    assert worst.trainer.num_workers == 2
    assert ctx.base_cfg.data.gen_batch_size is None  # the shared base stays unvalidated: each trial fills its own
    assert all(t.data.gen_batch_size == t.data.train_batch_size for t in trials)


def test_a_key_interpolating_a_searched_key_follows_it(tmp_path, compose):
    tree = compose("quickstart")
    tree["critic"]["optim"]["lr"] = "${actor_rollout_ref.actor.optim.lr}"
    spec = parse_sweep(
        {
            "name": "s",
            "base": {"config": "quickstart"},
            "output_dir": str(tmp_path),
            "params": {"actor_rollout_ref.actor.optim.lr": {"choice": [1e-4]}},
        }
    )
    cfg = build_trial_config(make_context(spec, tree, total_steps=3), {"actor_rollout_ref.actor.optim.lr": 3e-5}, "t1")
    assert cfg.critic.optim.lr == 3e-5


def test_a_searched_value_is_converted_and_checked_as_the_loader_would(tmp_path, compose):
    _, ctx = context(tmp_path, compose)
    cfg = build_trial_config(ctx, {"actor_rollout_ref.actor.optim.lr": "1e-5"}, "t1")  # YAML 1.1 reads 1e-5 as text
    assert cfg.actor_rollout_ref.actor.optim.lr == 1e-5
    with pytest.raises(ConfigError, match=r"actor_rollout_ref.rollout.n"):
        build_trial_config(ctx, {"actor_rollout_ref.rollout.n": "many"}, "t1")


def test_follower_returns_only_complete_new_lines(tmp_path):
    path = tmp_path / "metrics.jsonl"
    follower = JsonlFollower(path)
    assert follower.new_rows() == []  # no file yet
    with path.open("w") as f:
        f.write('{"step": 0, "a": 1}\n{"step": 1, "a"')  # the second line is still being written
        f.flush()
        assert follower.new_rows() == [{"step": 0, "a": 1}]
        f.write(": 2}\n")
        f.flush()
        assert follower.new_rows() == [{"step": 1, "a": 2}]
        assert follower.new_rows() == []
    path.write_text('{"step": 0, "a": 5}\n')  # rewritten shorter: read again from the start
    assert follower.new_rows() == [{"step": 0, "a": 5}]


def test_reports_carry_the_latest_validation_and_hold_the_last_step():
    rows = TuneRows("val", total_steps=3, extra={"seed": 9})
    ready = rows.add([{"step": 1, "score": 0.1}, {"step": 0, "val": 0.5}])
    # step 1 precedes any validation: NaN; the step-0 row after it is a replay and is skipped
    assert len(ready) == 1 and math.isnan(ready[0]["val"]) and ready[0]["seed"] == 9
    ready = rows.add([{"step": 2, "val": 0.25, "score": 0.3}, {"step": 3, "score": 0.4}])
    assert ready == [{"step": 2, "val": 0.25, "score": 0.3, "seed": 9}]  # step 3 is the last: held
    assert rows.add([{"step": 3, "score": 0.9}]) == []  # the same step again is a duplicate
    assert rows.finish() == [{"step": 3, "score": 0.4, "val": 0.25, "seed": 9}]  # carries step 2's validation
    assert rows.finish() == []


def test_a_resumed_trial_keeps_the_rows_its_checkpoint_covers(tmp_path, compose):
    from app.trainer import checkpoints
    from app.tuning.trial import _drop_rows_past_resume

    _, ctx = context(tmp_path, compose)
    cfg = build_trial_config(ctx, {}, "t1")
    out = Path(cfg.trainer.default_local_dir)
    out.mkdir(parents=True)
    metrics = out / "metrics.jsonl"
    metrics.write_text("".join(json.dumps({"step": s}) + "\n" for s in range(5)))
    _drop_rows_past_resume(cfg, metrics)  # no checkpoint: the run starts over, its old rows go
    assert not metrics.exists()
    metrics.write_text("".join(json.dumps({"step": s}) + "\n" for s in range(5)))
    staging = checkpoints.staging_dir(out, 2, "x")
    staging.mkdir()
    checkpoints.publish(out, staging, 2, {"global_step": 2}, max_to_keep=None)
    _drop_rows_past_resume(cfg, metrics)  # resumes after step 2: steps 3 and 4 will be trained again
    assert [json.loads(line)["step"] for line in metrics.read_text().splitlines()] == [0, 1, 2]
