"""Sweeps through real Ray Tune on the session cluster, with a stand-in for `launch.train` that writes metrics.jsonl.

The stand-in writes the rows a real run writes (step 0 validation, then one row per step with a validation every
2 steps) with a validation reward fixed by the trial's learning rate, so ASHA's decisions and the table's order are
known in advance. Everything else (the trainable, the relay, Tune, ASHA, the results, the Serve cleanup) is real.
"""

import json
import math

import pytest
from support import free_port

from app.config import ConfigError
from app.tuning.runner import run_sweep
from app.tuning.spec import parse_sweep, resolve_params

pytestmark = pytest.mark.slow

STEPS = 4


def stand_in_train(reward_by_lr: dict, *, fail_flag: str = "", serve_port: int = 0, hang_below: float = -1.0):
    """A `train(cfg)` stand-in (self-contained: it is pickled by value into the trial actors).

    Appends one call to `<out>/calls.txt`; raises if `fail_flag` names an existing file and the reward is the lowest;
    with `serve_port`, deploys a tiny Serve application under the trial's rollout name, like `launch.train`, deletes it
    when done, and, for rewards below `hang_below`, keeps "training" (waits) after writing its rows, so only a
    scheduler stop ends it.
    """

    def train(cfg):
        import json as _json
        import os
        import threading
        from pathlib import Path

        out = Path(cfg.trainer.default_local_dir)
        out.mkdir(parents=True, exist_ok=True)
        with (out / "calls.txt").open("a") as f:
            f.write("call\n")
        reward = reward_by_lr[cfg.actor_rollout_ref.actor.optim.lr]
        if fail_flag and os.path.exists(fail_flag) and reward == min(reward_by_lr.values()):
            raise RuntimeError("stand-in crash")
        app = None
        if serve_port:
            from ray import serve

            from app.trainer.launch import rollout_app_name

            @serve.deployment(ray_actor_options={"num_cpus": 0})
            class Rollout:
                def __call__(self):
                    return "ok"

            serve.start(http_options={"host": "127.0.0.1", "port": serve_port})
            app = rollout_app_name(cfg)
            serve.run(Rollout.bind(), name=app, route_prefix=None)
            (out / "deployed.txt").write_text(app)
        try:
            with (out / "metrics.jsonl").open("a") as f:
                for step in range(cfg.trainer.total_training_steps + 1):
                    row = {"step": step, "critic/score/mean": reward / 2, "timing_s/step": 0.01}
                    if step % 2 == 0:
                        row["val-core/reward/mean"] = reward
                    f.write(_json.dumps(row) + "\n")
                    f.flush()
            if reward < hang_below:
                threading.Event().wait(120)  # a long job: ASHA must stop it well before this ends
            (out / "hf_model").mkdir(exist_ok=True)
        finally:
            if app is not None:
                from ray import serve

                serve.delete(app)
        return {"val-core/reward/mean": reward}

    return train


def sweep_spec(tmp_path, base_cfg, **raw):
    spec = parse_sweep(
        {
            "name": raw.pop("name", "fake"),
            "base": {"config": "quickstart"},
            "output_dir": str(tmp_path / "sweep"),
            **raw,
        }
    )
    return resolve_params(spec, base_cfg())


HTTP_PORT = free_port()  # Serve's proxy, started by the sweep driver: never the default 8000 other clusters use


def base_tree(compose):
    return compose(
        "quickstart",
        [
            f"trainer.total_training_steps={STEPS}",
            "trainer.test_freq=2",
            f"actor_rollout_ref.rollout.http_port={HTTP_PORT}",
            "trainer.num_workers=1",
            "trainer.cpus_per_worker=2",
            "actor_rollout_ref.rollout.replicas=1",
            "actor_rollout_ref.rollout.cpus_per_replica=1",
            "data.train_files=/nonexistent/train.parquet",
            "data.val_files=/nonexistent/test.parquet",
        ],
    )


