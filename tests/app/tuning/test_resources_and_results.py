"""Concurrency from the cluster's resources; the results table's order; the best config loads back through Hydra."""

import csv
import dataclasses
import math
import subprocess
import sys
from pathlib import Path

import pytest

from app.config import ConfigError
from app.tuning.resources import TrialNeeds, max_concurrent_trials, trial_needs
from app.tuning.results import TrialRow, hydra_value, sort_rows, write_best, write_table
from app.tuning.runner import make_context
from app.tuning.spec import parse_sweep

REPO = Path(__file__).resolve().parents[3]


def test_trial_needs_count_workers_and_rollout_replicas(base_cfg):
    cfg = base_cfg(
        **{
            "trainer.num_workers": 2,
            "trainer.cpus_per_worker": 1.5,
            "actor_rollout_ref.rollout.replicas": 3,
            "actor_rollout_ref.rollout.cpus_per_replica": 0.5,
        }
    )
    needs = trial_needs(cfg)
    assert needs.cpus == 2 * 1.5 + 3 * 0.5 == 4.5 and needs.gpus == 0
    assert "trainer.num_workers=2" in needs.explain


@pytest.mark.parametrize(
    "cluster, needs, cap, expected",
    [
        ({"CPU": 8.0}, TrialNeeds(3, 0, ""), None, 2),  # floor(8 / 3)
        ({"CPU": 9.1}, TrialNeeds(4.5, 0, ""), None, 2),  # two fit, with each trial's actor's 0.01 CPU
        ({"CPU": 9.0}, TrialNeeds(4.5, 0, ""), None, 1),  # 2 × (4.5 + 0.01) > 9
        ({"CPU": 16.0}, TrialNeeds(2, 0, ""), 3, 3),  # 8 fit, capped at 3
        ({"CPU": 16.0, "GPU": 2.0}, TrialNeeds(2, 1, ""), None, 2),  # GPUs are the tighter limit
        ({"CPU": 16.0, "rollout_node": 3.0}, TrialNeeds(2, 0, "", {"rollout_node": 1.0}), None, 3),  # a custom resource
    ],
)
def test_max_concurrent_trials(cluster, needs, cap, expected):
    assert max_concurrent_trials(cluster, needs, cap) == expected


def test_a_trial_larger_than_the_cluster_is_an_error():
    with pytest.raises(ConfigError, match=r"one sweep trial needs 2 workers .*, but the Ray cluster has 3 CPUs"):
        max_concurrent_trials({"CPU": 3.0}, TrialNeeds(4, 0, "2 workers = 4 CPUs"))
    with pytest.raises(ConfigError, match=r"the Ray cluster has 8 CPUs and 0 GPUs, 0 'train_node'"):
        max_concurrent_trials({"CPU": 8.0}, TrialNeeds(4, 0, "", {"train_node": 1.0}))


def test_trial_needs_count_custom_resources_per_worker_and_replica(base_cfg):
    cfg = base_cfg(
        **{
            "trainer.num_workers": 2,
            "+trainer.worker_resources.node": 1,
            "+actor_rollout_ref.rollout.replica_resources.node": 0.5,
        }
    )
    needs = trial_needs(cfg)
    assert needs.custom == {"node": 2 * 1 + 1 * 0.5}
    assert "trainer.worker_resources.node=1 × 2" in needs.explain


def row(trial_id, value, status="completed", **params):
    return TrialRow(
        trial_id=trial_id,
        status=status,
        params=params,
        seed=1,
        steps=3,
        value=value,
        best=value,
        out_dir=f"/x/{trial_id}",
    )


def test_rows_sort_best_first_with_missing_and_errored_last():
    rows = [row("a", 0.2), row("b", math.nan), row("c", 0.9, status="error"), row("d", 0.7), row("e", 0.5)]
    assert [r.trial_id for r in sort_rows(rows, "max")] == ["d", "e", "a", "b", "c"]
    assert [r.trial_id for r in sort_rows(rows, "min")] == ["a", "e", "d", "b", "c"]


def test_table_files(tmp_path):
    rows = sort_rows([row("a", 0.25, lr=1e-4), row("b", 0.5, status="stopped early", lr=3e-4)], "max")
    text = write_table(tmp_path, rows, "val-core/reward/mean")
    with (tmp_path / "results.csv").open() as f:
        table = list(csv.reader(f))
    assert table[0] == [
        "rank",
        "trial_id",
        "status",
        "lr",
        "seed",
        "steps",
        "val-core/reward/mean",
        "best val-core/reward/mean",
        "output",
    ]
    assert [r[1] for r in table[1:]] == ["b", "a"]
    assert table[1][3] == "0.0003" and table[1][6] == "0.5"
    assert text == (tmp_path / "results.md").read_text()
    assert text.splitlines()[2].startswith("| 1 | b | stopped early | 0.0003 |")


