"""verl's run-script keys that this framework takes as they are: older names mapped onto the current ones, the DAPO
reward manager's keyword arguments, and settings of features that do not exist here, which are accepted at verl's
default and refused at any other value, naming the key, the value and why.
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Any, Iterator

from app.config.loader import ConfigError, _build, _coerce
from app.config.ranks import ranks_named
from app.config.schema import CheckpointConfig, FSDPConfig, OptimConfig, OverlongBufferConfig, TrainerRunConfig

# (section, verl's older global micro-batch key, the per-rank key it becomes)
_GLOBAL_MICRO_BATCHES = (
    ("actor_rollout_ref.actor", "ppo_micro_batch_size", "ppo_micro_batch_size_per_gpu"),
    ("actor_rollout_ref.rollout", "log_prob_micro_batch_size", "log_prob_micro_batch_size_per_gpu"),
    ("actor_rollout_ref.ref", "log_prob_micro_batch_size", "log_prob_micro_batch_size_per_gpu"),
    ("critic", "ppo_micro_batch_size", "ppo_micro_batch_size_per_gpu"),
)
_DAPO_REWARD_KWARGS = ("max_resp_len", "overlong_buffer_cfg")


# verl keys accepted at any value that change nothing here, and why (the README's "Coming from verl" lists them too)
NO_EFFECT = {
    "data.val_batch_size": "validation prompts go to the rollout service in one request, which batches them itself "
                           "(verl deprecated the key for the same reason)",
    "data.return_raw_chat": "prompts always keep their chat messages (reward models and custom rewards get them)",
    "actor_rollout_ref.actor.entropy_checkpointing": "the entropy is computed in chunks "
                                                    "(actor.logits_chunk_size) and not kept for the backward pass",
    "actor_rollout_ref.rollout.load_format": "the rollout engine loads model.path itself; syncs send weights",
    "actor_rollout_ref.rollout.layered_summon": "LoRA syncs send the adapter alone, or the merged weights",
    "actor_rollout_ref.rollout.mode": "the rollout is always a Ray Serve deployment answering requests",
    "trainer.use_legacy_worker_impl": "there is one worker implementation here",
}
MULTI_TURN = "actor_rollout_ref.rollout.multi_turn"  # accepted at verl's defaults only, each field of it

log = logging.getLogger(__name__)


def apply_verl_names(cfg: TrainerRunConfig) -> None:
    """Map verl's alternative spellings onto the keys the trainer reads (in place). Runs after the derived defaults
    (rollout.response_length, ...) are filled."""
    if isinstance(cfg.trainer.logger, str):  # verl takes `trainer.logger=console` as well as a list
        cfg.trainer.logger = [cfg.trainer.logger]
    _map_global_micro_batches(cfg)
    arr = cfg.actor_rollout_ref
    for section in (arr.rollout, arr.ref):  # verl's interpolations: the log-prob passes batch like the actor
        if section.log_prob_use_dynamic_bsz is None:
            section.log_prob_use_dynamic_bsz = arr.actor.use_dynamic_bsz
        if section.log_prob_max_token_len_per_gpu is None:
            section.log_prob_max_token_len_per_gpu = arr.actor.ppo_max_token_len_per_gpu
    for checkpoint in (arr.actor.checkpoint, cfg.critic.checkpoint):
        if checkpoint.load_contents is None:
            checkpoint.load_contents = list(checkpoint.save_contents)
    _map_dapo_reward_kwargs(cfg)
    _map_lr_scheduler_type(cfg)


def _map_lr_scheduler_type(cfg: TrainerRunConfig) -> None:
    """Newer verl names the schedule after warm-up `optim.lr_scheduler_type`; older, `optim.warmup_style`."""
    for path, optim in _sections_of_type(cfg, OptimConfig):
        new, old = optim.lr_scheduler_type, optim.warmup_style
        if new is None:
            continue
        if old != "constant" and old != new:  # constant is the default: set only when the user named it
            raise ConfigError(f"{path}.lr_scheduler_type={new!r} and {path}.warmup_style={old!r} name the same "
                              "setting; set only one of them")
        optim.warmup_style = new


def _section(cfg: Any, dotted: str) -> Any:
    for name in dotted.split("."):
        cfg = getattr(cfg, name)
    return cfg


def _map_global_micro_batches(cfg: TrainerRunConfig) -> None:
    """verl divides the old global sizes by the number of ranks (trainer.num_workers, derived from the GPU count on
    GPUs)."""
    workers = cfg.trainer.num_workers
    for path, old, new in _GLOBAL_MICRO_BATCHES:
        section = _section(cfg, path)
        total = getattr(section, old)
        if total is None:
            continue
        if total <= 0 or total % workers:
            raise ConfigError(
                f"{path}.{old}={total} is verl's older global micro-batch size, which is split evenly over the ranks, "
                f"and it does not split over {ranks_named(cfg.trainer)}; set {path}.{new} (per rank) instead")
        per_rank = total // workers
        current = getattr(section, new)
        if current is not None and current != per_rank:
            raise ConfigError(
                f"{path}.{old}={total} means {per_rank} per rank over {ranks_named(cfg.trainer)}, but "
                f"{path}.{new}={current}: they name the same setting; set only one of them")
        setattr(section, new, per_rank)


def _map_dapo_reward_kwargs(cfg: TrainerRunConfig) -> None:
    """verl's DAPO reward manager takes the overlong shaping as reward_kwargs; here it is reward_model.overlong_buffer,
    whose budget is the rollout's response length."""
    rm = cfg.reward_model
    kwargs = rm.reward_kwargs
    if not kwargs:
        return
    if rm.reward_manager != "dapo":
        raise ConfigError(
            f"reward_model.reward_kwargs={kwargs!r} are keyword arguments for the reward manager, and only "
            f"reward_model.reward_manager=dapo takes any ({', '.join(_DAPO_REWARD_KWARGS)}); "
            f"reward_manager is {rm.reward_manager!r}")
    unknown = sorted(set(kwargs) - set(_DAPO_REWARD_KWARGS))
    if unknown:
        raise ConfigError(f"unknown key {', '.join(f'reward_model.reward_kwargs.{k}' for k in unknown)} for "
                          f"reward_model.reward_manager=dapo; known keys: {', '.join(_DAPO_REWARD_KWARGS)}")
    if "overlong_buffer_cfg" in kwargs:
        key = "reward_model.reward_kwargs.overlong_buffer_cfg"
        given = _build(OverlongBufferConfig, kwargs["overlong_buffer_cfg"], key)
        if rm.overlong_buffer not in (OverlongBufferConfig(), given):
            raise ConfigError(
                f"{key} ({given}) and reward_model.overlong_buffer "
                f"({rm.overlong_buffer}) are the same setting (verl's DAPO reward manager's spelling and this "
                "framework's) and disagree; set one of them")
        rm.overlong_buffer = given
    if kwargs.get("max_resp_len") is not None:
        budget = cfg.actor_rollout_ref.rollout.response_length
        max_resp_len = _coerce(int, kwargs["max_resp_len"], "reward_model.reward_kwargs.max_resp_len")
        if max_resp_len != budget:
            raise ConfigError(
                f"reward_model.reward_kwargs.max_resp_len={max_resp_len}: the overlong buffer here ends at the "
                f"response budget, actor_rollout_ref.rollout.response_length={budget}; give the same value or drop it")