def test_asha_stops_the_worse_trial_and_its_rollout_app_is_deleted(ray_cluster, tmp_path, compose, base_cfg):
    from ray import serve

    from app.plot import find_runs

    rewards = {1e-4: 0.8, 3e-4: 0.2}
    spec = sweep_spec(
        tmp_path,
        base_cfg,
        name="asha",
        search={"method": "random", "max_concurrent_trials": 1},  # in order: good, then bad
        params={"actor_rollout_ref.actor.optim.lr": {"grid": [1e-4, 3e-4]}},
        scheduler={"type": "asha", "grace_period": 1, "reduction_factor": 2},
    )
    train = stand_in_train(rewards, serve_port=HTTP_PORT, hang_below=0.5)
    outcome = run_sweep(spec, base_tree(compose), total_steps=STEPS, train_fn=train, verbose=0)

    good, bad = outcome.rows
    assert good.params["actor_rollout_ref.actor.optim.lr"] == 1e-4 and good.status == "completed"
    assert good.steps == STEPS and good.value == 0.8
    # at the first rung (step 1) the second trial's 0.2 is below the first's 0.8: stopped there
    assert bad.params["actor_rollout_ref.actor.optim.lr"] == 3e-4 and bad.status == "stopped early"
    assert bad.steps is not None and bad.steps < STEPS and bad.value == 0.2
    # the stopped trial had deployed its own app and could not delete it: the driver's callback did
    for r in (good, bad):
        assert (outcome.sweep_dir / "trials" / r.trial_id / "deployed.txt").read_text().endswith(r.trial_id)
    apps = serve.status().applications
    assert not [a for a in apps if a.startswith("rollout-rayrl-asha-")], apps

    # each trial: its own folder with its seed recorded; the seeds differ
    records = [json.loads((outcome.sweep_dir / "trials" / r.trial_id / "trial.json").read_text()) for r in outcome.rows]
    assert [rec["seed"] for rec in records] == [good.seed, bad.seed] and good.seed != bad.seed
    assert records[0]["experiment_name"] == f"asha-{good.trial_id}"
    # one curve per trial for app.plot
    assert sorted(find_runs(outcome.sweep_dir)) == sorted(f"trials/{r.trial_id}" for r in outcome.rows)
    assert outcome.best_config == outcome.sweep_dir / "best.yaml"
    assert "lr: 0.0001" in outcome.best_config.read_text()
    assert (outcome.sweep_dir / "results.md").read_text().splitlines()[2].startswith(f"| 1 | {good.trial_id} |")


def test_grid_sweep_runs_every_combination_within_the_cluster(ray_cluster, tmp_path, compose, base_cfg):
    rewards = {1e-4: 0.3, 2e-4: 0.6}
    spec = sweep_spec(
        tmp_path,
        base_cfg,
        name="grid",
        search={"method": "grid"},
        params={
            "actor_rollout_ref.actor.optim.lr": {"grid": [1e-4, 2e-4]},
            "actor_rollout_ref.rollout.n": {"grid": [2, 4]},
        },
        scheduler={"type": "fifo"},
    )
    outcome = run_sweep(spec, base_tree(compose), total_steps=STEPS, train_fn=stand_in_train(rewards), verbose=0)
    # 1 worker × 2 CPUs + 1 replica × 1 CPU = 3 CPUs per trial (+0.01 for its actor); the session cluster has 8 -> 2
    assert outcome.max_concurrent_trials == 2
    combos = sorted(
        (r.params["actor_rollout_ref.actor.optim.lr"], r.params["actor_rollout_ref.rollout.n"]) for r in outcome.rows
    )
    assert combos == [(1e-4, 2), (1e-4, 4), (2e-4, 2), (2e-4, 4)]
    assert all(r.status == "completed" for r in outcome.rows)
    assert [r.value for r in outcome.rows] == [0.6, 0.6, 0.3, 0.3]  # best first


