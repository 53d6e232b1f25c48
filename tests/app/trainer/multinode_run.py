"""A two-step GRPO run on a Ray cluster of three simulated nodes (`ray.cluster_utils.Cluster`): a head, node A
declaring {"train_node": 1} and node B declaring {"rollout_node": 1}; the train worker is pinned to A, the rollout
replica to B. Run in its own interpreter by test_multinode.py (the suite's session cluster cannot be replaced in
process); prints one JSON line with what the test checks.

usage: RAY_TMPDIR=DIR python multinode_run.py MODEL_DIR DATA_DIR OUT_DIR HTTP_PORT
(RAY_TMPDIR: a folder of the caller's, so the cluster's address file, which ray.init() without an address follows,
does not replace that of the default /tmp/ray that other Ray users on the machine read)
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def overrides(model: str, data: Path, out: Path, http_port: int) -> list[str]:
    return [
        f"actor_rollout_ref.model.path={model}",
        "actor_rollout_ref.model.lora_rank=0",  # full weights: all compared
        f"data.train_files={data / 'train.parquet'}",
        f"data.val_files={data / 'test.parquet'}",
        "data.train_batch_size=2",
        "data.max_prompt_length=256",
        "data.max_response_length=8",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.actor.optim.lr=1e-3",  # big steps: the updated weights differ clearly from the initial ones
        # fp32 on both sides: the trainer's master weights go to vLLM uncast, so both sums are of the same numbers
        "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp32",
        "actor_rollout_ref.rollout.dtype=float32",
        "actor_rollout_ref.rollout.max_num_seqs=16",
        "actor_rollout_ref.rollout.cpu_kv_cache_gib=0.25",
        f"actor_rollout_ref.rollout.http_port={http_port}",
        # the custom resources, as a user gives them (Hydra: `+` adds a key to the empty mapping)
        "+actor_rollout_ref.rollout.replica_resources.rollout_node=1",
        "+trainer.worker_resources.train_node=1",
        "trainer.num_workers=1",
        "trainer.cpus_per_worker=1",
        "trainer.total_training_steps=2",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
        "trainer.logger=[jsonl]",
        "trainer.experiment_name=multinode",
        f"trainer.default_local_dir={out}",
        "reward_model.num_workers=1",
    ]


def main(model: str, data: str, out: str, http_port: str) -> None:
    import ray
    from ray.cluster_utils import Cluster
    from safetensors.torch import load_file

    from app.config import compose_run_config
    from app.trainer.launch import ensure_ray, rollout_app_name, train
    from serve import deploy_rollout, get_rollout_client
    from serve.payload import weights_sum

    cfg = compose_run_config("grpo_trainer", overrides(model, Path(data), Path(out), int(http_port)))
    # the head holds Serve's and Train's controllers; A and B only what is pinned to them
    started = time.monotonic()
    # no dashboard: nothing here reads it, and on a small machine its processes slow the run
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
    node_a = cluster.add_node(num_cpus=2, resources={"train_node": 1})
    node_b = cluster.add_node(num_cpus=2, resources={"rollout_node": 1})
    cluster.wait_for_nodes()
    try:
        ray.init(address=cluster.address, log_to_driver=False)
        ensure_ray(cfg)  # connected: checks the cluster has the custom resources
        app = rollout_app_name(cfg)
        # deployed here rather than inside train() so that the replica outlives the run and can be asked afterwards
        deploy_rollout(
            cfg.actor_rollout_ref.rollout,
            cfg.actor_rollout_ref.model.path,
            app,
            trust_remote_code=False,
            seed=cfg.trainer.seed,
            route_prefix=None,
        )
        client = get_rollout_client(app, cfg.actor_rollout_ref.rollout)
        before = client.weights_checksums()
        deployed = time.monotonic()
        train(cfg, rollout_app=app)
        trained = time.monotonic()
        after = client.weights_checksums()
        exported = load_file(str(Path(out) / "hf_model" / "model.safetensors"))
        initial = load_file(str(Path(model) / "model.safetensors"))
        print(
            json.dumps(
                {
                    "node_a": node_a.node_id,
                    "node_b": node_b.node_id,
                    "before": before,
                    "after": after,
                    "versions": client.replica_versions(),
                    # the trainer's weights after its last update (the final export is of the same fp32 tensors it sent)
                    "trainer_sum": weights_sum(exported.values()),
                    "initial_sum": weights_sum(t for name, t in initial.items() if name != "lm_head.weight"),
                    "metric_versions": [
                        json.loads(line).get("training/policy_version")
                        for line in (Path(out) / "metrics.jsonl").read_text().splitlines()
                    ],
                    # where the test's time goes: cluster start and the vLLM replica's start, then the run
                    "seconds": {
                        "cluster_and_deploy": round(deployed - started, 1),
                        "train": round(trained - deployed, 1),
                    },
                }
            )
        )
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main(*sys.argv[1:])
