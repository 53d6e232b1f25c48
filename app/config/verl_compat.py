"""verl's run-script keys that this framework takes as they are: older names mapped onto the current ones, the DAPO
reward manager's keyword arguments, and settings of features that do not exist here, which are accepted at verl's
default and refused at any other value, naming the key, the value and why.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Iterator

from app.config.errors import ConfigError
from app.config.multi_turn import check_multi_turn
from app.config.schema import (
    CHECKPOINT_HF,
    RM_MICRO_BATCH_PER_GPU,
    CheckpointConfig,
    OptimConfig,
    OverlongBufferConfig,
    TrainerRunConfig,
)
from app.config.sequence_parallel_check import data_parallel_size, sp_ranks_named
from app.config.typed import build_typed, coerce

# (section, verl's older global micro-batch key, the per-rank key it becomes)
_GLOBAL_MICRO_BATCHES = (
    ("actor_rollout_ref.actor", "ppo_micro_batch_size", "ppo_micro_batch_size_per_gpu"),
    ("actor_rollout_ref.rollout", "log_prob_micro_batch_size", "log_prob_micro_batch_size_per_gpu"),
    ("actor_rollout_ref.ref", "log_prob_micro_batch_size", "log_prob_micro_batch_size_per_gpu"),
    ("critic", "ppo_micro_batch_size", "ppo_micro_batch_size_per_gpu"),
    ("reward_model", "micro_batch_size", "micro_batch_size_per_gpu"),
)
_DAPO_REWARD_KWARGS = ("max_resp_len", "overlong_buffer_cfg")


# Sections verl repeats per role: the same key under each gets the same treatment
_FSDP = ("actor_rollout_ref.actor.fsdp_config", "actor_rollout_ref.ref.fsdp_config", "critic.model.fsdp_config")
_OPTIM = ("actor_rollout_ref.actor.optim", "critic.optim")
_CHECKPOINT = ("actor_rollout_ref.actor.checkpoint", "critic.checkpoint")
_PROFILED = ("actor_rollout_ref.actor", "actor_rollout_ref.ref", "actor_rollout_ref.rollout", "critic", "reward_model")


def _each(sections: tuple[str, ...], name: str, why: str) -> dict[str, str]:
    return {f"{section}.{name}": why for section in sections}


_PROFILER = (
    "verl's nsys / npu / torch profiler hooks are not built in; profile the Ray workers with Ray's or "
    "PyTorch's own tools"
)
_ENGINE_COPY = "verl's engine-level copy of the role's key of the same name, which is the one read here"

# verl keys accepted at any value that change nothing here, and why (docs/verl_keys.md lists every verl key)
NO_EFFECT = {
    "data.val_batch_size": "validation prompts go to the rollout service in one request, which batches them itself "
    "(verl deprecated the key for the same reason)",
    "data.return_raw_chat": "prompts always keep their chat messages (reward models and custom rewards get them)",
    "actor_rollout_ref.actor.entropy_checkpointing": "the entropy is computed in chunks "
    "(actor.logits_chunk_size) and not kept for the backward pass",
    "actor_rollout_ref.actor.sum_pi_squared_checkpointing": "the sum of squared probabilities is computed without "
    "gradient (only the optimal token baseline reads it), so there is nothing to recompute",
    "actor_rollout_ref.rollout.load_format": "the rollout engine loads model.path itself; syncs send weights",
    "actor_rollout_ref.rollout.layered_summon": "LoRA syncs send the adapter alone, or the merged weights",
    "actor_rollout_ref.rollout.mode": "the rollout is always a Ray Serve deployment answering requests",
    "trainer.use_legacy_worker_impl": "there is one worker implementation here",
    # data
    "data.use_shm": "data files are read where they are",
    "data.return_raw_input_ids": "reward models re-tokenise from each sample's chat messages with their own tokenizer",
    "data.return_full_prompt": "each sample keeps its prompt's chat messages and token ids whatever the value",
    "data.dataloader_num_workers": "the prompts are read into memory once; batches are cut from them in the driver",
    "data.validation_shuffle": "validation scores are means over the whole validation set: the order does not "
    "change them",
    "data.filter_overlong_prompts_workers": "data.filter_overlong_prompts runs in the driver",
    "data.image_key": "models here are text-only: image columns are not read",
    "data.video_key": "models here are text-only: video columns are not read",
    "data.trust_remote_code": "the tokenizer loads with actor_rollout_ref.model.trust_remote_code",
    "data.return_multi_modal_inputs": "models here are text-only: there are no multi-modal inputs",
    # model
    "actor_rollout_ref.model.use_shm": "models load from model.path where it is",
    "actor_rollout_ref.model.enable_activation_offload": "activations stay on the device (enable_gradient_checkpointing"
    " is the memory setting for them here)",
    "actor_rollout_ref.model.use_liger": "the engine runs the model's own Hugging Face modules: same numbers",
    "actor_rollout_ref.model.use_fused_kernels": "log-probs and entropy are computed in chunks "
    "(actor.logits_chunk_size) by the engine itself",
    "actor_rollout_ref.model.fused_kernel_options": "used only with use_fused_kernels, which has no effect here",
    "actor_rollout_ref.nccl_timeout": "process groups are set up by Ray Train with its own timeout",
    # actor / reference
    "actor_rollout_ref.actor.freeze_vision_tower": "models here are text-only: there is no vision tower",
    "actor_rollout_ref.actor.use_fused_kernels": "verl's copy of model.use_fused_kernels, which has no effect here",
    "actor_rollout_ref.actor.entropy_from_logits_with_chunking": "the entropy is always computed in chunks "
    "(actor.logits_chunk_size)",
    "actor_rollout_ref.actor.use_remove_padding": "verl's copy of actor_rollout_ref.model.use_remove_padding, which is "
    "the one read here",
    "actor_rollout_ref.ref.use_torch_compile": "the reference's forward compiles as actor.use_torch_compile says",
    "actor_rollout_ref.ref.entropy_from_logits_with_chunking": "the reference computes log-probs only, in chunks",
    "actor_rollout_ref.ref.entropy_checkpointing": "the reference computes no entropy and runs no backward pass",
    **_each(_FSDP, "forward_prefetch", "FSDP2's own prefetch schedule is used: the same numbers either way"),
    **_each(
        _FSDP, "use_orig_params", "an FSDP1 setting; the engine here is FSDP2, which keeps the original parameters"
    ),
    **_each(_FSDP, "entropy_from_logits_with_chunking", _ENGINE_COPY),
    **_each(_FSDP, "use_torch_compile", _ENGINE_COPY),
    **_each(_FSDP, "entropy_checkpointing", _ENGINE_COPY),
    **_each(
        _FSDP, "forward_only", "verl's internal flag for inference-only engines; each role here knows whether it trains"
    ),
    **_each(_FSDP, "strategy", _ENGINE_COPY),
    # rollout
    "actor_rollout_ref.rollout.cudagraph_capture_sizes": "vLLM picks its CUDA-graph batch sizes (enforce_eager "
    "turns graphs off): the same samples either way",
    "actor_rollout_ref.rollout.disable_log_stats": "vLLM's statistics logging is not part of the run's metrics",
    "actor_rollout_ref.rollout.multi_stage_wake_up": "a memory schedule of verl's wake-up; the replicas here wake "
    "in one step",
    "actor_rollout_ref.rollout.calculate_log_probs": "the rollout here always returns the sampler's log-probs "
    "(algorithm.rollout_correction uses them)",
    "actor_rollout_ref.rollout.update_weights_bucket_megabytes": "weight syncs here are staged chunk by chunk at a "
    "size of their own",
    "actor_rollout_ref.rollout.skip_dump_dir": "used only with skip_rollout, which is refused",
    "actor_rollout_ref.rollout.skip_tokenizer_init": "vLLM here takes and returns token ids; its tokenizer serves "
    "only the OpenAI routes",
    "actor_rollout_ref.rollout.engine_kwargs.sglang": "SGLang does not run here (rollout.name=sglang is served by "
    "vLLM)",
    "actor_rollout_ref.rollout.agent.num_workers": "the rollout here is one Ray Serve deployment, not agent-loop "
    "workers",
    "actor_rollout_ref.rollout.trace.backend": "rollout traces (weave, mlflow spans) are not recorded here",
    "actor_rollout_ref.rollout.trace.token2text": "rollout traces are not recorded here",
    **_each(_PROFILED, "profiler", _PROFILER),
    "global_profiler": _PROFILER,
    # critic
    "critic.rollout_n": "verl's copy of actor_rollout_ref.rollout.n, which is the one read here",
    "critic.forward_micro_batch_size": "the critic's value pass here batches as its update "
    "(ppo_micro_batch_size_per_gpu, use_dynamic_bsz)",
    "critic.forward_micro_batch_size_per_gpu": "the critic's value pass here batches as its update "
    "(ppo_micro_batch_size_per_gpu, use_dynamic_bsz)",
    "critic.forward_max_token_len_per_gpu": "the critic's value pass here batches as its update "
    "(ppo_max_token_len_per_gpu)",
    "critic.model.use_shm": "models load from model.path where it is",
    "critic.model.enable_activation_offload": "activations stay on the device (enable_gradient_checkpointing is the "
    "memory setting for them here)",
    # reward model
    "reward_model.strategy": "the reward model runs plain PyTorch inference in one process, not an FSDP engine",
    "reward_model.use_dynamic_bsz": "the reward model batches by micro_batch_size_per_gpu",
    "reward_model.forward_max_token_len_per_gpu": "the reward model batches by micro_batch_size_per_gpu",
    "reward_model.launch_reward_fn_async": "rule and custom rewards already run in their own processes "
    "(reward_model.num_workers)",
    "reward_model.model.use_shm": "models load from their path where it is",
    "reward_model.model.use_remove_padding": "the reward model runs plain PyTorch inference",
    "reward_model.model.use_fused_kernels": "the reward model runs plain PyTorch inference",
    "reward_model.model.fsdp_config": "the reward model runs plain PyTorch inference in one process, not sharded",
    "reward_model.sandbox_fusion.max_concurrent": "used only with sandbox_fusion.url, which is refused",
    "reward_model.sandbox_fusion.memory_limit_mb": "used only with sandbox_fusion.url, which is refused",
    # algorithm
    # trainer
    "trainer.balance_batch": "samples are split over the ranks in order here; the update is the same, only the "
    "ranks' loads differ",
    "trainer.esi_redundant_time": "no checkpoint is planned around a cloud instance's expiry; trainer.save_freq "
    "decides when checkpoints are written",
    "trainer.ray_wait_register_center_timeout": "there is no register center: Ray Train starts the workers",
    # verl deletes only the local copies of a checkpoint it fetched from HDFS (its is_non_local paths), never a
    # checkpoint under default_local_dir; nothing is fetched here, so every checkpoint is such a local one
    "trainer.del_local_ckpt_after_load": "verl deletes only the copies it fetched from HDFS; runs resume from "
    "trainer.default_local_dir here (trainer.default_hdfs_dir only receives copies), and local checkpoints are kept "
    "after resuming, as verl keeps them",
}

# verl keys accepted at verl's default (the schema's default) and refused at any other value, and why
DEFAULT_ONLY = {
    "reward_model.ulysses_sequence_parallel_size": "the reward model runs without sequence parallelism here",
    "data.tokenizer": "the tokenizer is actor_rollout_ref.model.tokenizer_path's, or model.path's",
    "data.custom_cls.path": "custom dataset classes are not supported; rows come from parquet / JSONL / "
    "save_to_disk files",
    "data.custom_cls.name": "custom dataset classes are not supported",
    "data.datagen.path": "dynamic data generation is not supported",
    "data.datagen.name": "dynamic data generation is not supported",
    "actor_rollout_ref.model.hf_config_path": "the model's config is read from model.path",
    "actor_rollout_ref.hybrid_engine": "verl supports only true; the layout here is trainer.placement",
    "actor_rollout_ref.ref.model": "the reference is the actor's initial model (actor_rollout_ref.model.path)",
    **_each(_CHECKPOINT, "async_save", "checkpoints are written before the step returns here"),
    **_each(_FSDP, "wrap_policy", "FSDP2 here shards each decoder layer and the rest of the model as one unit"),
    **_each(
        _FSDP,
        "offload_policy",
        "FSDP2's CPUOffloadPolicy is not used; param_offload and optimizer_offload are the offload settings here",
    ),
    "actor_rollout_ref.rollout.data_parallel_size": "data-parallel rollout here is actor_rollout_ref.rollout.replicas "
    "(Serve replicas), not vLLM's data parallelism",
    "actor_rollout_ref.rollout.expert_parallel_size": "vLLM's expert parallelism is not set up here",
    "actor_rollout_ref.rollout.over_sample_rate": "over-sampling (dropping the slowest rollouts) is not supported",
    "actor_rollout_ref.rollout.skip_rollout": "dumping and replaying rollouts is not supported",
    "actor_rollout_ref.rollout.agent.agent_loop_config_path": "custom agent loop classes are not loaded here; "
    "multi-turn tool use and interactions are actor_rollout_ref.rollout.multi_turn (docs/agents.md)",
    "actor_rollout_ref.rollout.agent.custom_async_server.path": "custom rollout servers are not supported",
    "actor_rollout_ref.rollout.agent.custom_async_server.name": "custom rollout servers are not supported",
    "reward_model.enable_resource_pool": "a separate GPU pool for the reward model is not supported; it runs beside "
    "the trainer",
    "reward_model.n_gpus_per_node": "used only with enable_resource_pool, which is not supported",
    "reward_model.nnodes": "used only with enable_resource_pool, which is not supported",
    "reward_model.sandbox_fusion.url": "sandboxed code-execution rewards are not supported: the code data_sources "
    "(codecontests, apps, codeforces, taco) run their tests in a local process, as verl does without a sandbox; a "
    "custom reward function (custom_reward_function.path) can call a sandbox itself",
}
MULTI_TURN = "actor_rollout_ref.rollout.multi_turn"  # read by app/agents; checked by app.config.multi_turn
NO_EFFECT[f"{MULTI_TURN}.use_inference_chat_template"] = (
    "each turn's new messages are templated with the model's chat template; the prompt as the data pipeline wrote it"
)
NO_EFFECT[f"{MULTI_TURN}.tokenization_sanity_check_mode"] = (
    "the sampled tokens are trained on as sampled, never re-tokenized from text, so there is nothing to check"
)

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
    rm = cfg.reward_model
    if rm.micro_batch_size_per_gpu is None:
        rm.micro_batch_size_per_gpu = RM_MICRO_BATCH_PER_GPU
    _map_dapo_reward_kwargs(cfg)
    _map_lr_scheduler_type(cfg)
    _map_clip_grad(cfg)
    _map_tis_imp_ratio_cap(cfg)
    _map_rollout_name(cfg)
    _map_resume_path(cfg)
    _map_checkpoint_limits(cfg)
    _map_ray_init_address(cfg)


def _map_ray_init_address(cfg: TrainerRunConfig) -> None:
    """verl joins a cluster given as `ray_kwargs.ray_init.address`; here that is trainer.ray_address's job. `local` (a
    cluster the run starts) is what an unset trainer.ray_address does already."""
    ray_init = cfg.ray_kwargs.ray_init
    address = ray_init.pop("address", None)
    if address in (None, "local"):
        return
    given = cfg.trainer.ray_address
    if given is not None and given != address:
        raise ConfigError(
            f"ray_kwargs.ray_init.address={address!r} and trainer.ray_address={given!r} name two clusters; give one"
        )
    cfg.trainer.ray_address = str(address)


def _map_rollout_name(cfg: TrainerRunConfig) -> None:
    """verl's SGLang rollout: the sampling keys mean the same to vLLM, which serves it here."""
    rollout = cfg.actor_rollout_ref.rollout
    if rollout.name == "sglang":
        log.warning(
            "actor_rollout_ref.rollout.name=sglang: vLLM is the rollout engine here and serves this run with "
            "the same sampling settings (samples differ from SGLang's only by the engines' numerics); set "
            "actor_rollout_ref.rollout.name=vllm to silence this"
        )
        rollout.name = "vllm"


