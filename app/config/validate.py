"""Cross-key checks of the typed config, run before Ray starts. Each message names the keys and their values."""

from __future__ import annotations

import logging

from app.config.async_check import check_async_training
from app.config.deepspeed_check import check_deepspeed
from app.config.engine_kwargs_check import check_vllm_engine_kwargs
from app.config.errors import ConfigError
from app.config.layout import derive_layout
from app.config.placement import check_placement
from app.config.ranks import derive_ranks, ranks_named, shards_over_all_ranks
from app.config.schema import TrainerRunConfig
from app.config.sequence_parallel_check import check_sequence_parallel, data_parallel_size
from app.config.verl_compat import apply_verl_names, check_unsupported
from serve.http_access import http_api_key

log = logging.getLogger(__name__)


def validate(cfg: TrainerRunConfig) -> None:
    """Fill derived defaults in place and raise ConfigError on the first inconsistency."""
    _fill_derived(cfg)
    _check_required(cfg)
    _check_batch_sizes(cfg)
    _check_algorithm(cfg)
    _check_ranges(cfg)
    _check_overlong_buffer(cfg)
    _check_fsdp_sizes(cfg)
    _check_reference_sync(cfg)
    check_placement(cfg)
    check_unsupported(cfg)
    check_vllm_engine_kwargs(cfg)
    check_deepspeed(cfg, needs_critic=_estimator(cfg).needs_critic)
    check_async_training(cfg, needs_greedy_baseline=_estimator(cfg).needs_greedy_baseline)


def _fill_derived(cfg: TrainerRunConfig) -> None:
    derive_ranks(cfg.trainer)
    derive_layout(cfg)
    _resolve_auto_precision(cfg)
    rollout = cfg.actor_rollout_ref.rollout
    if rollout.response_length is None:
        rollout.response_length = cfg.data.max_response_length
    if rollout.prompt_length is None:
        rollout.prompt_length = cfg.data.max_prompt_length
    actor = cfg.actor_rollout_ref.actor
    if actor.loss_scale_factor is None:
        actor.loss_scale_factor = float(cfg.data.max_response_length)
    if cfg.data.gen_batch_size is None:
        cfg.data.gen_batch_size = cfg.data.train_batch_size
    critic = cfg.critic
    if critic.model.path is None:
        critic.model.path = cfg.actor_rollout_ref.model.path
    if critic.ppo_mini_batch_size is None:
        critic.ppo_mini_batch_size = cfg.actor_rollout_ref.actor.ppo_mini_batch_size
    if critic.ppo_epochs is None:
        critic.ppo_epochs = cfg.actor_rollout_ref.actor.ppo_epochs
    check_sequence_parallel(cfg)  # before the global micro-batch sizes are divided by the data-parallel size
    apply_verl_names(cfg)


def _resolve_auto_precision(cfg: TrainerRunConfig) -> None:
    """`auto` compute dtypes become bf16 or fp32 for this machine, once, before anything reads them."""
    from app.engine.precision import cpu_has_native_bf16, resolve_auto_dtype

    arr = cfg.actor_rollout_ref
    sections = (arr.actor.fsdp_config, arr.ref.fsdp_config, cfg.critic.model.fsdp_config)
    if arr.rollout.dtype != "auto" and all(s.mixed_precision.param_dtype != "auto" for s in sections):
        return
    short, long = resolve_auto_dtype(cfg.trainer.device == "cuda", cpu_has_native_bf16())
    for section in sections:
        if section.mixed_precision.param_dtype == "auto":
            section.mixed_precision.param_dtype = short
    if arr.rollout.dtype == "auto":
        arr.rollout.dtype = long


