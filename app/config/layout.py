"""The run's layout, decided once: the device, the placement, the rollout replicas, vLLM's memory settings and whether
the trainer compiles its layers.

Defaults follow the machine the config describes, never the one the driver happens to run on: `trainer.n_gpus_per_node`
says whether the run trains on GPUs (as in verl), `trainer.device=cpu` keeps such a layout but computes on the CPU (a
GPU layout tried on a machine without GPUs).
"""

from __future__ import annotations

from app.config.errors import ConfigError
from app.config.schema import TrainerRunConfig

ROLLOUT = "actor_rollout_ref.rollout"
# vLLM's share of GPU memory when it has the GPUs to itself, and when it shares them with the trainer (verl's default)
SPLIT_GPU_MEMORY_UTILIZATION = 0.9
COLOCATED_GPU_MEMORY_UTILIZATION = 0.5


def derive_layout(cfg: TrainerRunConfig) -> None:
    """Fill trainer.device, trainer.placement, rollout.replicas, rollout.gpu_memory_utilization,
    rollout.enforce_eager and the roles' use_torch_compile in place (after `derive_ranks`), or refuse a layout that
    cannot run."""
    trainer, rollout = cfg.trainer, cfg.actor_rollout_ref.rollout
    on_gpus = trainer.n_gpus_per_node > 0
    if trainer.device is None:
        trainer.device = "cuda" if on_gpus else "cpu"
    if trainer.device == "cuda" and not on_gpus:
        raise ConfigError(
            "trainer.device=cuda with trainer.n_gpus_per_node=0: set trainer.n_gpus_per_node to the "
            "GPUs of each node (verl's key), or trainer.device=cpu"
        )
    if trainer.placement is None:
        trainer.placement = "colocated" if on_gpus else "split"
    tp = rollout.tensor_model_parallel_size
    if tp < 1:
        raise ConfigError(f"{ROLLOUT}.tensor_model_parallel_size={tp} must be >= 1")
    if not on_gpus:
        _check_cpu_layout(cfg)
    else:
        _check_gpu_layout(cfg)
    if rollout.replicas is None:
        rollout.replicas = trainer.num_workers // tp if trainer.placement == "colocated" else 1
    if rollout.replicas < 1:
        raise ConfigError(f"{ROLLOUT}.replicas={rollout.replicas} must be >= 1")
    vllm_alone = on_gpus and trainer.placement == "split"
    if rollout.gpu_memory_utilization is None:
        rollout.gpu_memory_utilization = (
            SPLIT_GPU_MEMORY_UTILIZATION if vllm_alone else COLOCATED_GPU_MEMORY_UTILIZATION
        )
    if not 0 < rollout.gpu_memory_utilization <= 1:
        raise ConfigError(f"{ROLLOUT}.gpu_memory_utilization={rollout.gpu_memory_utilization} must be in (0, 1]")
    if rollout.enforce_eager is None:
        rollout.enforce_eager = not (vllm_alone and trainer.device == "cuda")
    _derive_compile(cfg)


def _derive_compile(cfg: TrainerRunConfig) -> None:
    """``use_torch_compile=None`` (actor, which the reference follows, and critic): compiled decoder layers where
    they are built and checked, FSDP on CUDA without sequence parallelism; eager otherwise. An explicit value stays,
    and the DeepSpeed and sequence-parallel checks refuse an explicit true."""
    arr, critic = cfg.actor_rollout_ref, cfg.critic
    on_cuda = cfg.trainer.device == "cuda"
    actor_sp = max(arr.actor.ulysses_sequence_parallel_size, arr.ref.ulysses_sequence_parallel_size)
    if arr.actor.use_torch_compile is None:
        arr.actor.use_torch_compile = on_cuda and arr.actor.strategy != "deepspeed" and actor_sp == 1
    if critic.use_torch_compile is None:
        critic.use_torch_compile = (
            on_cuda and critic.strategy != "deepspeed" and critic.ulysses_sequence_parallel_size == 1
        )


def _check_cpu_layout(cfg: TrainerRunConfig) -> None:
    trainer, rollout = cfg.trainer, cfg.actor_rollout_ref.rollout
    if trainer.placement == "colocated":
        raise ConfigError(
            "trainer.placement=colocated needs GPUs (trainer.n_gpus_per_node > 0): on CPU the rollout "
            "and the trainer already share the cores, and vLLM's CPU build cannot sleep; use "
            "trainer.placement=split"
        )
    if rollout.tensor_model_parallel_size > 1:
        raise ConfigError(
            f"{ROLLOUT}.tensor_model_parallel_size={rollout.tensor_model_parallel_size} needs GPUs "
            "(trainer.n_gpus_per_node > 0): on CPU each replica runs one vLLM worker; set it to 1 and "
            f"raise {ROLLOUT}.replicas for more rollout throughput"
        )


def _check_gpu_layout(cfg: TrainerRunConfig) -> None:
    trainer, rollout = cfg.trainer, cfg.actor_rollout_ref.rollout
    tp, per_node = rollout.tensor_model_parallel_size, trainer.n_gpus_per_node
    if tp > per_node:
        raise ConfigError(
            f"{ROLLOUT}.tensor_model_parallel_size={tp} is more than trainer.n_gpus_per_node="
            f"{per_node}: one replica's tensor-parallel workers run on one node"
        )
    if trainer.placement != "colocated":
        return
    ranks = trainer.num_workers
    if ranks % tp:
        raise ConfigError(
            f"trainer.placement=colocated shares the {ranks} training GPUs (trainer.n_gpus_per_node="
            f"{per_node} x trainer.nnodes={trainer.nnodes}) among replicas of {ROLLOUT}."
            f"tensor_model_parallel_size={tp} GPUs each: {ranks} is not a multiple of {tp}"
        )
    if rollout.replicas is not None and rollout.replicas * tp != ranks:
        raise ConfigError(
            f"{ROLLOUT}.replicas={rollout.replicas} x tensor_model_parallel_size={tp} = "
            f"{rollout.replicas * tp} GPUs, but trainer.placement=colocated puts one rollout worker on "
            f"each of the {ranks} training GPUs: leave {ROLLOUT}.replicas unset ({ranks // tp}), or use "
            "trainer.placement=split with GPUs of their own"
        )
    if rollout.replica_resources:
        raise ConfigError(
            f"{ROLLOUT}.replica_resources={dict(rollout.replica_resources)} places the replicas apart "
            "from the train workers, which trainer.placement=colocated puts on the same GPUs; use "
            "trainer.placement=split or leave it empty"
        )