def _map_resume_path(cfg: TrainerRunConfig) -> None:
    """verl: resume_mode=resume_path resumes from trainer.resume_from_path; here resume_mode takes the path itself."""
    t = cfg.trainer
    if t.resume_mode == "resume_path":
        if not t.resume_from_path:
            raise ConfigError("trainer.resume_mode=resume_path needs trainer.resume_from_path (the checkpoint folder)")
        t.resume_mode = t.resume_from_path
    elif t.resume_from_path:
        log.info(
            "trainer.resume_from_path=%r has no effect with trainer.resume_mode=%r: as in verl, it is read only "
            "with resume_mode=resume_path",
            t.resume_from_path,
            t.resume_mode,
        )


def _map_checkpoint_limits(cfg: TrainerRunConfig) -> None:
    """verl limits actor and critic checkpoints apart; a checkpoint here holds both, under one limit."""
    t = cfg.trainer
    given = {
        f"trainer.{k}": getattr(t, k)
        for k in ("max_actor_ckpt_to_keep", "max_critic_ckpt_to_keep", "max_ckpt_to_keep")
        if getattr(t, k) is not None
    }
    if len(set(given.values())) > 1:
        raise ConfigError(
            f"{' and '.join(f'{k}={v}' for k, v in given.items())}: a checkpoint here holds the actor "
            "and the critic together, under one limit; give one value (trainer.max_ckpt_to_keep)"
        )
    if given:
        t.max_ckpt_to_keep = next(iter(given.values()))


