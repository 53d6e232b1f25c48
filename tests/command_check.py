"""Checking shell commands the way a user runs them, without running them: bash expands each script or README block
with `python`, `ray` and the installers replaced by recorders, and every recorded `python -m app.<verb>` call is
checked with the loader the verb itself uses (Hydra compose + load_config for app.train, the sweep file's parser
for app.sweep, argparse for the others). Nothing starts Ray, reads a model or writes data."""

from __future__ import annotations

import argparse
import importlib
import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIELD, RECORD = "\x1f", "\x1e"

# functions that stand in for the programs; `ray job submit ... -- CMD` records CMD
RECORDERS = r"""
record() { for a in "$@"; do printf '%s\x1f' "$a" >> "$RECORD_FILE"; done; printf '\x1e' >> "$RECORD_FILE"; }
python() { record python "$@"; }
ray() { while [ $# -gt 0 ] && [ "$1" != "--" ]; do shift; done; [ $# -gt 0 ] && shift && "$@"; return 0; }
make() { :; }
pip() { :; }
"""


def record_calls(script_text: str, record_file: Path, args: tuple[str, ...] = (), cwd: Path = REPO) -> list[list[str]]:
    """The argument lists of every `python` call `script_text` makes when bash runs it (with `args` as $@)."""
    record_file.write_text("")
    env = {**os.environ, "RECORD_FILE": str(record_file)}
    done = subprocess.run(
        ["bash", "-c", RECORDERS + script_text, "script", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return [call.split(FIELD)[:-1] for call in record_file.read_text().split(RECORD)[:-1]]


def hydra_config_args(args: list[str], default_name: str) -> tuple[str, list[str]]:
    """(--config-name, the overrides) of an app.train / app.sweep command line."""
    name, overrides, i = default_name, [], 0
    while i < len(args):
        if args[i] == "--config-name":
            name, i = args[i + 1], i + 2
        elif args[i].startswith("--config-name="):
            name, i = args[i].split("=", 1)[1], i + 1
        else:
            overrides.append(args[i])
            i += 1
    return name, overrides


def load_train_config(args: list[str]):
    """What `python -m app.train ARGS` validates before anything starts; with --dry-run and a described cluster, the
    plan must fit it too."""
    from app.config import compose_run_config
    from app.dry_run import run_dry, split_argv

    dry_run, args = split_argv(args)
    name, overrides = hydra_config_args(args, "ppo_trainer")
    cfg = compose_run_config(name, overrides)
    if dry_run is not None and dry_run.describes_cluster:
        run_dry(cfg, dry_run)
    return cfg


def load_sweep(args: list[str]):
    """What `python -m app.sweep ARGS` validates before the data check: the sweep file and its base config."""
    import app.tuning.spec  # noqa: F401  registers the sweep file's defaults
    from app.config import compose_config, to_container
    from app.sweep import compose_base
    from app.tuning.spec import parse_sweep, resolve_params
    from app.tuning.trial import validated

    name, overrides = hydra_config_args(args, "sweep/grpo_small")
    spec = parse_sweep(to_container(compose_config(name, overrides)))
    base = validated(compose_base(spec.base_config, list(spec.base_overrides))[1])
    return resolve_params(spec, base)


class _Parsed(Exception):
    pass


def parse_cli(module: str, args: list[str], monkeypatch) -> argparse.Namespace:
    """The namespace `python -m MODULE ARGS` parses (argparse exits on a bad argument), stopping before any work."""
    original = argparse.ArgumentParser.parse_args

    def parse_then_stop(self, argv=None, namespace=None):
        raise _Parsed(original(self, argv, namespace))

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)
    try:
        importlib.import_module(module).main(args)
    except _Parsed as parsed:
        return parsed.args[0]
    finally:
        monkeypatch.setattr(argparse.ArgumentParser, "parse_args", original)
    raise AssertionError(f"python -m {module} {' '.join(args)} did not parse its arguments")


def check_call(call: list[str], monkeypatch) -> str:
    """Check one recorded `python -m app.<verb> ...` call; returns the verb."""
    assert call[:2] == ["python", "-m"], call
    module, args = call[2], call[3:]
    if module == "app.train":
        load_train_config(args)
    elif module == "app.sweep":
        load_sweep(args)
    elif module in ("app.prepare", "app.import_model", "app.plot", "app.pipeline"):
        parse_cli(module, args, monkeypatch)
    else:
        raise AssertionError(f"no check for python -m {module}")
    return module
