"""`python -m app.train ... --dry-run`: the config and the data are checked, the plan is printed, nothing starts."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import VERL_MULTI_TURN, free_port

from app.dry_run import DryRun, split_argv

REPO = Path(__file__).resolve().parents[2]


def test_split_argv_takes_the_dry_run_flags_and_leaves_hydras():
    request, rest = split_argv(
        ["--config-name", "quickstart", "--dry-run", "--gpus-per-node", "8", "--nodes=2", "trainer.n_gpus_per_node=8"]
    )
    assert request == DryRun(nodes=2, gpus_per_node=8, cpus_per_node=None)
    assert rest == ["--config-name", "quickstart", "trainer.n_gpus_per_node=8"]
    assert split_argv(["--config-name", "quickstart", "a.b=1"]) == (None, ["--config-name", "quickstart", "a.b=1"])


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--nodes", "2"], "describe a cluster for --dry-run; add --dry-run"),
        (["--dry-run", "--nodes", "0"], "--nodes=0 must be >= 1"),
    ],
)
def test_cluster_flags_without_sense_are_refused(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        split_argv(argv)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def _train(args: list[str]) -> tuple[subprocess.CompletedProcess, float]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "app.train", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    return done, time.monotonic() - start


def test_dry_run_prints_a_gpu_plan_and_refuses_a_cluster_too_small(tiny_model_dir, small_arith_data, tmp_path):
    base = [
        f"data.train_files={small_arith_data / 'train.parquet'}",
        f"data.val_files={small_arith_data / 'test.parquet'}",
        "data.train_batch_size=4",
        "data.max_prompt_length=256",
        f"actor_rollout_ref.model.path={tiny_model_dir}",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.rollout.n=2",
        "trainer.n_gpus_per_node=4",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=2",
        f"trainer.default_local_dir={tmp_path / 'run'}",
        f"actor_rollout_ref.rollout.http_port={free_port()}",
    ]  # not 8000, which another run may hold
    done, seconds = _train(["--dry-run", "--gpus-per-node", "4", *base])
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "plan: trainer.device=cuda, trainer.placement=colocated, 4 training ranks" in out
    assert "rollout replica x2: each {1 CPU} + {0.51 GPU} + {0.51 GPU}; vLLM workers: 2" in out
    assert "train worker x4: each {1 CPU, 0.49 GPU}" in out
    assert "checked against the described cluster (CPUs not given: assumed enough): 1 node, 6 CPU, 4 GPU" in out
    assert not (tmp_path / "run").exists()  # nothing was started, nothing written
    assert seconds < 60, seconds

    done, _ = _train(["--dry-run", "--gpus-per-node", "2", *base])
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()  # one line, no traceback
    assert line.startswith("error: the run needs 6 CPU, 4 GPU") and "GPU is short by 2" in line


@pytest.mark.parametrize(
    "settings, line",
    [
        ({}, "  model sharding: actor: FSDP2, one copy sharded over all 16 ranks"),
        (
            {"actor_rollout_ref": {"actor": {"fsdp_config": {"fsdp_size": 8, "reshard_after_forward": False}}}},
            "  model sharding: actor: FSDP2, 2 groups of 8 ranks, each shards a copy (hybrid, fsdp_size=8), layers "
            "kept gathered from forward to backward",
        ),
        (
            {"algorithm": {"adv_estimator": "gae"}, "critic": {"strategy": "deepspeed"}},
            "  model sharding: actor: FSDP2, one copy sharded over all 16 ranks; critic: DeepSpeed ZeRO-2 over all "
            "16 ranks",
        ),
    ],
)
def test_the_plan_says_how_the_models_are_sharded(settings, line):
    from omegaconf import OmegaConf

    from app.config import load_config
    from app.dry_run import plan_text

    base = {
        "data": {"train_files": "train.parquet", "train_batch_size": 16},
        "actor_rollout_ref": {"model": {"path": "/m"}, "actor": {"ppo_mini_batch_size": 16}},
        "trainer": {"n_gpus_per_node": 8, "nnodes": 2},
        "algorithm": {"adv_estimator": "grpo"},  # no critic
    }
    cfg = load_config(OmegaConf.to_container(OmegaConf.merge(base, settings)))
    lines = plan_text(cfg, [{"CPU": 32.0, "GPU": 8.0}] * 2, "two nodes").splitlines()
    assert line in lines
    one_rank = load_config({**base, "trainer": {"num_workers": 1}})
    assert not any("sharding" in text for text in plan_text(one_rank, [{"CPU": 2.0}], "this machine").splitlines())


def test_a_verl_config_folder_runs_with_config_path_as_in_verls_scripts(tiny_model_dir, small_arith_data, tmp_path):
    # verl's multi-turn and recipe scripts pass --config-path <their folder> --config-name <their file>, whose
    # defaults start from ppo_trainer and whose hydra.searchpath names verl's source tree (absent here)
    (tmp_path / "gsm8k_multiturn_grpo.yaml").write_text(VERL_MULTI_TURN)
    done, _ = _train(
        [
            f"--config-path={tmp_path}",
            "--config-name=gsm8k_multiturn_grpo",
            "algorithm.adv_estimator=grpo",
            "data.train_batch_size=4",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            f"actor_rollout_ref.model.path={tiny_model_dir}",
            f"data.train_files={small_arith_data / 'train.parquet'}",
            f"data.val_files={small_arith_data / 'test.parquet'}",
            "--dry-run",
        ]
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "fits: every process has a place" in done.stdout
    assert "verl/trainer/config" not in done.stderr  # Hydra's warning about verl's own folder is dropped


def test_the_local_cluster_of_the_plan_is_sized_by_ray_init_where_the_user_sizes_it(monkeypatch):
    from support import with_dotted

    from app.config import load_config
    from app.config.placement import plan_resources
    from app.dry_run import cluster_for

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    base = {
        "data": {"train_files": "train.parquet", "train_batch_size": 4},
        "actor_rollout_ref": {"model": {"path": "/models/x"}, "actor": {"ppo_mini_batch_size": 4}},
        "algorithm": {"adv_estimator": "grpo"},
        "trainer": {"n_gpus_per_node": 2, "device": "cpu"},  # a GPU layout computed on the CPU
    }
    cfg = load_config(with_dotted(base))
    nodes, where = cluster_for(cfg, plan_resources(cfg), DryRun())
    assert where == "a local Ray cluster on this machine" and nodes[0]["GPU"] == 2  # the simulated layout's
    assert nodes[0]["CPU"] >= plan_resources(cfg).total()["CPU"] + 2
    sized = load_config(with_dotted({**base, "ray_kwargs": {"ray_init": {"num_cpus": 3, "num_gpus": 1}}}))
    nodes, _ = cluster_for(sized, plan_resources(sized), DryRun())
    assert (nodes[0]["CPU"], nodes[0]["GPU"]) == (3.0, 1)  # what ray.init would give the cluster it starts
