"""What a run holds on the Ray cluster, worked out from the config alone, and whether a cluster can hold it.

Two kinds of process hold resources: the Ray Train workers (one rank each) and the Serve rollout replicas (each with its
tensor-parallel vLLM workers); Ray Train's controller, Serve's controller and the policy store hold none.

Colocated GPUs (verl's hybrid engine). Every training GPU hosts one train rank and one vLLM worker. Ray hands out a
fractional GPU request by first fit over the GPUs, so the shares are uneven on purpose: the rollout, placed first,
asks for ROLLOUT_GPU_SHARE > 0.5 per vLLM worker, so no two workers share a GPU; each train rank then asks for the
rest, TRAIN_GPU_SHARE, which fits once on each of those GPUs and never twice on one. Equal halves would let Ray pack
two ranks on one GPU and leave another to two vLLM workers. What bounds memory is vLLM's gpu_memory_utilization, not
these shares: they only decide who lands where.

Checked twice before any worker starts: the custom-resource amounts when the config is loaded (`check_placement`),
and the whole plan against the cluster's nodes when the driver has joined it, or against a described cluster for
`--dry-run` (`check_fits`), since a request no node can meet would otherwise leave the run pending for ever.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

from app.config.errors import ConfigError
from app.config.schema import TrainerRunConfig

WORKER_KEY = "trainer.worker_resources"
REPLICA_KEY = "actor_rollout_ref.rollout.replica_resources"
ROLLOUT_GPU_SHARE = 0.51
TRAIN_GPU_SHARE = 1.0 - ROLLOUT_GPU_SHARE
_EPS = 1e-9
# Ray's built-in resources have keys of their own here; Ray also refuses them inside a custom-resource mapping
_BUILT_IN = {
    "CPU": "trainer.cpus_per_worker / actor_rollout_ref.rollout.cpus_per_replica",
    "GPU": "trainer.n_gpus_per_node (the replicas take rollout.tensor_model_parallel_size GPUs)",
    "memory": None,
    "object_store_memory": None,
}


@dataclass(frozen=True)
class ProcessKind:
    """`count` processes of one kind, each holding `bundles`: one for the process itself, then (a replica with
    tensor-parallel vLLM workers on GPUs) one per worker, all on one node."""

    name: str
    count: int
    bundles: tuple[dict[str, float], ...]
    keys: str  # the config keys behind the count and the size, for messages
    gpu_memory: str  # the GPU memory budget each gets, in words; "" on CPU

    def total(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for bundle in self.bundles:
            for name, amount in bundle.items():
                out[name] = out.get(name, 0.0) + amount * self.count
        return out


@dataclass(frozen=True)
class ResourcePlan:
    device: str  # trainer.device: where the trainer (and vLLM) compute
    placement: str  # trainer.placement
    rollout: ProcessKind  # placed first (see the module docstring)
    train: ProcessKind
    engine_tensor_parallel_size: int  # vLLM workers per replica: rollout.tensor_model_parallel_size on CUDA, else 1

    @property
    def kinds(self) -> tuple[ProcessKind, ProcessKind]:
        return self.rollout, self.train

    def total(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for kind in self.kinds:
            for name, amount in kind.total().items():
                out[name] = out.get(name, 0.0) + amount
        return out

    @property
    def rollout_starts_first(self) -> bool:
        """Colocated GPUs: the replicas must hold their GPU shares before a train rank asks for its own (above), so
        the rollout is up before the trainer starts; otherwise the two start side by side."""
        return self.placement == "colocated" and "GPU" in self.rollout.total()

    def replica_engine_env(self) -> dict[str, str]:
        """Environment of a replica's vLLM: where its tensor-parallel workers go (bundles 1..TP of the replica's
        placement group, each a GPU share) when they run as Ray actors, on CUDA with TP > 1; else nothing."""
        if self.engine_tensor_parallel_size == 1:
            return {}
        return {
            "VLLM_RAY_PER_WORKER_GPUS": f"{self.rollout.bundles[1]['GPU']:g}",
            "VLLM_RAY_BUNDLE_INDICES": ",".join(str(i) for i in range(1, len(self.rollout.bundles))),
        }


def plan_resources(cfg: TrainerRunConfig) -> ResourcePlan:
    """The plan of a validated config (trainer.device, placement and rollout.replicas filled in)."""
    t, r = cfg.trainer, cfg.actor_rollout_ref.rollout
    tp, util = r.tensor_model_parallel_size, r.gpu_memory_utilization
    on_gpus = t.n_gpus_per_node > 0
    colocated = t.placement == "colocated"
    train_gpu = (TRAIN_GPU_SHARE if colocated else 1.0) if on_gpus else 0.0
    rollout_gpu = (ROLLOUT_GPU_SHARE if colocated else 1.0) if on_gpus else 0.0
    train_bundle = {"CPU": t.cpus_per_worker, **({"GPU": train_gpu} if train_gpu else {}), **t.worker_resources}
    own = {"CPU": r.cpus_per_replica, **r.replica_resources}
    if not on_gpus:
        replica_bundles: tuple[dict[str, float], ...] = (own,)
    elif tp == 1:  # vLLM's one worker runs in the replica's process, which then holds the GPU
        replica_bundles = ({**own, "GPU": rollout_gpu},)
    else:  # the replica drives TP workers that vLLM starts as Ray actors in the replica's placement group
        replica_bundles = (own,) + tuple({"GPU": rollout_gpu} for _ in range(tp))
    if not on_gpus:
        train_memory = rollout_memory = ""
    elif colocated:
        rollout_memory = f"{util:g} of each of its GPUs while awake, ~0 asleep (during the update)"
        train_memory = (
            f"the rest of its GPU while vLLM is awake ({1 - util:g}), all of it while vLLM sleeps"
            if r.free_cache_engine
            else f"the rest of its GPU ({1 - util:g}): vLLM never sleeps (rollout.free_cache_engine=false)"
        )
    else:
        rollout_memory, train_memory = f"{util:g} of each of its GPUs", "its whole GPU"
    ranks = (
        f"trainer.n_gpus_per_node={t.n_gpus_per_node} x trainer.nnodes={t.nnodes}"
        if on_gpus
        else f"trainer.num_workers={t.num_workers}"
    )
    train = ProcessKind(
        "train worker", t.num_workers, (train_bundle,), f"{ranks}, trainer.cpus_per_worker", train_memory
    )
    replica_keys = (
        f"actor_rollout_ref.rollout.replicas={r.replicas}"
        + (" (the training GPUs / tensor_model_parallel_size)" if colocated and on_gpus else "")
        + f", tensor_model_parallel_size={tp}, cpus_per_replica"
    )
    rollout = ProcessKind("rollout replica", r.replicas, replica_bundles, replica_keys, rollout_memory)
    engine_tp = tp if t.device == "cuda" and r.name == "vllm" else 1
    return ResourcePlan(t.device, t.placement, rollout, train, engine_tp)


# ---------------------------------------------------------------- against a cluster
def check_fits(plan: ResourcePlan, nodes: Sequence[Mapping[str, float]], where: str = "the Ray cluster") -> None:
    """Refuse a plan `nodes` (each node's total resources, e.g. from `ray.nodes()`) cannot hold, naming the keys, what
    is asked and what the cluster has. Simulates Ray's first-fit placement: the replicas (their bundles packed on one
    node, each GPU bundle on a GPU of its own), then the train workers, each GPU share on one GPU."""
    asked, have = plan.total(), _sum(nodes)
    for name in sorted(asked, key=lambda n: (n != "GPU", n != "CPU", n)):  # the scarce one first
        if asked[name] > have.get(name, 0.0) + _EPS:
            short = asked[name] - have.get(name, 0.0)
            raise ConfigError(
                f"the run needs {format_resources(asked)} ({describe_kinds(plan)}), but {where} has "
                f"{format_resources(have, names=asked)}: {name} is short by {short:g}; {_advice(name)}"
            )
    free = [_NodeLeft.of(node) for node in nodes]
    for kind in plan.kinds:
        for i in range(kind.count):
            if not any(node.take(kind.bundles) for node in free):
                raise ConfigError(
                    f"{kind.name} {i + 1} of {kind.count} ({kind.keys}; each {_fmt_bundles(kind.bundles)}) fits on "
                    f"no node of {where} ({_fmt_nodes(nodes)}) once the processes before it are placed "
                    f"({describe_kinds(plan)}); {_advice('GPU' if any('GPU' in b for b in kind.bundles) else 'CPU')}"
                )


def describe_kinds(plan: ResourcePlan) -> str:
    return " and ".join(
        f"{k.count} {k.name}{'s' if k.count > 1 else ''} of {_fmt_bundles(k.bundles)}" for k in plan.kinds
    )


def described_cluster(nodes: int, cpus_per_node: float, gpus_per_node: int) -> list[dict[str, float]]:
    """`nodes` identical nodes, as `--dry-run --nodes N --cpus-per-node C --gpus-per-node G` describes them."""
    node = {"CPU": float(cpus_per_node), **({"GPU": float(gpus_per_node)} if gpus_per_node else {})}
    return [dict(node) for _ in range(nodes)]


class _NodeLeft:
    """What is still free on one node: its non-GPU resources, and each GPU's free share."""

    def __init__(self, other: dict[str, float], gpus: list[float]):
        self.other, self.gpus = other, gpus

    @classmethod
    def of(cls, node: Mapping[str, float]) -> "_NodeLeft":
        return cls({k: float(v) for k, v in node.items() if k != "GPU"}, [1.0] * int(node.get("GPU", 0) + _EPS))

    def take(self, bundles: Sequence[Mapping[str, float]]) -> bool:
        """Reserve all of `bundles` here (all or nothing); False if they do not fit."""
        other, gpus = dict(self.other), list(self.gpus)
        for bundle in bundles:
            for name, amount in bundle.items():
                if name == "GPU":
                    slot = next((g for g, left in enumerate(gpus) if left + _EPS >= amount), None)
                    if slot is None:
                        return False
                    gpus[slot] -= amount
                elif other.get(name, 0.0) + _EPS < amount:
                    return False
                else:
                    other[name] = other.get(name, 0.0) - amount
        self.other, self.gpus = other, gpus
        return True


