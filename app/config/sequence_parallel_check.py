"""Ulysses sequence parallelism (`*.ulysses_sequence_parallel_size`) checked on the driver: what the FSDP2 engine
(app/engine/sequence_parallel.py) needs, refused before any worker starts.

verl's meaning: groups of S ranks compute each sequence together, so the data-parallel size is ranks / S and a
micro-batch size or token budget "per GPU" is per group of S ranks (the budget: per rank, S times that per group).
"""

from __future__ import annotations

import json
from pathlib import Path

from app.config.errors import ConfigError
from app.config.ranks import ranks_named
from app.config.schema import TrainerRunConfig

KEY = "ulysses_sequence_parallel_size"


def role_sizes(cfg: TrainerRunConfig) -> dict[str, int]:
    """The key read for each engine, by its role's section path."""
    arr = cfg.actor_rollout_ref
    return {
        "actor_rollout_ref.actor": arr.actor.ulysses_sequence_parallel_size,
        "actor_rollout_ref.ref": arr.ref.ulysses_sequence_parallel_size,
        "critic": cfg.critic.ulysses_sequence_parallel_size,
    }


def data_parallel_size(cfg: TrainerRunConfig, role: str) -> int:
    """Ranks / S of the role at section path `role` (after `check_sequence_parallel`)."""
    return cfg.trainer.num_workers // role_sizes(cfg).get(role, 1)


def sp_ranks_named(cfg: TrainerRunConfig, role: str) -> str:
    """The data-parallel size of the role at `role` as the user set it, for messages: which keys to change."""
    size = role_sizes(cfg).get(role, 1)
    if size == 1:
        return ranks_named(cfg.trainer)
    return f"{data_parallel_size(cfg, role)} data-parallel groups ({ranks_named(cfg.trainer)} / {role}.{KEY}={size})"


def check_sequence_parallel(cfg: TrainerRunConfig) -> None:
    """Refuse what the engine cannot run (reward_model's key is verl_compat.DEFAULT_ONLY's)."""
    arr, critic = cfg.actor_rollout_ref, cfg.critic
    # verl's engine-level copies in fsdp_config: the role's key is the one read
    for copy, role in (
        ("actor_rollout_ref.actor.fsdp_config", "actor_rollout_ref.actor"),
        ("actor_rollout_ref.ref.fsdp_config", "actor_rollout_ref.ref"),
        ("critic.model.fsdp_config", "critic"),
    ):
        copied = _fsdp_config(cfg, copy).ulysses_sequence_parallel_size
        if copied not in (1, role_sizes(cfg)[role]):
            raise ConfigError(
                f"{copy}.{KEY}={copied} disagrees with {role}.{KEY}={role_sizes(cfg)[role]}, the key "
                f"read here; set {role}.{KEY} (and drop the copy)"
            )
    workers = cfg.trainer.num_workers
    strategies = {
        "actor_rollout_ref.actor": arr.actor.strategy,
        "actor_rollout_ref.ref": arr.actor.strategy,
        "critic": critic.strategy,
    }
    # the reference compiles as the actor does
    compiled = {
        "actor_rollout_ref.actor": ("actor_rollout_ref.actor", arr.actor.use_torch_compile),
        "actor_rollout_ref.ref": ("actor_rollout_ref.actor", arr.actor.use_torch_compile),
        "critic": ("critic", critic.use_torch_compile),
    }
    remove_padding = {
        "actor_rollout_ref.actor": ("actor_rollout_ref.model", arr.model.use_remove_padding),
        "actor_rollout_ref.ref": ("actor_rollout_ref.model", arr.model.use_remove_padding),
        "critic": ("critic.model", critic.model.use_remove_padding),
    }
    for role, size in role_sizes(cfg).items():
        if size == 1:
            continue
        if size < 1 or workers % size:
            raise ConfigError(
                f"{role}.{KEY}={size}: {ranks_named(cfg.trainer)} do not split into groups of {size} "
                "ranks (each group computes its sequences together); use a size that divides them"
            )
        if strategies[role] == "deepspeed":
            raise ConfigError(
                f"{role}.{KEY}={size}: strategy=deepspeed has no sequence parallelism here; use "
                f"strategy=fsdp2 for it or set {KEY} to 1"
            )
        model_key, packed = remove_padding[role]
        if not packed:
            raise ConfigError(
                f"{role}.{KEY}={size} splits packed sequences across ranks: it needs "
                f"{model_key}.use_remove_padding=true"
            )
        compile_key, compiles = compiled[role]
        if compiles:
            raise ConfigError(
                f"{role}.{KEY}={size} runs the layers eagerly (compiled layers are not checked around "
                f"its all-to-alls): set {compile_key}.use_torch_compile=false or {KEY} to 1"
            )
        model_path = critic.model.path if role == "critic" else arr.model.path
        _check_heads(role, size, model_path)


def _fsdp_config(cfg: TrainerRunConfig, path: str):
    node = cfg
    for name in path.split("."):
        node = getattr(node, name)
    return node


def _check_heads(role: str, size: int, model_path: str | None) -> None:
    """Each rank of a group attends with heads / S query heads. Checked here when the model folder is readable (the
    engine checks again when it loads the model)."""
    config_file = Path(model_path or "") / "config.json"
    if not model_path or not config_file.is_file():
        return
    heads = json.loads(config_file.read_text()).get("num_attention_heads")
    if isinstance(heads, int) and heads % size:
        raise ConfigError(
            f"{role}.{KEY}={size}: the model at {model_path} has {heads} attention heads, which "
            f"{size} ranks cannot share evenly; use a size that divides {heads}"
        )