def check_unsupported(cfg: TrainerRunConfig) -> None:
    """Refuse verl settings of features this framework does not have (at verl's defaults they are accepted); say
    which set keys have no effect here."""
    default = TrainerRunConfig()
    for key, why in NO_EFFECT.items():
        value = _section(cfg, key)
        if value != _section(default, key):
            log.info("%s=%r has no effect here: %s", key, value, why)
    for path, size in _fields_named(cfg, "ulysses_sequence_parallel_size"):
        if size != 1:
            raise ConfigError(f"{path}={size}: sequence parallelism is not supported yet; set it to 1 (the default)")
    workers = cfg.trainer.num_workers
    for path, fsdp in _sections_of_type(cfg, FSDPConfig):
        if fsdp.fsdp_size not in (-1, workers):
            raise ConfigError(
                f"{path}.fsdp_size={fsdp.fsdp_size}: hybrid sharding (shard over groups of fsdp_size ranks, replicate "
                f"across groups) is not supported; a model is sharded over all {ranks_named(cfg.trainer)} "
                f"here, which -1 (the default) means")
    arr = cfg.actor_rollout_ref
    for path, model in (("actor_rollout_ref.model", arr.model), ("critic.model", cfg.critic.model)):
        if model.override_config:
            raise ConfigError(
                f"{path}.override_config={model.override_config!r}: overriding the model's Hugging Face config is not "
                "supported yet (the trainer and the vLLM rollout load model.path as it is); edit config.json in a "
                "copy of the model folder instead")
    _refuse_non_default(arr.rollout.multi_turn, MULTI_TURN,
                        "multi-turn rollout (tool calls, interactions) is not supported yet")
    for path, checkpoint in _sections_of_type(cfg, CheckpointConfig):
        for name in ("save_contents", "load_contents"):
            value = getattr(checkpoint, name)
            if sorted(value) != sorted(CheckpointConfig().save_contents):
                raise ConfigError(
                    f"{path}.{name}={value!r}: checkpoints here always hold the model, the optimizer and the extra "
                    "state (LR schedule, RNG, data position), which resuming needs, and no Hugging Face copy (the run "
                    "exports hf_model/ at the end); drop the key or give all three")
    if cfg.reward_model.reward_manager == "batch" and not cfg.custom_reward_function.path:
        raise ConfigError(
            "reward_model.reward_manager='batch' calls a custom compute_score once with lists of all responses; the "
            "built-in rules score one response at a time: set custom_reward_function.path to a batched function, or "
            "use reward_manager=naive")
    _check_log_val_generations(cfg)
    rollout = arr.rollout
    if rollout.max_model_len is not None and rollout.max_model_len < rollout.prompt_length + rollout.response_length:
        raise ConfigError(
            f"actor_rollout_ref.rollout.max_model_len={rollout.max_model_len} is shorter than a prompt and its "
            f"response (rollout.prompt_length + response_length = {rollout.prompt_length + rollout.response_length})")


