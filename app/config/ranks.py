"""How many training ranks a run has, decided once: verl's `n_gpus_per_node × nnodes` on GPUs, `num_workers` on CPU."""

from __future__ import annotations

from app.config.errors import ConfigError
from app.config.schema import CPU_NUM_WORKERS, TrainerConfig


def derive_ranks(trainer: TrainerConfig) -> None:
    """Fill `trainer.num_workers` (the Ray Train workers, one rank each) in place, or refuse a contradiction."""
    if trainer.nnodes < 1 or trainer.n_gpus_per_node < 0:
        raise ConfigError(
            f"trainer.nnodes={trainer.nnodes} must be >= 1 and trainer.n_gpus_per_node={trainer.n_gpus_per_node} >= 0"
        )
    if trainer.n_gpus_per_node > 0:  # a verl script sizes its job this way; one rank per GPU
        gpus = trainer.n_gpus_per_node * trainer.nnodes
        if trainer.num_workers is None:
            trainer.num_workers = gpus
        elif trainer.num_workers != gpus:
            raise ConfigError(
                f"trainer.num_workers={trainer.num_workers} contradicts trainer.n_gpus_per_node="
                f"{trainer.n_gpus_per_node} × trainer.nnodes={trainer.nnodes} = {gpus} GPU ranks; "
                "leave trainer.num_workers unset on GPUs"
            )
        return
    if trainer.nnodes > 1:
        raise ConfigError(
            f"trainer.nnodes={trainer.nnodes} with trainer.n_gpus_per_node=0: on CPU the ranks are "
            "trainer.num_workers, which Ray places over the cluster's nodes; leave trainer.nnodes at 1"
        )
    if trainer.num_workers is None:
        trainer.num_workers = CPU_NUM_WORKERS
    if trainer.num_workers < 1:
        raise ConfigError(f"trainer.num_workers={trainer.num_workers} must be positive")


def ranks_named(trainer: TrainerConfig) -> str:
    """The rank count as the user set it, for messages: which keys to change."""
    if trainer.n_gpus_per_node > 0:
        return (
            f"{trainer.num_workers} ranks (trainer.n_gpus_per_node={trainer.n_gpus_per_node} × "
            f"trainer.nnodes={trainer.nnodes})"
        )
    return f"trainer.num_workers={trainer.num_workers}"


def shards_over_all_ranks(fsdp_size: int, ranks: int) -> bool:
    """verl's meaning of `*.fsdp_config.fsdp_size`: -1, or the rank count or more, shards one copy of the model over
    every rank; a smaller divisor of the rank count is hybrid sharding (app.engine.fsdp_engine.sharding_mesh)."""
    return fsdp_size == -1 or fsdp_size >= ranks
