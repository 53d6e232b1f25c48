"""Build one rank's trainer from the validated config: tokenizer, data, roles, rewards, tracking."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable, Optional

from algos.catalog import estimator_traits
from app.config.schema import TrainerRunConfig
from app.data import PromptDataLoader, PromptDataOptions, PromptDataset, load_prompt_dataset, pad_token_id_of


def load_tokenizer(cfg: TrainerRunConfig):
    from transformers import AutoTokenizer

    model = cfg.actor_rollout_ref.model
    tokenizer = AutoTokenizer.from_pretrained(model.tokenizer_folder, trust_remote_code=model.trust_remote_code)
    if model.custom_chat_template:
        tokenizer.chat_template = model.custom_chat_template
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_datasets(cfg: TrainerRunConfig, tokenizer) -> tuple[PromptDataset, Optional[PromptDataset]]:
    """Train and validation prompts, templated and tokenized; raises DataError naming the file and row."""
    options = PromptDataOptions.from_mapping(cfg.data)
    train = load_prompt_dataset(cfg.data.train_files, tokenizer, options, max_samples=cfg.data.train_max_samples)
    val = None
    if cfg.data.val_files:
        val = load_prompt_dataset(cfg.data.val_files, tokenizer, options, max_samples=cfg.data.val_max_samples)
    return train, val


def check_data(cfg: TrainerRunConfig) -> tuple[int, int]:
    """Driver-side pre-flight: the same loading the workers do, so bad input fails before any worker starts.

    Returns (train prompts, validation prompts) and checks that one global batch fits in the data.
    """
    from app.data import DataError

    tokenizer = load_tokenizer(cfg)
    train, val = load_datasets(cfg, tokenizer)
    need_key, need = max(
        ("data.train_batch_size", cfg.data.train_batch_size),
        ("data.gen_batch_size", cfg.data.gen_batch_size),
        key=lambda kv: kv[1],
    )
    if len(train) < need:
        raise DataError(
            f"data.train_files has {len(train)} usable prompts, fewer than {need_key}={need}"
            + (f" ({train.num_filtered} dropped as too long)" if train.num_filtered else "")
        )
    if cfg.data.sampler.class_path:  # the user's sampler builds, yields valid indices and has a state to save
        custom_batch_sampler(cfg, train).check()
    if not cfg.reward_model.enable and not cfg.custom_reward_function.path:  # the built-in rules score the run
        for dataset in (train, val):
            _check_rule_sources(dataset, cfg.data.reward_fn_key, cfg.data.ground_truth_key)
    return len(train), len(val) if val is not None else 0


def _check_rule_sources(dataset: Optional[PromptDataset], key: str, truth_key: str) -> None:
    """Every row's data source has a built-in reward rule, and its ground truth passes the rule's check: an unknown
    source or a ground truth the rule cannot score fails here, naming the row, rather than at the first step's
    scoring, after the workers and replicas started."""
    from algos.rewards import UnknownDataSourceError, get_reward_fn, ground_truth_check
    from app.data import DataError

    checks: dict[str, Any] = {}
    for record in dataset or ():
        if record.data_source not in checks:
            try:
                get_reward_fn(record.data_source)
            except UnknownDataSourceError as err:
                raise DataError(f"{record.where}, column {key}: {err}") from None
            checks[record.data_source] = ground_truth_check(record.data_source)
        check = checks[record.data_source]
        if check is not None:
            try:
                check(record.ground_truth)
            except ValueError as err:
                raise DataError(f"{record.where}, {truth_key} (data_source {record.data_source!r}): {err}") from None


def custom_batch_sampler(cfg: TrainerRunConfig, train: PromptDataset):
    """data.sampler's class over the training set, or None where none is given (data.shuffle's order)."""
    if not cfg.data.sampler.class_path:
        return None
    from app.data.custom_sampler import build_custom_sampler

    return build_custom_sampler(cfg.data, train, cfg.data.gen_batch_size)


def build_trainer(
    cfg: TrainerRunConfig,
    rollout,
    *,
    report: Optional[Callable[[dict], None]] = None,
    device: Optional[str] = None,
    rollout_ready: Optional[Callable[[], None]] = None,
):
    """Everything one rank needs; collective (all ranks call it together). `device`: trainer.device unless given.
    `rollout_ready`: called once the roles hold their models, before the first call to `rollout` (launch.train starts
    the replicas beside this rank's model load, and waits for them here)."""
    from app.roles.factory import build_actor, build_critic, build_reference
    from app.trainer.loop import RLTrainer
    from app.trainer.scoring import build_scorer
    from app.trainer.tracking import Tracking

    tokenizer = load_tokenizer(cfg)
    train, val = load_datasets(cfg, tokenizer)
    # one batch per generation round: train_batch_size prompts, or gen_batch_size with dynamic sampling
    loader = PromptDataLoader(
        train,
        batch_size=cfg.data.gen_batch_size,
        pad_token_id=pad_token_id_of(tokenizer),
        shuffle=cfg.data.shuffle,
        seed=cfg.data.seed,
        batch_sampler=custom_batch_sampler(cfg, train),
    )
    _set_total_steps(cfg, len(train))
    arr = cfg.actor_rollout_ref
    device = device or cfg.trainer.device
    actor = build_actor(arr, device=device, seed=cfg.trainer.seed, rollout_correction=cfg.algorithm.rollout_correction)
    needs_reference = arr.actor.use_kl_loss or cfg.algorithm.use_kl_in_reward
    reference = build_reference(arr, actor.engine, device=device) if needs_reference else None
    critic = None
    if estimator_traits(cfg.algorithm.adv_estimator).needs_critic:
        critic = build_critic(
            cfg.critic,
            rollout_n=arr.rollout.n,
            device=device,
            seed=cfg.trainer.seed,
            response_budget=cfg.data.max_response_length,
        )
    out_dir = Path(cfg.trainer.default_local_dir)
    tracking = None
    if actor.engine.dp_rank == 0:
        from app.trainer import checkpoints

        resume = checkpoints.find_resume_dir(out_dir, cfg.trainer.resume_mode)
        start = checkpoints.read_state(resume)["global_step"] if resume else 0
        val_only = cfg.trainer.val_only
        tracking = Tracking(
            cfg.trainer.logger,
            out_dir,
            total_steps=0 if val_only else cfg.trainer.total_training_steps,
            start_step=start,
            project=cfg.trainer.project_name,
            experiment=cfg.trainer.experiment_name,
            config=_loggable(cfg),
            val_only=val_only,
        )
    if rollout_ready is not None:
        rollout_ready()
    return RLTrainer(
        cfg,
        tokenizer=tokenizer,
        train_loader=loader,
        val_dataset=val,
        actor=actor,
        reference=reference,
        critic=critic,
        rollout=rollout,
        scorer=build_scorer(cfg, tokenizer, actor.engine.device),
        report=report,
        tracking=tracking,
    )


def total_training_steps(cfg: TrainerRunConfig, train_prompts: int) -> int:
    """The steps a run makes: `trainer.total_training_steps`, else `trainer.total_epochs` × the full batches of
    `data.gen_batch_size` prompts (one generation round each) in `train_prompts` (the loader drops the last, smaller
    batch of an epoch)."""
    if cfg.trainer.total_training_steps:
        return int(cfg.trainer.total_training_steps)
    return (train_prompts // cfg.data.gen_batch_size) * cfg.trainer.total_epochs


def _set_total_steps(cfg: TrainerRunConfig, train_prompts: int) -> None:
    """Fill trainer.total_training_steps and the optimisers' schedule length from the data size."""
    cfg.trainer.total_training_steps = total_training_steps(cfg, train_prompts)
    for optim in (cfg.actor_rollout_ref.actor.optim, cfg.critic.optim):
        if optim.total_training_steps <= 0:
            optim.total_training_steps = cfg.trainer.total_training_steps


def _loggable(cfg: TrainerRunConfig) -> dict:
    """The run's config for the trackers, without secrets: they keep it on a server for anyone with project access."""
    tree = dataclasses.asdict(cfg)
    rollout = tree["actor_rollout_ref"]["rollout"]
    if rollout["http_api_key"] is not None:
        rollout["http_api_key"] = "<set>"
    return tree