def _check_required(cfg: TrainerRunConfig) -> None:
    if not cfg.data.train_files:
        raise ConfigError("data.train_files is empty: give a parquet/JSONL file, a list of them, or a dataset folder")
    if not cfg.actor_rollout_ref.model.path:
        raise ConfigError(
            "actor_rollout_ref.model.path is empty: give a local Hugging Face folder "
            "(python -m app.import_model --source ... --output DIR makes one)"
        )
    if cfg.reward_model.enable and not cfg.reward_model.model.path:
        raise ConfigError("reward_model.enable=true needs reward_model.model.path")
    sampler = cfg.data.sampler
    if sampler.class_path and not sampler.class_name:
        raise ConfigError(
            f"data.sampler.class_path={sampler.class_path} needs data.sampler.class_name, the class in it"
        )
    if not sampler.class_path and (sampler.class_name or sampler.options):
        given = ["class_name"] * bool(sampler.class_name) + sorted(sampler.options)
        raise ConfigError(
            f"{', '.join('data.sampler.' + k for k in given)} given without data.sampler.class_path: a custom sampler "
            "is a class in a .py file (class_path) that reads them; without one, data.shuffle and data.seed order the "
            "prompts"
        )
    if cfg.trainer.val_only:
        if not cfg.data.val_files:
            raise ConfigError("trainer.val_only=true validates and stops, which needs data.val_files")
        if not cfg.trainer.val_before_train:
            # verl reads val_only only inside its validation before training, so there the pair trains
            raise ConfigError(
                "trainer.val_only=true and trainer.val_before_train=false: a validation-only run validates "
                "before it would train, then stops; drop one of them"
            )


def _check_batch_sizes(cfg: TrainerRunConfig) -> None:
    data, actor = cfg.data, cfg.actor_rollout_ref.actor
    n = cfg.actor_rollout_ref.rollout.n
    workers = cfg.trainer.num_workers
    _positive("data.train_batch_size", data.train_batch_size)
    _positive("actor_rollout_ref.rollout.n", n)
    _positive("actor_rollout_ref.actor.ppo_mini_batch_size", actor.ppo_mini_batch_size)
    ranks = ranks_named(cfg.trainer)
    _check_mini_batches(
        data.train_batch_size, "actor_rollout_ref.actor", actor.ppo_mini_batch_size, actor.use_dynamic_bsz
    )
    _positive("data.gen_batch_size", data.gen_batch_size)
    if data.gen_batch_size != data.train_batch_size and not cfg.algorithm.filter_groups.enable:
        raise ConfigError(
            f"data.gen_batch_size={data.gen_batch_size} differs from data.train_batch_size={data.train_batch_size}, "
            "which only algorithm.filter_groups.enable=true uses (it generates rounds of gen_batch_size prompts until "
            "train_batch_size informative ones are found); drop data.gen_batch_size or enable the filter"
        )
    for key, size in (("data.train_batch_size", data.train_batch_size), ("data.gen_batch_size", data.gen_batch_size)):
        if size % workers:
            raise ConfigError(f"{key}={size} prompts do not split evenly over {ranks}")
    samples_per_minibatch = actor.ppo_mini_batch_size * n
    if samples_per_minibatch % workers:
        raise ConfigError(
            f"actor_rollout_ref.actor.ppo_mini_batch_size={actor.ppo_mini_batch_size} × "
            f"actor_rollout_ref.rollout.n={n} = {samples_per_minibatch} samples per mini-batch "
            f"do not split evenly over {ranks}"
        )
    micro = actor.ppo_micro_batch_size_per_gpu
    if micro is not None and not actor.use_dynamic_bsz:
        _positive("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", micro)
        # with sequence parallelism a micro-batch is per group of S ranks, and there are ranks / S groups (verl's)
        dp = data_parallel_size(cfg, "actor_rollout_ref.actor")
        per_replica = samples_per_minibatch // dp
        if per_replica % micro:
            where = (
                f"each worker gets {per_replica} samples per mini-batch "
                if dp == workers
                else (
                    f"each group of actor_rollout_ref.actor.ulysses_sequence_parallel_size={workers // dp} ranks (data "
                    f"parallel size {dp}) gets {per_replica} samples per mini-batch "
                )
            )
            raise ConfigError(
                f"{where}(ppo_mini_batch_size={actor.ppo_mini_batch_size} × rollout.n={n} / "
                f"{ranks if dp == workers else dp}), "
                f"which actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro} does not divide"
            )
    if _estimator(cfg).needs_critic:
        critic = cfg.critic
        _check_mini_batches(data.train_batch_size, "critic", critic.ppo_mini_batch_size, critic.use_dynamic_bsz)
    max_tokens = data.max_prompt_length + cfg.actor_rollout_ref.rollout.response_length
    rollout, ref = cfg.actor_rollout_ref.rollout, cfg.actor_rollout_ref.ref
    for key, dynamic, budget in (
        ("actor_rollout_ref.actor.ppo_max_token_len_per_gpu", actor.use_dynamic_bsz, actor.ppo_max_token_len_per_gpu),
        (
            "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu",
            rollout.log_prob_use_dynamic_bsz,
            rollout.log_prob_max_token_len_per_gpu,
        ),
        (
            "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu",
            ref.log_prob_use_dynamic_bsz,
            ref.log_prob_max_token_len_per_gpu,
        ),
    ):
        if dynamic and budget < max_tokens:
            raise ConfigError(
                f"{key}={budget} is smaller than one sequence "
                f"(data.max_prompt_length + rollout.response_length = {max_tokens})"
            )