def _map_lr_scheduler_type(cfg: TrainerRunConfig) -> None:
    """Newer verl names the schedule after warm-up `optim.lr_scheduler_type`; older, `optim.warmup_style`."""
    for path, optim in _sections_of_type(cfg, OptimConfig):
        new, old = optim.lr_scheduler_type, optim.warmup_style
        if new is None:
            continue
        if old != "constant" and old != new:  # constant is the default: set only when the user named it
            raise ConfigError(
                f"{path}.lr_scheduler_type={new!r} and {path}.warmup_style={old!r} name the same "
                "setting; set only one of them"
            )
        optim.warmup_style = new


def _map_clip_grad(cfg: TrainerRunConfig) -> None:
    """Newer verl clips at the role's `optim.clip_grad`; older verl (and the engine here) at the role's `grad_clip`."""
    default = OptimConfig().clip_grad
    for path, role in (("actor_rollout_ref.actor", cfg.actor_rollout_ref.actor), ("critic", cfg.critic)):
        new, old = role.optim.clip_grad, role.grad_clip
        if new == default:
            continue
        if old != default and old != new:  # the default is what a user who did not set grad_clip has
            raise ConfigError(
                f"{path}.optim.clip_grad={new} and {path}.grad_clip={old} name the same setting; set only one of them"
            )
        role.grad_clip = new


