"""trainer.worker_resources and actor_rollout_ref.rollout.replica_resources: bad amounts are refused when the config
loads, and resources the cluster lacks when the driver joins it, each before any worker starts."""

import pytest
from support import with_dotted

from app.config import ConfigError, load_config
from app.config.placement import check_fits, plan_resources

BASE = {
    "data": {"train_files": "train.parquet", "train_batch_size": 4},
    "actor_rollout_ref": {"model": {"path": "/models/x"}, "actor": {"ppo_mini_batch_size": 4}},
    "algorithm": {"adv_estimator": "grpo"},
    "trainer": {"num_workers": 2},
}  # 2 train workers, 1 replica


def with_(**overrides):
    return with_dotted(BASE, **overrides)


PINNED = {
    "trainer.worker_resources": {"train_node": 1},
    "actor_rollout_ref.rollout.replica_resources": {"rollout_node": 1},
}


def test_resources_default_to_empty_and_reach_the_config_as_numbers():
    cfg = load_config(with_())
    assert cfg.trainer.worker_resources == {} and cfg.actor_rollout_ref.rollout.replica_resources == {}
    cfg = load_config(
        with_(
            **{
                "trainer.worker_resources": {"train_node": 1},
                "actor_rollout_ref.rollout.replica_resources": {"rollout_node": "0.5"},
            }
        )
    )
    assert cfg.trainer.worker_resources == {"train_node": 1.0}
    assert cfg.actor_rollout_ref.rollout.replica_resources == {"rollout_node": 0.5}  # YAML may hand a string


@pytest.mark.parametrize(
    "key, resources, message",
    [
        (
            "trainer.worker_resources",
            {"train_node": "lots"},
            r"trainer\.worker_resources\.train_node: expected a number, got 'lots'",
        ),
        (
            "actor_rollout_ref.rollout.replica_resources",
            {"rollout_node": -1},
            r"actor_rollout_ref\.rollout\.replica_resources\.rollout_node=-1\.0 must be >= 0",
        ),
        (
            "trainer.worker_resources",
            {"train_node": 0.00001},
            r"trainer\.worker_resources\.train_node=1e-05: Ray counts resources in steps of 0\.0001",
        ),
        (
            "trainer.worker_resources",
            {"CPU": 2},
            r"trainer\.worker_resources\.CPU=2\.0: CPU is one of Ray's built-in resources.*trainer\.cpus_per_worker",
        ),
        (
            "trainer.worker_resources",
            ["train_node"],
            r"trainer\.worker_resources: expected a mapping, got \['train_node'\]",
        ),
    ],
)
def test_bad_amounts_are_named_with_key_and_value(key, resources, message):
    with pytest.raises(ConfigError, match=message):
        load_config(with_(**{key: resources}))


def test_colocated_replicas_cannot_be_pinned_elsewhere():
    colocated = {"trainer.placement": "colocated", "trainer.n_gpus_per_node": 2, "trainer.num_workers": None}
    with pytest.raises(
        ConfigError,
        match=r"actor_rollout_ref\.rollout\.replica_resources=\{'rollout_node': 1\.0\} "
        r"places the replicas apart.*trainer\.placement=split",
    ):
        load_config(with_(**colocated, **PINNED))
    # the train workers alone may still be pinned
    assert (
        load_config(with_(**colocated, **{"trainer.worker_resources": {"gpu_node": 1}})).trainer.placement
        == "colocated"
    )


def test_cluster_without_enough_of_a_resource_is_refused_naming_it():
    cfg = load_config(with_(**PINNED))  # 2 train workers, 1 replica
    plan = plan_resources(cfg)
    check_fits(plan, [{"CPU": 8, "train_node": 2, "rollout_node": 1}])  # exactly enough
    with pytest.raises(
        ConfigError,
        match=r"the run needs 3 CPU, 1 rollout_node, 2 train_node .*but the Ray cluster "
        r"has 8 CPU, 1 rollout_node, 1 train_node: train_node is short by 1",
    ):
        check_fits(plan, [{"CPU": 8, "train_node": 1, "rollout_node": 1}])
    with pytest.raises(ConfigError, match=r"rollout_node is short by 1; start the nodes with `ray start --resources"):
        check_fits(plan, [{"CPU": 8, "train_node": 2}])
    # one resource asked by both: the total counts
    shared = plan_resources(
        load_config(
            with_(
                **{"trainer.worker_resources": {"node": 1}, "actor_rollout_ref.rollout.replica_resources": {"node": 1}}
            )
        )
    )
    with pytest.raises(ConfigError, match=r"needs 3 CPU, 3 node .* has 8 CPU, 2 node: node is short by 1"):
        check_fits(shared, [{"CPU": 8, "node": 2}])


def test_enough_in_total_but_on_no_single_node_is_refused():
    cfg = load_config(with_(**PINNED))
    # the two train workers fit only where train_node is; one node has it, but CPU for one worker only
    nodes = [{"CPU": 1, "train_node": 2}, {"CPU": 4, "rollout_node": 1}]
    with pytest.raises(ConfigError, match=r"train worker 2 of 2 .* fits on no node of the Ray cluster \(2 nodes: "):
        check_fits(plan_resources(cfg), nodes)


def test_ensure_ray_refuses_a_local_cluster_for_custom_resources(monkeypatch):
    import ray

    from app.trainer.launch import ensure_ray

    def no_init(*args, **kwargs):
        raise AssertionError("ray.init must not run: the refusal comes first")

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", no_init)
    with pytest.raises(
        ConfigError,
        match=r"local cluster started here would not have.*trainer\.ray_address or "
        r"RAY_ADDRESS",
    ):
        ensure_ray(load_config(with_(**PINNED)))


def test_ensure_ray_checks_the_cluster_it_is_connected_to(monkeypatch):
    import ray

    from app.trainer.launch import ensure_ray

    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    monkeypatch.setattr(
        ray,
        "nodes",
        lambda: [
            {"Alive": True, "Resources": {"CPU": 8.0, "train_node": 2.0}},
            {"Alive": False, "Resources": {"CPU": 8.0, "rollout_node": 1.0}},
        ],
    )
    with pytest.raises(ConfigError, match=r"rollout_node is short by 1"):  # the dead node does not count
        ensure_ray(load_config(with_(**PINNED)))
    ensure_ray(load_config(with_(**{"trainer.worker_resources": {"train_node": 1}})))  # enough: no error