def _check_mini_batches(train_batch_size: int, role: str, mini_batch_size: int, use_dynamic_bsz: bool) -> None:
    """verl's rule: a mini-batch no larger than the batch (with a token budget, a larger one is the whole batch); one
    that does not divide it leaves a smaller last mini-batch, its own optimiser step, as verl's split does."""
    if mini_batch_size > train_batch_size and not use_dynamic_bsz:
        raise ConfigError(
            f"{role}.ppo_mini_batch_size={mini_batch_size} is larger than data.train_batch_size={train_batch_size} "
            "(both count prompts; a mini-batch is the prompts of one optimiser step)"
        )
    steps, rest = divmod(train_batch_size, mini_batch_size)
    if rest and steps:
        log.info(
            "data.train_batch_size=%d is not a multiple of %s.ppo_mini_batch_size=%d: each epoch of a step makes %d "
            "optimiser steps, the last on the remaining %d prompts (as in verl)",
            train_batch_size,
            role,
            mini_batch_size,
            steps + 1,
            rest,
        )


def _check_algorithm(cfg: TrainerRunConfig) -> None:
    from algos.catalog import ADV_ESTIMATORS, POLICY_LOSSES
    from algos.kl_controller import make_kl_controller

    algo, actor = cfg.algorithm, cfg.actor_rollout_ref.actor
    for registry, key, name in (
        (ADV_ESTIMATORS, "algorithm.adv_estimator", algo.adv_estimator),
        (POLICY_LOSSES, "actor_rollout_ref.actor.policy_loss.loss_mode", actor.policy_loss.loss_mode),
    ):
        try:
            registry.check(name)
        except (ValueError, ImportError, AttributeError) as exc:
            raise ConfigError(f"{key}={name!r}: {exc}") from exc
    n = cfg.actor_rollout_ref.rollout.n
    if _estimator(cfg).needs_groups and n == 1:  # verl allows it
        log.warning(
            "algorithm.adv_estimator=%r compares the samples of one prompt, but actor_rollout_ref.rollout.n=1: "
            "every group is a single sample with no baseline, so (as in verl) its advantage is its own score "
            "(group mean 0, std 1), not a comparison; set rollout.n >= 2 for group-relative advantages",
            algo.adv_estimator,
        )
    _check_filter_groups(cfg)
    _check_rollout_correction(cfg)
    _check_sum_pi_squared(cfg)
    from algos.catalog import LOG_PROB_KL_KINDS as KL_KINDS  # `full` needs logits, which the loss never keeps

    if actor.use_kl_loss and actor.kl_loss_type not in KL_KINDS:
        raise ConfigError(
            f"actor_rollout_ref.actor.kl_loss_type={actor.kl_loss_type!r} is not one of {', '.join(sorted(KL_KINDS))}"
        )
    if algo.use_kl_in_reward and algo.kl_penalty not in KL_KINDS:
        raise ConfigError(f"algorithm.kl_penalty={algo.kl_penalty!r} is not one of {', '.join(sorted(KL_KINDS))}")
    try:
        make_kl_controller(algo.kl_ctrl.type, algo.kl_ctrl.kl_coef, algo.kl_ctrl.target_kl, algo.kl_ctrl.horizon)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    mode = cfg.trainer.resume_mode
    if mode not in ("auto", "disable") and not mode:
        raise ConfigError("trainer.resume_mode must be auto, disable or a checkpoint path")


