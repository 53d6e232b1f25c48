"""`python -m app.pipeline {verl_finetune|grpo_chat_completion} [--params FILE.yaml|json] [--dry-run] [--list]
key=value ...`

Runs a managed-pipeline parameter card over the trainer. Parameters come from the file, then the command line (which
wins). `--dry-run` validates every parameter, prints the trainer config and the output folders, and exits without
starting Ray. `--list` prints the card's parameter table. A dotted key (`actor_rollout_ref.rollout.name=hf`) is a
trainer-config override applied after the card's mapping. Works under `ray job submit --working-dir . -- python -m
app.pipeline ...`.
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    from app.pipeline.params import PipelineError, parse_cli_pairs, read_params_file
    from app.pipeline.runner import card_module, run_card

    parser = argparse.ArgumentParser(prog="python -m app.pipeline", description=__doc__.splitlines()[0])
    parser.add_argument("card", help="verl_finetune or grpo_chat_completion")
    parser.add_argument("params", nargs="*", help="key=value")
    parser.add_argument("--params", dest="params_file", help="a flat YAML or JSON file of parameters")
    parser.add_argument("--dry-run", action="store_true", help="validate and print the config; start nothing")
    parser.add_argument("--list", action="store_true", help="print the card's parameters and exit")
    args = parser.parse_intermixed_args(argv)  # key=value pairs before and after the options
    try:
        module = card_module(args.card)
        if args.list:
            from app.pipeline.docs import card_table

            print(card_table(module.PARAMS))
            return 0
        raw = read_params_file(args.params_file) if args.params_file else {}
        raw.update(parse_cli_pairs(args.params))
    except PipelineError as exc:
        from app.failure_report import print_error

        return print_error(exc)
    if not args.dry_run:
        from app.train import exit_on_sigterm

        exit_on_sigterm()
    return run_card(args.card, raw, dry_run=args.dry_run)


if __name__ == "__main__":
    sys.exit(main())
