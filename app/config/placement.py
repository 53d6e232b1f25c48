"""Where the train workers and the rollout replicas run: Ray custom resources per worker and per replica.

Checked twice, each time before any worker starts: the amounts when the config is loaded (`check_placement`), and
the cluster's totals when the driver has joined it (`check_cluster_resources`, from `app.trainer.launch.ensure_ray`),
since a request no node can meet would otherwise leave the run pending for ever.
"""
from __future__ import annotations

from typing import Mapping

from app.config.loader import ConfigError
from app.config.schema import TrainerRunConfig

WORKER_KEY = "trainer.worker_resources"
REPLICA_KEY = "actor_rollout_ref.rollout.replica_resources"
# Ray's built-in resources have keys of their own here; Ray also refuses them inside a custom-resource mapping
_BUILT_IN = {"CPU": "trainer.cpus_per_worker / actor_rollout_ref.rollout.cpus_per_replica",
             "GPU": "trainer.n_gpus_per_node (the replicas take rollout.tensor_model_parallel_size GPUs)",
             "memory": None, "object_store_memory": None}


def custom_requests(cfg: TrainerRunConfig) -> list[tuple[str, Mapping[str, float], int]]:
    """(key, resources per process, processes) for the train workers and the rollout replicas."""
    return [(WORKER_KEY, cfg.trainer.worker_resources, cfg.trainer.num_workers),
            (REPLICA_KEY, cfg.actor_rollout_ref.rollout.replica_resources, cfg.actor_rollout_ref.rollout.replicas)]


def check_placement(cfg: TrainerRunConfig) -> None:
    """Each amount one Ray accepts for a custom resource: not a built-in one, >= 0, not below Ray's 0.0001 step."""
    for key, resources, _ in custom_requests(cfg):
        for name, amount in resources.items():
            if name in _BUILT_IN:
                instead = _BUILT_IN[name]
                raise ConfigError(f"{key}.{name}={amount}: {name} is one of Ray's built-in resources, not a custom "
                                  "one" + (f"; set it with {instead}" if instead else ""))
            if amount < 0:
                raise ConfigError(f"{key}.{name}={amount} must be >= 0 (an amount of the Ray custom resource {name!r})")
            if 0 < amount < 1e-4:
                raise ConfigError(f"{key}.{name}={amount}: Ray counts resources in steps of 0.0001, so this asks "
                                  "for nothing")
    if cfg.trainer.placement == "colocated" and cfg.actor_rollout_ref.rollout.replica_resources:
        raise ConfigError(f"{REPLICA_KEY}={dict(cfg.actor_rollout_ref.rollout.replica_resources)} places the replicas "
                          "apart from the train workers, which trainer.placement=colocated puts on the same GPUs; "
                          "use trainer.placement=split or leave it empty")


def wants_custom_resources(cfg: TrainerRunConfig) -> bool:
    return any(resources for _, resources, _ in custom_requests(cfg))


def check_cluster_resources(cfg: TrainerRunConfig, cluster: Mapping[str, float]) -> None:
    """Refuse a run whose custom resources the cluster (`ray.cluster_resources()`) does not have in total."""
    asked: dict[str, list[str]] = {}
    totals: dict[str, float] = {}
    for key, resources, count in custom_requests(cfg):
        for name, amount in resources.items():
            totals[name] = totals.get(name, 0.0) + amount * count
            asked.setdefault(name, []).append(f"{key}.{name}={amount:g} x {count}")
    for name, total in totals.items():
        have = float(cluster.get(name, 0.0))
        if total > have + 1e-9:
            raise ConfigError(f"{' + '.join(asked[name])} asks for {total:g} of the Ray custom resource {name!r}, but "
                              f"the cluster has {have:g}; start the nodes with `ray start --resources "
                              f"'{{\"{name}\": N}}'` or lower the amount")