def _check_sum_pi_squared(cfg: TrainerRunConfig) -> None:
    """An estimator that reads each token's sum of squared probabilities needs the pass that computes it."""
    key = "actor_rollout_ref.actor.calculate_sum_pi_squared"
    wanted = cfg.actor_rollout_ref.actor.calculate_sum_pi_squared
    if _estimator(cfg).needs_sum_pi_squared and not wanted:
        raise ConfigError(
            f"algorithm.adv_estimator={cfg.algorithm.adv_estimator} weighs tokens by the old policy's sum of squared "
            f"probabilities, which the log-prob pass computes with {key}=true (as in verl); set it"
        )
    if wanted and cfg.algorithm.rollout_correction.bypass_mode:
        raise ConfigError(
            f"{key}=true with algorithm.rollout_correction.bypass_mode=true: bypass mode skips the old-policy "
            "log-prob pass, which is where the sum of squared probabilities is computed; drop one of them"
        )


def _estimator(cfg: TrainerRunConfig):
    """The traits of algorithm.adv_estimator (what it needs: a critic, groups, a greedy baseline)."""
    from algos.catalog import estimator_traits

    try:
        return estimator_traits(cfg.algorithm.adv_estimator)
    except (ValueError, ImportError, AttributeError) as exc:
        raise ConfigError(f"algorithm.adv_estimator={cfg.algorithm.adv_estimator!r}: {exc}") from exc


def _check_filter_groups(cfg: TrainerRunConfig) -> None:
    fg, algo = cfg.algorithm.filter_groups, cfg.algorithm
    if not fg.enable:
        return
    if not _estimator(cfg).needs_groups:
        from algos.catalog import ADV_ESTIMATORS, estimator_traits

        grouped = [name for name in ADV_ESTIMATORS.names() if estimator_traits(name).needs_groups]
        raise ConfigError(
            f"algorithm.filter_groups.enable=true drops groups whose samples score alike, which only matters for "
            f"estimators that compare the samples of one prompt ({', '.join(grouped)}); "
            f"algorithm.adv_estimator={algo.adv_estimator!r} is not one of them"
        )
    n = cfg.actor_rollout_ref.rollout.n
    if n == 1:
        raise ConfigError(
            "algorithm.filter_groups.enable=true drops groups whose samples all score alike, and with "
            "actor_rollout_ref.rollout.n=1 every group is one sample, so every group would be dropped: "
            "rollout.n must be at least 2 (got 1)"
        )
    if fg.max_num_gen_batches < 0:
        raise ConfigError(
            f"algorithm.filter_groups.max_num_gen_batches={fg.max_num_gen_batches} must be >= 0 (0: no limit)"
        )
    data = cfg.data
    if fg.max_num_gen_batches and data.gen_batch_size * fg.max_num_gen_batches < data.train_batch_size:
        raise ConfigError(
            f"algorithm.filter_groups.max_num_gen_batches={fg.max_num_gen_batches} rounds of "
            f"data.gen_batch_size={data.gen_batch_size} prompts cannot fill "
            f"data.train_batch_size={data.train_batch_size}"
        )
    if fg.metric == "seq_final_reward" and algo.use_kl_in_reward:
        raise ConfigError(
            "algorithm.filter_groups.metric=seq_final_reward with algorithm.use_kl_in_reward=true: groups are filtered "
            "before the reference pass that the in-reward KL needs; use metric=seq_reward or score"
        )