def _sum(nodes: Sequence[Mapping[str, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for node in nodes:
        for name, amount in node.items():
            out[name] = out.get(name, 0.0) + float(amount)
    return out


def format_resources(resources: Mapping[str, float], names: Optional[Mapping[str, float]] = None) -> str:
    """`1 CPU, 0.49 GPU`: the amounts of `resources` (those named in `names`, when given), by name."""
    keys = sorted(names) if names is not None else sorted(resources)
    return ", ".join(f"{resources.get(k, 0.0):g} {k}" for k in keys)


def _fmt_bundles(bundles: Sequence[Mapping[str, float]]) -> str:
    return " + ".join("{" + format_resources(b) + "}" for b in bundles)


def _fmt_nodes(nodes: Sequence[Mapping[str, float]]) -> str:
    shown = [
        format_resources(
            {k: v for k, v in n.items() if k in ("CPU", "GPU") or not k.startswith(("node:", "memory", "object_store"))}
        )
        for n in nodes
    ]
    return f"{len(nodes)} node{'s' if len(nodes) != 1 else ''}: " + "; ".join(shown)


def _advice(name: str) -> str:
    if name == "GPU":
        return (
            "give the run more GPUs, or lower trainer.n_gpus_per_node / trainer.nnodes, "
            "actor_rollout_ref.rollout.tensor_model_parallel_size or rollout.replicas (trainer.placement=split "
            "needs rollout.replicas x tensor_model_parallel_size GPUs beside the training ones)"
        )
    if name == "CPU":
        return "lower trainer.cpus_per_worker / actor_rollout_ref.rollout.cpus_per_replica, or add CPUs"
    return (
        f"start the nodes with `ray start --resources '{{\"{name}\": N}}'` or lower the amount in "
        f"{WORKER_KEY} / {REPLICA_KEY}"
    )


# ---------------------------------------------------------------- amounts, when the config is loaded
def custom_requests(cfg: TrainerRunConfig) -> list[tuple[str, Mapping[str, float], int]]:
    """(key, resources per process, processes) for the train workers and the rollout replicas."""
    return [
        (WORKER_KEY, cfg.trainer.worker_resources, cfg.trainer.num_workers),
        (REPLICA_KEY, cfg.actor_rollout_ref.rollout.replica_resources, cfg.actor_rollout_ref.rollout.replicas),
    ]


def check_placement(cfg: TrainerRunConfig) -> None:
    """Each amount one Ray accepts for a custom resource: not a built-in one, >= 0, not below Ray's 0.0001 step."""
    for key, resources, _ in custom_requests(cfg):
        for name, amount in resources.items():
            if name in _BUILT_IN:
                instead = _BUILT_IN[name]
                raise ConfigError(
                    f"{key}.{name}={amount}: {name} is one of Ray's built-in resources, not a custom "
                    "one" + (f"; set it with {instead}" if instead else "")
                )
            if amount < 0:
                raise ConfigError(f"{key}.{name}={amount} must be >= 0 (an amount of the Ray custom resource {name!r})")
            if 0 < amount < 1e-4:
                raise ConfigError(
                    f"{key}.{name}={amount}: Ray counts resources in steps of 0.0001, so this asks for nothing"
                )


def wants_custom_resources(cfg: TrainerRunConfig) -> bool:
    return any(resources for _, resources, _ in custom_requests(cfg))
