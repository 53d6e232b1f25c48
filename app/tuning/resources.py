"""How many trials fit on the cluster at once.

A trial's Tune actor only waits on its training job, so it holds a token CPU share (Tune refuses an empty
request); what a trial really takes is its Ray Train workers plus its rollout replicas. Tune cannot see those (they
are requested later, from inside the trial), so the sweep caps `max_concurrent_trials` at what the cluster can hold
side by side.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from app.config.errors import ConfigError
from app.config.schema import TrainerRunConfig

TRIAL_ACTOR_CPUS = 0.01  # the trial's own Tune actor, which only waits on its job


@dataclass(frozen=True)
class TrialNeeds:
    cpus: float
    gpus: float
    explain: str  # the arithmetic, for error messages
    custom: dict[str, float] = field(default_factory=dict)  # Ray custom resources (trainer.worker_resources, ...)


def trial_needs(cfg: TrainerRunConfig) -> TrialNeeds:
    """What one trial's run holds (app.config.placement's plan): its train workers and rollout replicas, in CPUs,
    GPUs and custom resources."""
    from app.config.placement import custom_requests, plan_resources

    t, r = cfg.trainer, cfg.actor_rollout_ref.rollout
    total = plan_resources(cfg).total()
    cpus, gpus = total.pop("CPU", 0.0), total.pop("GPU", 0.0)
    explain = (
        f"trainer.num_workers={t.num_workers} × trainer.cpus_per_worker={t.cpus_per_worker} + "
        f"actor_rollout_ref.rollout.replicas={r.replicas} × rollout.cpus_per_replica={r.cpus_per_replica} "
        f"= {cpus:g} CPUs" + (f" and {gpus:g} GPUs (trainer.placement={t.placement})" if gpus else "")
    )
    for key, resources, count in custom_requests(cfg):
        for name, amount in resources.items():
            explain += f" + {key}.{name}={amount:g} × {count}"
    return TrialNeeds(cpus=cpus, gpus=gpus, explain=explain, custom=total)


def max_concurrent_trials(cluster: dict[str, float], needs: TrialNeeds, cap: int | None = None) -> int:
    """Trials that fit side by side in `cluster` (ray.cluster_resources()), at most `cap`; ConfigError if none fits."""
    have_cpus, have_gpus = float(cluster.get("CPU", 0.0)), float(cluster.get("GPU", 0.0))
    fits = math.floor(have_cpus / (needs.cpus + TRIAL_ACTOR_CPUS) + 1e-9)
    if needs.gpus > 0:
        fits = min(fits, math.floor(have_gpus / needs.gpus + 1e-9))
    for name, amount in needs.custom.items():
        if amount > 0:
            fits = min(fits, math.floor(float(cluster.get(name, 0.0)) / amount + 1e-9))
    if fits < 1:
        custom = "".join(f", {float(cluster.get(name, 0.0)):g} {name!r}" for name in needs.custom)
        raise ConfigError(
            f"one sweep trial needs {needs.explain}, but the Ray cluster has {have_cpus:g} CPUs and "
            f"{have_gpus:g} GPUs{custom}; lower those keys in the base config or use a bigger cluster"
        )
    return int(min(fits, cap) if cap else fits)