def _map_tis_imp_ratio_cap(cfg: TrainerRunConfig) -> None:
    """verl 0.5's truncated importance sampling multiplies each token's clipped loss by min(pi_old / pi_sampler, cap);
    verl then replaced it with algorithm.rollout_correction, whose token level is that weight (the losses it allows
    are linear in the advantage). A cap <= 0 is verl's off."""
    cap = cfg.actor_rollout_ref.actor.tis_imp_ratio_cap
    if not cap > 0:
        return
    rc = cfg.algorithm.rollout_correction
    if rc.rollout_is is not None and (rc.rollout_is, rc.rollout_is_threshold) != ("token", cap):
        raise ConfigError(
            f"actor_rollout_ref.actor.tis_imp_ratio_cap={cap} is algorithm.rollout_correction.rollout_is=token with "
            f"rollout_is_threshold={cap}, but rollout_correction sets rollout_is={rc.rollout_is} with "
            f"rollout_is_threshold={rc.rollout_is_threshold}; set only one of them"
        )
    if rc.bypass_mode:
        # the sampler's log-probs are then the PPO ratio's old policy, so every weight would be 1
        raise ConfigError(
            f"actor_rollout_ref.actor.tis_imp_ratio_cap={cap} weights each token by pi_old / pi_sampler, which "
            "algorithm.rollout_correction.bypass_mode=true makes 1 (pi_old is the sampler's); drop one of them"
        )
    rc.rollout_is, rc.rollout_is_threshold = "token", cap


