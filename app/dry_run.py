"""`python -m app.train ... --dry-run`: what the run would place on the cluster, and whether it fits, in seconds.

The config and the data are checked as for a real run; nothing is trained. The plan is checked against the cluster
the run would join (trainer.ray_address / RAY_ADDRESS), else against one described by flags
(`--nodes N --gpus-per-node G --cpus-per-node C`), else against this machine as a local run would start it.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from typing import Optional, Sequence

from app.config.placement import (
    ProcessKind,
    ResourcePlan,
    check_fits,
    described_cluster,
    format_resources,
    plan_resources,
)
from app.config.ranks import shards_over_all_ranks
from app.config.schema import TrainerRunConfig

FLAGS = ("--dry-run", "--nodes", "--gpus-per-node", "--cpus-per-node")


@dataclass(frozen=True)
class DryRun:
    nodes: Optional[int] = None
    gpus_per_node: Optional[int] = None
    cpus_per_node: Optional[float] = None

    @property
    def describes_cluster(self) -> bool:
        return any(v is not None for v in (self.nodes, self.gpus_per_node, self.cpus_per_node))


def split_argv(argv: Sequence[str]) -> tuple[Optional[DryRun], list[str]]:
    """(the dry-run request or None, the arguments left for Hydra). The cluster flags mean nothing without
    --dry-run and are refused then, by argparse's own message."""
    parser = argparse.ArgumentParser(prog="python -m app.train", add_help=False, allow_abbrev=False)
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--nodes", type=int)
    parser.add_argument("--gpus-per-node", type=int)
    parser.add_argument("--cpus-per-node", type=float)
    known, rest = parser.parse_known_args(list(argv))
    request = DryRun(known.nodes, known.gpus_per_node, known.cpus_per_node)
    if not known.dry_run:
        if request.describes_cluster:
            parser.error("--nodes / --gpus-per-node / --cpus-per-node describe a cluster for --dry-run; add --dry-run")
        return None, rest
    for name, value in (
        ("--nodes", request.nodes),
        ("--gpus-per-node", request.gpus_per_node),
        ("--cpus-per-node", request.cpus_per_node),
    ):
        if value is not None and value < (1 if name == "--nodes" else 0):
            parser.error(f"{name}={value} must be {'>= 1' if name == '--nodes' else '>= 0'}")
    return request, rest


def cluster_for(cfg: TrainerRunConfig, plan: ResourcePlan, request: DryRun) -> tuple[list[dict[str, float]], str]:
    """The nodes to check the plan against, and how to name them."""
    if request.describes_cluster:
        nodes = request.nodes or 1
        gpus = request.gpus_per_node if request.gpus_per_node is not None else cfg.trainer.n_gpus_per_node
        if request.cpus_per_node is not None:
            return described_cluster(nodes, request.cpus_per_node, gpus), "the described cluster"
        # GPU nodes have CPUs to spare: unless told, every node could hold every CPU the run asks for
        cpus = plan.total().get("CPU", 0.0)
        return described_cluster(nodes, cpus, gpus), "the described cluster (CPUs not given: assumed enough)"
    address = cfg.trainer.ray_address or os.environ.get("RAY_ADDRESS")
    if address:
        import ray

        from app.trainer.launch import cluster_nodes

        ray.init(address=address, log_to_driver=False)
        try:
            return cluster_nodes(), f"the Ray cluster at {address}"
        finally:
            ray.shutdown()
    # as app.trainer.launch.ensure_ray would start it; without a GPU count given, Ray counts this machine's
    from app.trainer.ray_init import local_cluster_size

    size = local_cluster_size(cfg, plan)
    cpus = float(size["num_cpus"])
    gpus = size.get("num_gpus", 0 if cfg.trainer.device == "cpu" else _local_gpus())
    return described_cluster(1, cpus, gpus), "a local Ray cluster on this machine"


