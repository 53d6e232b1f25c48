"""`python -m app.sweep [--config-name sweep/grpo_small] key=value ...`: a Ray Tune sweep of training runs.

The sweep file (configs/sweep/*.yaml, see app.tuning.spec) names a base trainer config and overrides, the parameters
to search (learning rate, KL coefficient, rollout.n, ...), the search method (grid, random, optuna), the metric and
mode, and the ASHA scheduler. Each trial is one `python -m app.train` run (see app.tuning.trial); at the end the
results table is printed and written to the sweep folder with the best config (`best.yaml`).

Examples:
    python -m app.sweep                                           # configs/sweep/grpo_small.yaml
    python -m app.sweep search.num_samples=8 scheduler.grace_period=4
    python -m app.sweep 'base.overrides=["trainer.total_training_steps=6"]' output_dir=outputs/sweeps/try2
    python -m app.sweep '~params' '+params={actor_rollout_ref.actor.optim.lr:{grid:[1e-5,1e-4]}}'   # other spaces
    python -m app.sweep resume=true                               # continue an interrupted sweep
    python -m app.plot outputs/sweeps/grpo_small                  # one curve per trial
Sweep files outside configs/: `--config-dir DIR --config-name NAME` (DIR is added to the search path, so base
configs in configs/ are still found). Works unchanged under `ray job submit --working-dir . -- python -m app.sweep`.
"""

from __future__ import annotations

import sys
from operator import attrgetter

import hydra
from omegaconf import DictConfig

import app.config  # noqa: F401  registers the schema's defaults, the base of configs/ppo_trainer.yaml
import app.tuning.spec  # noqa: F401  registers the sweep file's defaults, the base of configs/sweep/*.yaml
from app.config.schema import TrainerRunConfig


def compose_base(config_name: str, overrides: list[str]) -> tuple[dict, TrainerRunConfig]:
    """The base trainer config, composed by Hydra: as a tree (interpolations kept, for best.yaml) and typed once
    (`app.tuning.trial.built_config`, not validated), both with local paths made absolute."""
    from omegaconf import OmegaConf

    from app.config import compose_config
    from app.trainer.launch import PATH_KEYS, with_absolute_paths
    from app.tuning.trial import built_config, get_key, set_key

    cfg = compose_config(config_name, overrides)
    tree = OmegaConf.to_container(cfg, resolve=False)
    tree.pop("hydra", None)
    built = with_absolute_paths(built_config(tree))
    for key in PATH_KEYS:  # the tree's paths as the typed config has them, interpolations kept
        value = get_key(tree, key)
        if value is not None and "${" not in str(value):
            set_key(tree, key, attrgetter(key)(built))
    return tree, built


# trials serve no HTTP route (route_prefix=None), so the rollout's port is never bound
SWEEP_SKIPS = ("http_port",)


def check_param_keys(spec) -> None:
    """Each searched key is a trainer-config key; a misspelt one names the nearest (before the base is composed)."""
    from app.config.schema import TrainerRunConfig
    from app.preflight import PreflightError
    from app.preflight.config_keys import is_known, unknown_key_message
    from app.tuning.spec import KL_ALIAS

    for p in spec.params:
        if p.key != KL_ALIAS and not is_known(p.key, TrainerRunConfig):
            raise PreflightError(unknown_key_message(p.key, TrainerRunConfig, where="sweep params"))


def run(cfg: DictConfig) -> int:
    from hydra.errors import HydraException

    from app.config import ConfigError, to_container
    from app.data import DataError
    from app.failure_report import print_error, report_run_failure
    from app.preflight import run_preflight
    from app.preflight.overrides import check_overrides
    from app.trainer.setup import total_training_steps
    from app.tuning.spec import parse_sweep, resolve_params
    from app.tuning.trial import validated

    try:
        spec = parse_sweep(to_container(cfg))
        check_overrides(spec.base_overrides, TrainerRunConfig, where="sweep base.overrides")
        check_param_keys(spec)
        try:
            base_tree, built = compose_base(spec.base_config, list(spec.base_overrides))
        except HydraException as exc:
            raise ConfigError(f"sweep base.config={spec.base_config!r} / base.overrides: {exc}") from exc
        base_cfg = validated(built)
        spec = resolve_params(spec, base_cfg)
        n_train, n_val = run_preflight(base_cfg, skip=SWEEP_SKIPS)["data"]
        total_steps = total_training_steps(base_cfg, n_train)
    except (ConfigError, DataError, OSError) as exc:  # OSError: a missing model/data path
        return print_error(exc)
    from app.tuning.runner import run_sweep

    try:
        outcome = run_sweep(spec, base_tree, total_steps=total_steps, base_cfg=built)
    except ConfigError as exc:  # joining the cluster: its address or its resources
        return print_error(exc)
    except Exception as exc:  # noqa: BLE001  a failure inside Ray: the root cause's own message
        return report_run_failure(exc)
    print(f"\nsweep {spec.name}: {len(outcome.rows)} trials, sorted by {spec.metric} ({spec.mode})")
    print(outcome.table_markdown)
    print(f"results: {outcome.sweep_dir / 'results.csv'}  {outcome.sweep_dir / 'results.md'}")
    if outcome.best_config is not None:
        print(f"best config: {outcome.best_config}")
        print(f"  rerun: python -m app.train --config-path {outcome.sweep_dir} --config-name best")
    else:
        print("no trial reported a finite metric; no best config written")
    print(f"curves: python -m app.plot {outcome.sweep_dir}")
    return 0


def main() -> None:
    """The command: the overrides' keys are checked against the sweep file's schema first (a misspelt one names the
    nearest key), then Hydra composes the sweep file."""
    from app.failure_report import print_error
    from app.preflight import PreflightError
    from app.preflight.overrides import check_overrides, hydra_overrides
    from app.tuning.spec import SweepFile

    try:
        check_overrides(hydra_overrides(sys.argv[1:]), SweepFile)
    except PreflightError as exc:
        sys.exit(print_error(exc))
    hydra_main()


@hydra.main(config_path="../configs", config_name="sweep/grpo_small", version_base=None)
def hydra_main(cfg: DictConfig) -> None:
    code = run(cfg)
    if code:
        sys.exit(code)


if __name__ == "__main__":
    main()