def _section(cfg: Any, dotted: str) -> Any:
    for name in dotted.split("."):
        cfg = getattr(cfg, name)
    return cfg


def _map_global_micro_batches(cfg: TrainerRunConfig) -> None:
    """verl divides the old global sizes by the data-parallel size: the number of ranks (trainer.num_workers, derived
    from the GPU count on GPUs) over the role's ulysses_sequence_parallel_size."""
    for path, old, new in _GLOBAL_MICRO_BATCHES:
        section = _section(cfg, path)
        total = getattr(section, old)
        if total is None:
            continue
        # the log-prob pass of the rollout section runs on the actor's engine
        role = "actor_rollout_ref.actor" if path == "actor_rollout_ref.rollout" else path
        ranks = sp_ranks_named(cfg, role)
        dp = data_parallel_size(cfg, role)
        if total <= 0 or total % dp:
            raise ConfigError(
                f"{path}.{old}={total} is verl's older global micro-batch size, which is split evenly over the ranks, "
                f"and it does not split over {ranks}; set {path}.{new} (per rank) instead"
            )
        per_rank = total // dp
        current = getattr(section, new)
        if current is not None and current != per_rank:
            raise ConfigError(
                f"{path}.{old}={total} means {per_rank} per rank over {ranks}, but "
                f"{path}.{new}={current}: they name the same setting; set only one of them"
            )
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
            f"reward_manager is {rm.reward_manager!r}"
        )
    unknown = sorted(set(kwargs) - set(_DAPO_REWARD_KWARGS))
    if unknown:
        raise ConfigError(
            f"unknown key {', '.join(f'reward_model.reward_kwargs.{k}' for k in unknown)} for "
            f"reward_model.reward_manager=dapo; known keys: {', '.join(_DAPO_REWARD_KWARGS)}"
        )
    if "overlong_buffer_cfg" in kwargs:
        key = "reward_model.reward_kwargs.overlong_buffer_cfg"
        given = build_typed(OverlongBufferConfig, kwargs["overlong_buffer_cfg"], key)
        if rm.overlong_buffer not in (OverlongBufferConfig(), given):
            raise ConfigError(
                f"{key} ({given}) and reward_model.overlong_buffer "
                f"({rm.overlong_buffer}) are the same setting (verl's DAPO reward manager's spelling and this "
                "framework's) and disagree; set one of them"
            )
        rm.overlong_buffer = given
    if kwargs.get("max_resp_len") is not None:
        budget = cfg.actor_rollout_ref.rollout.response_length
        max_resp_len = coerce(int, kwargs["max_resp_len"], "reward_model.reward_kwargs.max_resp_len")
        if max_resp_len != budget:
            raise ConfigError(
                f"reward_model.reward_kwargs.max_resp_len={max_resp_len}: the overlong buffer here ends at the "
                f"response budget, actor_rollout_ref.rollout.response_length={budget}; give the same value or drop it"
            )


