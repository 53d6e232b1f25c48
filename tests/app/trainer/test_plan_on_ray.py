"""The placement plan against Ray's own scheduler, on the suite's cluster of 4 declared GPUs: each process kind is
reserved as the run reserves it (the replicas' bundles first, then the train workers'), and a probe actor in each
bundle reports the GPU Ray gave it. No vLLM, no training: seconds."""

from __future__ import annotations

import pytest
from support import with_dotted

from app.config import load_config
from app.config.placement import check_fits, plan_resources

pytestmark = pytest.mark.slow
BASE = {
    "data": {"train_files": "train.parquet", "train_batch_size": 8},
    "actor_rollout_ref": {"model": {"path": "/models/x"}, "actor": {"ppo_mini_batch_size": 8}},
    "algorithm": {"adv_estimator": "grpo"},
    "trainer": {"device": "cpu"},
}


def _reserve(plan):
    """Placement groups as the run asks for them: one per replica (its bundles packed on one node), then one per
    train worker (Ray Train's bundles); each bundle's GPU ids as a probe actor in it sees them."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    @ray.remote(num_cpus=0)
    class Probe:
        def gpu_ids(self):
            return ray.get_runtime_context().get_accelerator_ids()["GPU"]

    groups, seen = [], {"rollout": [], "train": []}
    try:
        for kind, name in ((plan.rollout, "rollout"), (plan.train, "train")):
            for _ in range(kind.count):
                group = placement_group([dict(b) for b in kind.bundles], strategy="STRICT_PACK")
                groups.append(group)
                if not group.wait(timeout_seconds=30):
                    return None
                for index, bundle in enumerate(kind.bundles):
                    if "GPU" in bundle:
                        probe = Probe.options(
                            num_gpus=bundle["GPU"],
                            scheduling_strategy=PlacementGroupSchedulingStrategy(
                                group, placement_group_bundle_index=index
                            ),
                        ).remote()
                        seen[name] += ray.get(probe.gpu_ids.remote(), timeout=60)
                        ray.kill(probe)
        return seen, ray.available_resources().get("GPU", 0.0)
    finally:
        for group in groups:
            remove_placement_group(group)


def test_colocated_gives_every_gpu_one_vllm_worker_and_one_rank(ray_cluster):
    cfg = load_config(
        with_dotted(BASE, **{"trainer.n_gpus_per_node": 4, "actor_rollout_ref.rollout.tensor_model_parallel_size": 2})
    )
    seen, free = _reserve(plan_resources(cfg))
    assert sorted(seen["rollout"]) == ["0", "1", "2", "3"] and sorted(seen["train"]) == ["0", "1", "2", "3"]
    assert free == pytest.approx(0.0)  # 4 x 0.51 + 4 x 0.49: all of the 4 GPUs


def test_equal_halves_would_stack_two_ranks_on_one_gpu(ray_cluster):
    """Why the shares are uneven: with 0.5 each, Ray's first fit puts two vLLM workers on GPU 0."""
    import dataclasses

    cfg = load_config(
        with_dotted(BASE, **{"trainer.n_gpus_per_node": 4, "actor_rollout_ref.rollout.tensor_model_parallel_size": 2})
    )
    plan = plan_resources(cfg)
    halves = dataclasses.replace(
        plan,
        rollout=dataclasses.replace(plan.rollout, bundles=({"CPU": 1.0}, {"GPU": 0.5}, {"GPU": 0.5})),
        train=dataclasses.replace(plan.train, count=0),
    )
    seen, _ = _reserve(halves)
    assert len(set(seen["rollout"])) < 4  # some GPU took two workers


def test_split_places_with_the_extra_gpus_and_is_refused_without_them(ray_cluster):
    from app.config import ConfigError
    from app.trainer.launch import cluster_nodes

    fits = load_config(
        with_dotted(
            BASE,
            **{
                "trainer.n_gpus_per_node": 2,
                "trainer.placement": "split",
                "actor_rollout_ref.rollout.tensor_model_parallel_size": 2,
                "data.train_batch_size": 4,
                "actor_rollout_ref.actor.ppo_mini_batch_size": 4,
            },
        )
    )
    plan = plan_resources(fits)
    check_fits(plan, cluster_nodes())  # 2 ranks + one TP-2 replica = the cluster's 4 GPUs
    seen, free = _reserve(plan)
    assert sorted(seen["train"] + seen["rollout"]) == ["0", "1", "2", "3"] and free == pytest.approx(0.0)
    too_big = load_config(
        with_dotted(
            BASE,
            **{
                "trainer.n_gpus_per_node": 4,
                "trainer.placement": "split",
                "actor_rollout_ref.rollout.tensor_model_parallel_size": 2,
            },
        )
    )
    with pytest.raises(ConfigError, match=r"needs .*6 GPU .*has .*4 GPU: GPU is short by 2"):
        check_fits(plan_resources(too_big), cluster_nodes())