def _check_rollout_correction(cfg: TrainerRunConfig) -> None:
    from algos.catalog import policy_loss_traits

    rollout, rc = cfg.actor_rollout_ref.rollout, cfg.algorithm.rollout_correction
    uses = [
        f"{key}={value}"
        for key, value, on in (
            ("bypass_mode", "true", rc.bypass_mode),
            ("rollout_is", rc.rollout_is, rc.rollout_is is not None),
        )
        if on
    ]
    if uses and (rollout.top_p < 1.0 or rollout.top_k > 0):
        raise ConfigError(
            f"algorithm.rollout_correction.{' and '.join(uses)} reads the sampler's log-probs, but with "
            f"actor_rollout_ref.rollout.top_p={rollout.top_p} / top_k={rollout.top_k} those are of the truncated "
            "distribution, not of the policy the actor computes; sample with top_p=1.0 and top_k=-1, or set "
            "bypass_mode=false and rollout_is=null"
        )
    if rc.rollout_is is None:
        return
    if not rc.rollout_is_threshold > 0:
        raise ConfigError(f"algorithm.rollout_correction.rollout_is_threshold={rc.rollout_is_threshold} must be > 0")
    loss_mode = cfg.actor_rollout_ref.actor.policy_loss.loss_mode
    if not policy_loss_traits(loss_mode).linear_in_advantage:
        raise ConfigError(
            f"algorithm.rollout_correction.rollout_is={rc.rollout_is} weights each token's loss through its advantage, "
            f"which actor_rollout_ref.actor.policy_loss.loss_mode={loss_mode!r} is not registered as linear in "
            "(algos.catalog.PolicyLossTraits); use vanilla, gspo, cispo or reinforce, or set rollout_is=null"
        )


def _check_fsdp_sizes(cfg: TrainerRunConfig) -> None:
    """fsdp_size: -1 or at least the rank count shards one copy over every rank (verl's meaning); a divisor of the
    rank count below it is hybrid sharding (app.engine.fsdp_engine.sharding_mesh)."""
    ranks, arr = cfg.trainer.num_workers, cfg.actor_rollout_ref
    for path, fsdp in (
        ("actor_rollout_ref.actor.fsdp_config", arr.actor.fsdp_config),
        ("actor_rollout_ref.ref.fsdp_config", arr.ref.fsdp_config),
        ("critic.model.fsdp_config", cfg.critic.model.fsdp_config),
    ):
        size = fsdp.fsdp_size
        if size > ranks:
            log.info(
                "%s.fsdp_size=%d is more than the %d ranks: as in verl, one copy is sharded over all", path, size, ranks
            )
        if shards_over_all_ranks(size, ranks):
            continue
        if size < 1 or ranks % size:
            raise ConfigError(
                f"{path}.fsdp_size={size}: give -1 (one copy sharded over all {ranks_named(cfg.trainer)}) or a "
                f"divisor of {ranks} (hybrid sharding: each group of that many ranks shards a copy)"
            )


def _check_reference_sync(cfg: TrainerRunConfig) -> None:
    """A reference that moves toward the actor (ref.sync_ref_model) needs a reference of its own weights, laid out as
    the actor's, so the two blend shard by shard (app.roles.reference)."""
    arr = cfg.actor_rollout_ref
    ref, key = arr.ref, "actor_rollout_ref.ref.sync_ref_model=true"
    if not ref.sync_ref_model:
        return
    if not (arr.actor.use_kl_loss or cfg.algorithm.use_kl_in_reward):
        raise ConfigError(
            f"{key}, but this run has no reference model (actor_rollout_ref.actor.use_kl_loss and "
            "algorithm.use_kl_in_reward are both false): enable a KL term or drop sync_ref_model"
        )
    if arr.model.lora_rank > 0:
        raise ConfigError(
            f"{key} with LoRA (actor_rollout_ref.model.lora_rank={arr.model.lora_rank}): the reference is then the "
            "actor's base model with the adapter off, the same weights, which cannot move toward the actor; "
            "a synced reference needs full fine-tuning (lora_rank=0)"
        )
    if ref.ref_model_sync_steps < 1:
        raise ConfigError(f"actor_rollout_ref.ref.ref_model_sync_steps={ref.ref_model_sync_steps} must be >= 1")
    if not 0 < ref.ref_model_mixup_alpha <= 1:
        raise ConfigError(
            f"actor_rollout_ref.ref.ref_model_mixup_alpha={ref.ref_model_mixup_alpha} must be in (0, 1] (the "
            "actor's share of the new reference)"
        )
    ranks = cfg.trainer.num_workers
    actor_size, ref_size = (
        -1 if shards_over_all_ranks(s, ranks) else s
        for s in (arr.actor.fsdp_config.fsdp_size, ref.fsdp_config.fsdp_size)
    )
    if actor_size != ref_size:
        raise ConfigError(
            f"{key} blends the reference with the actor shard by shard, but actor_rollout_ref.actor.fsdp_config"
            f".fsdp_size={arr.actor.fsdp_config.fsdp_size} and actor_rollout_ref.ref.fsdp_config.fsdp_size="
            f"{ref.fsdp_config.fsdp_size} shard them differently over {ranks_named(cfg.trainer)}; give both the same"
        )