def _check_log_val_generations(cfg: TrainerRunConfig) -> None:
    if cfg.trainer.log_val_generations < 0:
        raise ConfigError(f"trainer.log_val_generations={cfg.trainer.log_val_generations} must be >= 0")


def _refuse_non_default(section: Any, path: str, why: str) -> None:
    default = type(section)()
    for f in dataclasses.fields(section):
        value = getattr(section, f.name)
        if value != getattr(default, f.name):
            raise ConfigError(f"{path}.{f.name}={value!r}: {why}; only verl's default "
                              f"{getattr(default, f.name)!r} is accepted")


def _walk(node: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted path, section) for every dataclass section of the config tree, the root first."""
    yield path, node
    for f in dataclasses.fields(node):
        child = getattr(node, f.name)
        if dataclasses.is_dataclass(child):
            yield from _walk(child, f"{path}.{f.name}" if path else f.name)


def _sections_of_type(cfg: TrainerRunConfig, cls: type) -> Iterator[tuple[str, Any]]:
    return ((path, node) for path, node in _walk(cfg) if isinstance(node, cls))


def _fields_named(cfg: TrainerRunConfig, name: str) -> Iterator[tuple[str, Any]]:
    for path, node in _walk(cfg):
        if name in {f.name for f in dataclasses.fields(node)}:
            yield f"{path}.{name}" if path else name, getattr(node, name)
