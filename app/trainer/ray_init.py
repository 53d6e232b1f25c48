"""ray.init's arguments for a run: what the run needs, with the user's `ray_kwargs.ray_init` (verl's key) over them.

verl passes `ray_kwargs.ray_init` to ray.init as it is. Here the run also sets arguments of its own (the CPUs and
simulated GPUs its placement holds, the dashboard, the runtime_env its processes need), so the two are merged: the
user's value wins, the runtime_env's env_vars are merged variable by variable (the user's win), and a `num_cpus` too
small for what the run holds is refused before the cluster starts (app.preflight.ray_init checks the names earlier).
Joining a running cluster, the arguments that only shape a cluster being started are left out with a warning (Ray
refuses them there); the others still apply.
"""

from __future__ import annotations

import logging
import math
import os
from typing import Any, Mapping, Optional

from app.config.errors import ConfigError
from app.preflight.ray_init import KEY

# ray.init arguments that size or set up a cluster the call starts: Ray refuses the first ones when it joins a running
# cluster and ignores the dashboard's and the temp folder's there
STARTING_ONLY = (
    "num_cpus",
    "num_gpus",
    "resources",
    "labels",
    "object_store_memory",
    "_system_config",
    "include_dashboard",
    "dashboard_host",
    "dashboard_port",
    "_temp_dir",
)

log = logging.getLogger(__name__)


def local_cluster_size(cfg: Any, plan: Any) -> dict[str, int]:
    """`num_cpus` and, for a GPU layout computed on the CPU, `num_gpus` of a cluster the run starts on this machine
    (`cfg` a TrainerRunConfig, `plan` its app.config.placement plan): a logical CPU for everything the placement holds
    and two more, at least the machine's count (the replicas and the train workers take turns on the cores, so each
    gets its own reservation), and the GPUs the layout places by; `ray_kwargs.ray_init`'s num_cpus / num_gpus where
    given. Without `num_gpus` Ray counts the machine's GPUs."""
    size = {"num_cpus": max(math.ceil(plan.total().get("CPU", 0.0)) + 2, os.cpu_count() or 1)}
    if cfg.trainer.device == "cpu" and cfg.trainer.n_gpus_per_node > 0:
        size["num_gpus"] = cfg.trainer.n_gpus_per_node * cfg.trainer.nnodes
    given = cfg.ray_kwargs.ray_init
    return size | {name: given[name] for name in ("num_cpus", "num_gpus") if given.get(name) is not None}


def merged_runtime_env(ours: Mapping[str, Any], user: Optional[Mapping[str, Any]]) -> dict[str, Any]:
    """The run's runtime_env with the user's: its env_vars merged (the user's win), its other fields added."""
    user = dict(user or {})
    env_vars = {**ours.get("env_vars", {}), **dict(user.pop("env_vars", None) or {})}
    return {**ours, **user, "env_vars": env_vars}


def starting_kwargs(ours: Mapping[str, Any], user: Mapping[str, Any], cpus_needed: int) -> dict[str, Any]:
    """ray.init's arguments for a cluster the run starts: `ours` with the user's over them (runtime_env and
    _system_config merged). ConfigError where the user's num_cpus is below `cpus_needed`, what the run holds."""
    kwargs = dict(ours)
    for name, value in user.items():
        if name == "runtime_env":
            kwargs[name] = merged_runtime_env(ours.get(name, {}), value)
        elif name == "_system_config":
            kwargs[name] = {**ours.get(name, {}), **value}
        else:
            kwargs[name] = value
    if user.get("include_dashboard") is False:
        kwargs["runtime_env"] = without_dashboard(kwargs.get("runtime_env", {}))
    if "num_cpus" in user and user["num_cpus"] < cpus_needed:
        raise ConfigError(
            f"{KEY}.num_cpus={user['num_cpus']}: the run holds {cpus_needed} CPUs on the cluster it starts (its train "
            "workers and rollout replicas; `python -m app.train --dry-run` shows the plan); give at least that, or "
            "drop the key"
        )
    return kwargs


def without_dashboard(runtime_env: Mapping[str, Any]) -> dict[str, Any]:
    """`runtime_env` for a cluster started without the dashboard: each worker process first quiets the loggers that
    then log a failure every second (app.logs.DASHBOARDLESS_LOGGERS), unless the user's own setup hook takes that
    place, which is then said."""
    from app.logs import DASHBOARDLESS_WORKER_HOOK

    if runtime_env.get("worker_process_setup_hook") not in (None, DASHBOARDLESS_WORKER_HOOK):
        log.warning(
            "%s.include_dashboard=false: Ray Train's placement-group cleaner asks the dashboard's state API whether "
            "the run's controller lives and, without it, logs 'Failed to query Ray Train Controller actor state' every "
            "second; the runtime_env's own worker_process_setup_hook runs instead of the one that quiets it",
            KEY,
        )
        return dict(runtime_env)
    return {**runtime_env, "worker_process_setup_hook": DASHBOARDLESS_WORKER_HOOK}


def joining_kwargs(ours: Mapping[str, Any], user: Mapping[str, Any], address: str) -> dict[str, Any]:
    """ray.init's arguments for joining the cluster at `address`: `ours` with the user's over them, without those that
    only shape a cluster being started (logged as left out)."""
    left_out = sorted(set(user) & set(STARTING_ONLY))
    if left_out:
        log.warning(
            "%s: %s set up a cluster the run starts; it joins %s, whose own settings hold, so they are left out",
            KEY,
            ", ".join(left_out),
            address,
        )
    kwargs = dict(ours)
    for name, value in user.items():
        if name in STARTING_ONLY:
            continue
        kwargs[name] = merged_runtime_env(ours.get(name, {}), value) if name == "runtime_env" else value
    return kwargs
