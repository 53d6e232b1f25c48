"""From a card's raw parameters to a validated trainer config, a dry-run report, or a training run whose outputs are
then put where the card says."""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any


def cards() -> dict[str, ModuleType]:
    from app.pipeline import grpo_chat_completion, verl_finetune

    return {"verl_finetune": verl_finetune, "grpo_chat_completion": grpo_chat_completion}


def card_module(card: str) -> ModuleType:
    from app.pipeline.params import PipelineError

    known = cards()
    if card not in known:
        import difflib

        near = difflib.get_close_matches(card, list(known), n=1)
        raise PipelineError(
            f"unknown pipeline {card!r}"
            + (f" (did you mean {near[0]!r}?)" if near else "")
            + f"; known: {', '.join(known)}"
        )
    return known[card]


def check_trainer_keys(overrides: dict[str, Any]) -> None:
    """The dotted trainer-config keys given beside the card's parameters exist; a misspelt one names the nearest."""
    from app.config.schema import TrainerRunConfig
    from app.preflight import PreflightError
    from app.preflight.config_keys import is_known, unknown_key_message

    for key in overrides:
        if not is_known(key, TrainerRunConfig):
            raise PreflightError(unknown_key_message(key, TrainerRunConfig))


def plan_card(card: str, raw: dict[str, Any], dry_run: bool):
    """(plan, validated TrainerRunConfig, the composed DictConfig). Raises PipelineError / ConfigError."""
    from app.config import load_config
    from app.pipeline.params import parse_values
    from app.pipeline.plan import compose_trainer_config

    module = card_module(card)
    values = parse_values(module.PARAMS, raw, card)
    check_trainer_keys(values.trainer_overrides)
    plan = module.build_plan(values, dry_run)
    cfg = compose_trainer_config(plan.base_config, plan.overrides)
    run_cfg = load_config(cfg)
    from app.data.sources import as_file_list, check_files_exist

    for files in (run_cfg.data.train_files, run_cfg.data.val_files):  # cheap; the rows are read when the run starts
        check_files_exist(as_file_list(files))
    return plan, run_cfg, cfg


def run_card(card: str, raw: dict[str, Any], dry_run: bool = False) -> int:
    """The whole command: 0 on success, 2 for a wrong parameter (printed naming it), else the trainer's code."""
    from app.config import ConfigError
    from app.data import DataError
    from app.failure_report import print_error
    from app.pipeline.params import PipelineError
    from app.pipeline.plan import dry_run_text

    try:
        plan, run_cfg, cfg = plan_card(card, raw, dry_run)
    except (PipelineError, ConfigError, DataError) as exc:
        return print_error(exc)
    if dry_run:
        print(dry_run_text(card, plan, run_cfg))
        return 0
    for warning in plan.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    for name, value, why in plan.not_applicable:
        print(f"not applicable: {name}={value!r} ({why})")
    from app.train import run

    code = run(cfg)
    if code:
        return code
    try:
        plan.finish(run_cfg, cfg)
    except PipelineError as exc:
        return print_error(exc)
    return 0