@pytest.mark.parametrize(
    "value, text",
    [(None, "null"), (True, "true"), (3, "3"), (3e-05, "3e-05"), ("abc", "abc"), ("a b", "'a b'"), ("1e-3", "'1e-3'")],
)
def test_hydra_values_read_back_unchanged(value, text):
    assert hydra_value(value) == text


def best_setup(tmp_path, compose):
    spec = parse_sweep(
        {
            "name": "bs",
            "base": {"config": "quickstart"},
            "output_dir": str(tmp_path / "sweep"),
            "params": {"actor_rollout_ref.actor.optim.lr": {"choice": [1e-4]}},
        }
    )
    ctx = make_context(spec, compose("quickstart", ["trainer.test_freq=2"]), total_steps=4)
    (tmp_path / "sweep").mkdir()
    best = TrialRow(
        trial_id="q_00001",
        status="completed",
        seed=1234,
        steps=4,
        value=0.75,
        best=0.75,
        out_dir="",
        params={
            "actor_rollout_ref.actor.optim.lr": 4.2e-05,
            "actor_rollout_ref.rollout.n": 2,
            "actor_rollout_ref.actor.kl_loss_coef": 0.0,
        },
    )
    return ctx, best, write_best(ctx, best, "quickstart", ["trainer.test_freq=2"])


def test_best_yaml_composes_through_hydra_into_the_trial_config(tmp_path, compose, base_cfg):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from app.config import load_config

    ctx, best, path = best_setup(tmp_path, compose)
    with initialize_config_dir(config_dir=str(path.parent), version_base=None):
        cfg = load_config(hydra_compose(config_name="best"))
    assert cfg.actor_rollout_ref.actor.optim.lr == 4.2e-05
    assert cfg.actor_rollout_ref.rollout.n == 2 and cfg.actor_rollout_ref.actor.kl_loss_coef == 0.0
    assert cfg.trainer.seed == 1234  # the best trial's own seed, to reproduce it
    assert cfg.trainer.total_training_steps == 4
    assert cfg.trainer.experiment_name == "bs-best"  # a new run, not the trial's folder (that would resume it)
    assert cfg.trainer.default_local_dir == str(tmp_path / "sweep" / "best")
    base = base_cfg()  # everything not searched is the base's (interpolations such as rollout.response_length too)
    assert cfg.actor_rollout_ref.rollout == dataclasses.replace(base.actor_rollout_ref.rollout, n=2)
    assert cfg.data == base.data and cfg.actor_rollout_ref.model == base.actor_rollout_ref.model

    # the overrides file gives the same config from the base name
    lines = [ln for ln in (path.parent / "best_overrides.txt").read_text().splitlines() if not ln.startswith("#")]
    assert "actor_rollout_ref.actor.optim.lr=4.2e-05" in lines and "trainer.test_freq=2" in lines
    via_overrides = load_config(compose("quickstart", lines, resolve=True))
    assert via_overrides == cfg


def test_best_yaml_is_accepted_by_the_train_command_line(tmp_path, compose):
    _, _, path = best_setup(tmp_path, compose)
    # --cfg job: Hydra composes and prints the job config instead of running it
    out = subprocess.run(
        [sys.executable, "-m", "app.train", "--config-path", str(path.parent), "--config-name", "best", "--cfg", "job"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "lr: 4.2e-05" in out.stdout and "experiment_name: bs-best" in out.stdout


def test_trial_needs_count_the_gpus_of_the_trials_layout(base_cfg):
    """A GPU trial holds the plan's GPUs (app.config.placement): colocated, one per training rank, whatever the
    cluster the sweep runs on; split, the replicas' too."""
    gpu = {"trainer.n_gpus_per_node": 2, "trainer.num_workers": "null"}
    assert trial_needs(base_cfg(**gpu)).gpus == pytest.approx(2.0)
    split = trial_needs(base_cfg(**gpu, **{"trainer.placement": "split", "actor_rollout_ref.rollout.replicas": 1}))
    assert split.gpus == pytest.approx(3.0) and "3 GPUs (trainer.placement=split)" in split.explain