def test_an_interrupted_sweep_resumes_without_rerunning_finished_trials(ray_cluster, tmp_path, compose, base_cfg):
    rewards = {1e-4: 0.9, 2e-4: 0.1}
    flag = tmp_path / "crash"
    flag.write_text("")
    spec = sweep_spec(
        tmp_path,
        base_cfg,
        name="resume",
        search={"method": "grid"},
        params={"actor_rollout_ref.actor.optim.lr": {"grid": [1e-4, 2e-4]}},
        scheduler={"type": "fifo"},
    )
    first = run_sweep(
        spec, base_tree(compose), total_steps=STEPS, train_fn=stand_in_train(rewards, fail_flag=str(flag)), verbose=0
    )
    assert sorted(r.status for r in first.rows) == ["completed", "error"]

    changed = parse_sweep(
        {
            "name": "resume",
            "base": {"config": "quickstart"},
            "output_dir": str(tmp_path / "sweep"),
            "params": {"actor_rollout_ref.actor.optim.lr": {"grid": [1e-4, 5e-4]}},
        }
    )
    with pytest.raises(ConfigError, match=r"was started with a different search"):
        run_sweep(changed, base_tree(compose), total_steps=STEPS, train_fn=stand_in_train(rewards), verbose=0)
    fresh_only = parse_sweep(
        {
            **{"name": "resume", "base": {"config": "quickstart"}},
            "output_dir": str(tmp_path / "sweep"),
            "resume": False,
            "params": {"actor_rollout_ref.actor.optim.lr": {"grid": [1e-4, 2e-4]}},
        }
    )
    with pytest.raises(ConfigError, match=r"resume=false but .* already holds a sweep"):
        run_sweep(fresh_only, base_tree(compose), total_steps=STEPS, train_fn=stand_in_train(rewards), verbose=0)

    flag.unlink()
    second = run_sweep(spec, base_tree(compose), total_steps=STEPS, train_fn=stand_in_train(rewards), verbose=0)
    assert [r.status for r in second.rows] == ["completed", "completed"]
    assert [r.trial_id for r in second.rows] == [
        r.trial_id for r in sorted(first.rows, key=lambda r: -r.value if math.isfinite(r.value) else 0)
    ]
    calls = {
        r.params["actor_rollout_ref.actor.optim.lr"]: (second.sweep_dir / "trials" / r.trial_id / "calls.txt")
        .read_text()
        .count("call")
        for r in second.rows
    }
    assert calls == {1e-4: 1, 2e-4: 2}  # the finished trial was not run again; the crashed one was


def test_optuna_search(ray_cluster, tmp_path, compose, base_cfg):
    pytest.importorskip("optuna", reason="the optional extra rayrl[optuna] is not installed")
    rewards = {1e-4: 0.1, 2e-4: 0.5, 4e-4: 0.7}
    spec = sweep_spec(
        tmp_path,
        base_cfg,
        name="opt",
        search={"method": "optuna", "num_samples": 2, "seed": 3},
        params={"actor_rollout_ref.actor.optim.lr": {"choice": [1e-4, 2e-4, 4e-4]}},
        scheduler={"type": "fifo"},
    )
    outcome = run_sweep(spec, base_tree(compose), total_steps=STEPS, train_fn=stand_in_train(rewards), verbose=0)
    assert len(outcome.rows) == 2 and all(r.status == "completed" for r in outcome.rows)
    values = [r.value for r in outcome.rows]
    assert values == sorted(values, reverse=True)
    assert outcome.rows[0].value == max(rewards[r.params["actor_rollout_ref.actor.optim.lr"]] for r in outcome.rows)


def test_optuna_missing_is_a_clear_error(tmp_path, compose, base_cfg, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "optuna", None)  # `import optuna` now raises ImportError
    spec = sweep_spec(
        tmp_path,
        base_cfg,
        search={"method": "optuna"},
        params={"actor_rollout_ref.actor.optim.lr": {"loguniform": [1e-5, 1e-3]}},
    )
    with pytest.raises(ConfigError, match=r"search.method=optuna needs the optuna package.*pip install"):
        run_sweep(spec, base_tree(compose), total_steps=STEPS, train_fn=stand_in_train({}), verbose=0)