def plan_text(cfg: TrainerRunConfig, nodes: Sequence[dict[str, float]], where: str) -> str:
    """The plan as printed: one line per process kind, the totals, and the cluster it was checked against."""
    plan = plan_resources(cfg)
    t, r = cfg.trainer, cfg.actor_rollout_ref.rollout
    lines = [
        f"plan: trainer.device={t.device}, trainer.placement={t.placement}, "
        f"{t.num_workers} training rank{'s' if t.num_workers > 1 else ''}, rollout by {r.name}"
    ]
    for kind in plan.kinds:
        lines.append(_kind_line(kind, plan))
    if t.num_workers > 1:
        lines.append(_sharding_line(cfg))
    lines.append(f"  in all: {format_resources(plan.total())}")
    lines.append(
        f"checked against {where}: {len(nodes)} node{'s' if len(nodes) != 1 else ''}, "
        f"{format_resources(_node_totals(nodes))}"
    )
    return "\n".join(lines)


def run_dry(cfg: TrainerRunConfig, request: DryRun) -> str:
    """The printed plan; ConfigError (from `check_fits`) when the cluster cannot hold it."""
    plan = plan_resources(cfg)
    nodes, where = cluster_for(cfg, plan, request)
    text = plan_text(cfg, nodes, where)
    check_fits(plan, nodes, where)
    return text + "\nfits: every process has a place; nothing was started (--dry-run)"


def _kind_line(kind: ProcessKind, plan: ResourcePlan) -> str:
    each = " + ".join("{" + format_resources(b) + "}" for b in kind.bundles)
    extra = ""
    if kind is plan.rollout:
        workers = plan.engine_tensor_parallel_size
        extra = f"; vLLM worker{'s' if workers > 1 else ''}: {workers}"
        if len(kind.bundles) > 1 and plan.engine_tensor_parallel_size > 1:
            extra += " (Ray actors in bundles 1..)"
    memory = f"; GPU memory: {kind.gpu_memory}" if kind.gpu_memory else ""
    return f"  {kind.name} x{kind.count}: each {each}{extra}{memory}  [{kind.keys}]"


def _sharding_line(cfg: TrainerRunConfig) -> str:
    """How the trained models are spread over the training ranks (fsdp_size, reshard_after_forward, ZeRO stage)."""
    from algos.catalog import estimator_traits

    arr, critic = cfg.actor_rollout_ref, cfg.critic
    roles = [("actor", arr.actor.strategy, arr.actor.fsdp_config, arr.actor.deepspeed_config)]
    if estimator_traits(cfg.algorithm.adv_estimator).needs_critic:
        roles.append(("critic", critic.strategy, critic.model.fsdp_config, critic.deepspeed_config))
    ranks = cfg.trainer.num_workers
    parts = []
    for name, strategy, fsdp, deepspeed in roles:
        if strategy == "deepspeed":
            parts.append(f"{name}: DeepSpeed ZeRO-{deepspeed.zero_stage} over all {ranks} ranks")
            continue
        size = fsdp.fsdp_size
        layout = (
            f"one copy sharded over all {ranks} ranks"
            if shards_over_all_ranks(size, ranks)
            else f"{ranks // size} groups of {size} ranks, each shards a copy (hybrid, fsdp_size={size})"
        )
        kept = "" if fsdp.reshard_after_forward else ", layers kept gathered from forward to backward"
        parts.append(f"{name}: FSDP2, {layout}{kept}")
    return "  model sharding: " + "; ".join(parts)


def _node_totals(nodes: Sequence[dict[str, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for node in nodes:
        for name, amount in node.items():
            if name in ("CPU", "GPU") or not name.startswith(("node:", "memory", "object_store", "accelerator_type")):
                out[name] = out.get(name, 0.0) + float(amount)
    return out


def _local_gpus() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:  # a torch without CUDA support says 0 itself; anything else: no usable GPU here
        return 0
