"""verl's GRPO GPU layout, scaled down, on the suite's Ray cluster of 4 declared GPUs (tests/conftest.py), computed on
the CPU (trainer.device=cpu): 4 training ranks and the rollout colocated on the same GPUs, tensor parallelism 2, so
2 replicas. Ray places by the declared GPUs exactly as on real ones; each replica's vLLM runs one CPU worker
(app/config/placement.py says so), the GPUs of its second worker are held but idle.

Checked: the plan's every GPU is held (each GPU one train rank and one vLLM worker's share), the run trains 2 steps,
and every replica ends on the trainer's weights.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.config.placement import ROLLOUT_GPU_SHARE

pytestmark = pytest.mark.slow
APP = "gpu-layout-rollout"
# as tests/app/trainer/test_multinode.py: two fp32 sums of the same numbers in two processes
SUM_TOLERANCE = 1e-9


def overrides(model, data: Path, out: Path, port: int) -> list[str]:
    return [
        f"actor_rollout_ref.model.path={model}",
        "actor_rollout_ref.model.lora_rank=0",
        f"data.train_files={data / 'train.parquet'}",
        f"data.val_files={data / 'test.parquet'}",
        "data.train_batch_size=4",
        "data.max_prompt_length=256",
        "data.max_response_length=8",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.actor.optim.lr=1e-3",
        "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp32",
        "actor_rollout_ref.rollout.dtype=float32",
        "actor_rollout_ref.rollout.max_num_seqs=16",
        "actor_rollout_ref.rollout.cpu_kv_cache_gib=0.25",
        f"actor_rollout_ref.rollout.http_port={port}",
        # the layout under test: a verl GPU script's keys, computed on the CPU
        "trainer.n_gpus_per_node=4",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=2",
        "trainer.device=cpu",
        "trainer.cpus_per_worker=1",
        "trainer.total_training_steps=2",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
        "trainer.logger=[jsonl]",
        "trainer.experiment_name=gpu-layout",
        f"trainer.default_local_dir={out}",
        "reward_model.num_workers=1",
    ]


@pytest.fixture(scope="module")
def run(ray_cluster, compose, tiny_model_dir, small_arith_data, free_port, tmp_path_factory) -> dict:
    import ray
    from ray import serve
    from safetensors.torch import load_file

    from app.config.placement import plan_resources
    from app.trainer.launch import ensure_ray, replica_placement, train
    from serve import deploy_rollout
    from serve.payload import weights_sum

    out = tmp_path_factory.mktemp("gpu-layout") / "run"
    cfg = compose(overrides(tiny_model_dir, small_arith_data, out, free_port()))
    ensure_ray(cfg)  # connected to the session cluster: the plan fits its 4 GPUs
    gpus_before = ray.available_resources().get("GPU", 0.0)
    # deployed here, as train() would, so that the replicas outlive the run and can be asked afterwards
    client = deploy_rollout(
        cfg.actor_rollout_ref.rollout,
        cfg.actor_rollout_ref.model.path,
        APP,
        trust_remote_code=False,
        seed=cfg.trainer.seed,
        route_prefix=None,
        placement=replica_placement(cfg, plan_resources(cfg)),
    )
    try:
        gpus_with_rollout = ray.available_resources().get("GPU", 0.0)
        train(cfg, rollout_app=APP)
        exported = load_file(str(out / "hf_model" / "model.safetensors"))
        yield {
            "cfg": cfg,
            "out": out,
            "gpus_before": gpus_before,
            "gpus_with_rollout": gpus_with_rollout,
            "checksums": client.weights_checksums(),
            "versions": client.replica_versions(),
            "trainer_sum": weights_sum(exported.values()),
        }
    finally:
        serve.delete(APP)


def test_the_layout_is_verls_four_ranks_and_two_tp2_replicas(run):
    cfg = run["cfg"]
    assert (cfg.trainer.num_workers, cfg.actor_rollout_ref.rollout.replicas) == (4, 2)
    assert cfg.trainer.placement == "colocated" and cfg.trainer.device == "cpu"


def test_each_gpu_holds_one_vllm_worker_share_and_one_training_rank(run):
    assert run["gpus_before"] == pytest.approx(4.0)  # nothing else holds the session's GPUs
    # 2 replicas x 2 workers, each a share above one half: one per GPU, none shared
    assert run["gpus_with_rollout"] == pytest.approx(4.0 - 4 * ROLLOUT_GPU_SHARE)
    ranks = [json.loads(p.read_text()) for p in sorted((run["out"] / "placement").glob("rank-*.json"))]
    assert [r["rank"] for r in ranks] == [0, 1, 2, 3]
    assert sorted(g for r in ranks for g in r["gpu_ids"]) == ["0", "1", "2", "3"]  # a GPU of its own each
    assert {r["device"] for r in ranks} == {"cpu"}


def test_the_run_trains_and_every_replica_holds_the_trainers_weights(run):
    metrics = [json.loads(line) for line in (run["out"] / "metrics.jsonl").read_text().splitlines()]
    assert [m.get("training/policy_version") for m in metrics if "training/policy_version" in m] == [1.0, 2.0]
    assert set(run["versions"].values()) == {2} and len(run["versions"]) == 2
    assert len(run["checksums"]) == 2
    for checksum in run["checksums"]:
        assert checksum["version"] == 2
        assert checksum["weights_sum"] == pytest.approx(run["trainer_sum"], abs=SUM_TOLERANCE, rel=0)