def check_unsupported(cfg: TrainerRunConfig) -> None:
    """Refuse verl settings of features this framework does not have (at verl's defaults they are accepted); say
    which set keys have no effect here."""
    default = TrainerRunConfig()
    for key, why in NO_EFFECT.items():
        for where, value in _differences(_section(cfg, key), _section(default, key), key):
            log.info("%s=%r has no effect here: %s", where, value, why)
    for key, why in DEFAULT_ONLY.items():
        value, verl_default = _section(cfg, key), _section(default, key)
        if value != verl_default:
            raise ConfigError(f"{key}={value!r}: {why}; only verl's default {verl_default!r} is accepted")
    _check_role_copies(cfg)
    check_multi_turn(cfg)
    for path, checkpoint in _sections_of_type(cfg, CheckpointConfig):
        _check_checkpoint_contents(path, checkpoint)
    if cfg.reward_model.reward_manager == "batch" and not cfg.custom_reward_function.path:
        raise ConfigError(
            "reward_model.reward_manager='batch' calls a custom compute_score once with lists of all responses; the "
            "built-in rules score one response at a time: set custom_reward_function.path to a batched function, or "
            "use reward_manager=naive"
        )
    _check_log_val_generations(cfg)
    rollout = cfg.actor_rollout_ref.rollout
    if rollout.max_model_len is not None and rollout.max_model_len < rollout.prompt_length + rollout.response_length:
        raise ConfigError(
            f"actor_rollout_ref.rollout.max_model_len={rollout.max_model_len} is shorter than a prompt and its "
            f"response (rollout.prompt_length + response_length = {rollout.prompt_length + rollout.response_length})"
        )