def _check_overlong_buffer(cfg: TrainerRunConfig) -> None:
    ob = cfg.reward_model.overlong_buffer
    if not ob.enable:
        return
    budget = cfg.actor_rollout_ref.rollout.response_length
    if not 0 < ob.len <= budget:
        raise ConfigError(
            f"reward_model.overlong_buffer.len={ob.len} must lie in (0, {budget}] (the response budget, "
            "actor_rollout_ref.rollout.response_length) when reward_model.overlong_buffer.enable=true"
        )
    if ob.penalty_factor < 0:
        raise ConfigError(f"reward_model.overlong_buffer.penalty_factor={ob.penalty_factor} must be >= 0")
    if cfg.reward_model.enable:
        raise ConfigError(
            "reward_model.overlong_buffer shapes rule / custom rewards; it is not applied on top of a "
            "reward model (reward_model.enable=true)"
        )


def _check_ranges(cfg: TrainerRunConfig) -> None:
    rollout, actor, model = cfg.actor_rollout_ref.rollout, cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.model
    if rollout.temperature < 0:
        raise ConfigError(f"actor_rollout_ref.rollout.temperature={rollout.temperature} must be >= 0")
    if not 0 < rollout.top_p <= 1:
        raise ConfigError(f"actor_rollout_ref.rollout.top_p={rollout.top_p} must be in (0, 1]")
    _positive("actor_rollout_ref.rollout.response_length", rollout.response_length)
    if rollout.cpu_block_size <= 0 or rollout.cpu_block_size % 32:
        raise ConfigError(
            f"actor_rollout_ref.rollout.cpu_block_size={rollout.cpu_block_size} must be a positive multiple of 32 "
            "(vLLM's CPU attention works on blocks of 32 tokens)"
        )
    _positive("data.max_prompt_length", cfg.data.max_prompt_length)
    pf = cfg.algorithm.pf_ppo
    if cfg.algorithm.use_pf_ppo and pf.reweight_method == "pow" and pf.weight_pow < 0:
        raise ConfigError(
            f"algorithm.pf_ppo.weight_pow={pf.weight_pow} must be >= 0: a negative power makes a reward of 0 an "
            "infinite weight"
        )
    if rollout.lora_fold_dtype is not None and not (model.lora_rank and rollout.lora_sync == "merged"):
        raise ConfigError(
            f"actor_rollout_ref.rollout.lora_fold_dtype={rollout.lora_fold_dtype} rounds the weights a merged LoRA "
            f"sync folds, and this run has none (actor_rollout_ref.model.lora_rank={model.lora_rank}, "
            f"actor_rollout_ref.rollout.lora_sync={rollout.lora_sync}): set lora_rank > 0 and lora_sync=merged, or "
            "leave lora_fold_dtype unset"
        )
    for path, section in (("actor_rollout_ref.model", model), ("critic.model", cfg.critic.model)):
        if section.lora_rank < 0:
            raise ConfigError(f"{path}.lora_rank={section.lora_rank} must be >= 0 (0 = full fine-tuning)")
        if section.lora_rank and section.lora_alpha <= 0:
            raise ConfigError(f"{path}.lora_alpha={section.lora_alpha} must be > 0")
    if actor.logits_chunk_size is not None:  # None: sized per device
        _positive("actor_rollout_ref.actor.logits_chunk_size", actor.logits_chunk_size)
    if actor.loss_scale_factor <= 0:
        raise ConfigError(
            f"actor_rollout_ref.actor.loss_scale_factor={actor.loss_scale_factor} must be > 0 (it divides each "
            "answer's token-loss sum under seq-mean-token-sum-norm; leave it unset for data.max_response_length)"
        )
    imitation = actor.self_imitation
    if imitation.coef < 0:
        raise ConfigError(
            f"actor_rollout_ref.actor.self_imitation.coef={imitation.coef} must be >= 0 (0 turns self-imitation off)"
        )
    if imitation.coef:
        _positive("actor_rollout_ref.actor.self_imitation.rows_per_step", imitation.rows_per_step)
        if imitation.buffer_size < imitation.rows_per_step:
            raise ConfigError(
                f"actor_rollout_ref.actor.self_imitation.buffer_size={imitation.buffer_size} must be >= rows_per_step="
                f"{imitation.rows_per_step}: the buffer could never fill an update's replay"
            )
    if actor.optim.lr <= 0:
        raise ConfigError(f"actor_rollout_ref.actor.optim.lr={actor.optim.lr} must be > 0")
    _check_lr_decay("actor_rollout_ref.actor.optim", actor.optim)
    if _estimator(cfg).needs_critic:
        _check_lr_decay("critic.optim", cfg.critic.optim)
    from algos.policy_loss_config import PolicyLossConfig

    # the loss's own checks (clip ratios, actor.policy_loss.*) are the only rules for its settings: run now rather
    # than when the actor starts
    try:
        PolicyLossConfig.from_mapping(actor)
    except ValueError as exc:
        raise ConfigError(f"actor_rollout_ref.{exc}") from exc
    try:  # the OpenAI routes beyond loopback need a key: refused now, not when the deployment starts
        http_api_key(rollout)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    if not 0 <= cfg.reward_model.max_failed_fraction <= 1:
        raise ConfigError(
            f"reward_model.max_failed_fraction={cfg.reward_model.max_failed_fraction} must lie in [0, 1] "
            "(1: never stop)"
        )
    if cfg.trainer.max_failures < -1:
        raise ConfigError(f"trainer.max_failures={cfg.trainer.max_failures} must be >= -1 (-1: no limit)")
    if cfg.trainer.max_failures != 0 and cfg.trainer.resume_mode != "auto":
        raise ConfigError(
            f"trainer.max_failures={cfg.trainer.max_failures} restarts resume from the newest "
            f"checkpoint, which needs trainer.resume_mode=auto (got {cfg.trainer.resume_mode!r})"
        )
    if cfg.trainer.max_bad_steps < 0:
        raise ConfigError(f"trainer.max_bad_steps={cfg.trainer.max_bad_steps} must be >= 0 (0: never stop)")
    if not 0 <= cfg.algorithm.lam <= 1 or not 0 <= cfg.algorithm.gamma <= 1:
        raise ConfigError(
            f"algorithm.gamma={cfg.algorithm.gamma} and algorithm.lam={cfg.algorithm.lam} must lie in [0, 1]"
        )


def _check_lr_decay(path: str, optim) -> None:
    if optim.num_cycles <= 0:
        raise ConfigError(f"{path}.num_cycles={optim.num_cycles} must be > 0 (0.5: one fall from lr to its minimum)")
    ratio = optim.lr_decay_steps_ratio
    if not 0 < ratio <= 1:
        raise ConfigError(f"{path}.lr_decay_steps_ratio={ratio} must lie in (0, 1] (1: decay from the end of warm-up)")
    if ratio < 1 and optim.warmup_style == "constant":
        raise ConfigError(
            f"{path}.lr_decay_steps_ratio={ratio} times a decay, and {path}.warmup_style=constant has none: "
            "set warmup_style to linear or cosine"
        )


def _positive(key: str, value: int | None) -> None:
    if value is None or value <= 0:
        raise ConfigError(f"{key}={value} must be a positive integer")