def _check_checkpoint_contents(path: str, checkpoint: CheckpointConfig) -> None:
    """model, optimizer and extra (what a resume needs), in any order; the actor's checkpoints may add hf_model."""
    always = sorted(CheckpointConfig().save_contents)
    extra = {CHECKPOINT_HF} if path.startswith("actor_rollout_ref.") else set()
    for name in ("save_contents", "load_contents"):
        value = getattr(checkpoint, name)
        if sorted(set(value) - extra) != always or len(set(value)) != len(value):
            also = " (hf_model adds a Hugging Face copy of the policy)" if extra else ""
            raise ConfigError(
                f"{path}.{name}={value!r}: checkpoints here always hold the model, the optimizer and the extra "
                f"state (LR schedule, RNG, data position), which resuming needs; give all three{also}, or drop the "
                "key. The run exports hf_model/ at the end in any case"
            )


def _differences(value: Any, default: Any, key: str) -> Iterator[tuple[str, Any]]:
    """(dotted key, value) of each leaf where `value` differs from `default` (one pair for a non-mapping)."""
    if isinstance(value, dict) and isinstance(default, dict):
        for name in sorted(set(value) | set(default), key=str):
            yield from _differences(value.get(name), default.get(name), f"{key}.{name}")
    elif value != default:
        yield key, value


def _same_engine(a: str, b: str) -> bool:
    """fsdp and fsdp2 both run FSDP2 here."""
    return {a, b} <= {"fsdp", "fsdp2"} or a == b


def _check_role_copies(cfg: TrainerRunConfig) -> None:
    """verl keys that repeat a setting read elsewhere: accepted when they agree with it (verl's defaults are
    interpolations of it), refused naming both keys when they do not."""
    arr, critic = cfg.actor_rollout_ref, cfg.critic
    if arr.ref.strategy is not None and not _same_engine(arr.ref.strategy, arr.actor.strategy):
        raise ConfigError(
            f"actor_rollout_ref.ref.strategy={arr.ref.strategy!r}: the reference runs on the actor's engine here "
            f"(actor_rollout_ref.actor.strategy={arr.actor.strategy!r}); drop the key or give the actor's value"
        )
    tokenizer = critic.model.tokenizer_path
    if tokenizer is not None and tokenizer not in (arr.model.path, arr.model.tokenizer_folder, critic.model.path):
        policy_key = "tokenizer_path" if arr.model.tokenizer_path else "path"
        raise ConfigError(
            f"critic.model.tokenizer_path={tokenizer!r}: the critic reads the policy's tokens here, so its tokenizer "
            f"is the policy's (actor_rollout_ref.model.{policy_key}={arr.model.tokenizer_folder!r}); drop the key or "
            "give that path"
        )
    if critic.enable is not None:
        from algos.catalog import estimator_traits

        needs = estimator_traits(cfg.algorithm.adv_estimator).needs_critic
        if critic.enable != needs:
            raise ConfigError(
                f"critic.enable={critic.enable}: algorithm.adv_estimator={cfg.algorithm.adv_estimator!r} "
                f"{'needs' if needs else 'does not use'} a critic, which decides whether one runs here; drop the key "
                f"or set it to {needs}"
            )


def _check_log_val_generations(cfg: TrainerRunConfig) -> None:
    if cfg.trainer.log_val_generations < 0:
        raise ConfigError(f"trainer.log_val_generations={cfg.trainer.log_val_generations} must be >= 0")


def _refuse_non_default(section: Any, path: str, why: str) -> None:
    default = type(section)()
    for f in dataclasses.fields(section):
        value = getattr(section, f.name)
        if value != getattr(default, f.name):
            raise ConfigError(
                f"{path}.{f.name}={value!r}: {why}; only verl's default {getattr(default, f.name)!r} is accepted"
            )


def _walk(node: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted path, section) for every dataclass section of the config tree, the root first."""
    yield path, node
    for f in dataclasses.fields(node):
        child = getattr(node, f.name)
        if dataclasses.is_dataclass(child):
            yield from _walk(child, f"{path}.{f.name}" if path else f.name)


def _sections_of_type(cfg: TrainerRunConfig, cls: type) -> Iterator[tuple[str, Any]]:
    return ((path, node) for path, node in _walk(cfg) if isinstance(node, cls))
