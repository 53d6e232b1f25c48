"""The sweep file (`configs/sweep/*.yaml`) as a typed, validated `SweepSpec`.

A sweep names a base trainer config (a config name in `configs/` plus Hydra overrides), the parameters to search and
how. Every mistake is a `ConfigError` naming the sweep key, e.g. `params.actor_rollout_ref.actor.optim.lr`.

Parameter spaces, one per searched config key (nested like the trainer config, or as a dotted key):
    {grid: [v1, v2, ...]}        every value is tried (method grid, or a grid axis inside method random)
    {choice: [v1, v2, ...]}      one value drawn per trial
    {loguniform: [low, high]}    0 < low < high, drawn log-uniformly (floats only)
    {uniform: [low, high]}       low < high (floats only)
The key `kl_coef` is a shorthand for the KL coefficient in use: `actor_rollout_ref.actor.kl_loss_coef` when the KL is
a loss term (`actor.use_kl_loss=true`), `algorithm.kl_ctrl.kl_coef` when it is in the reward
(`algorithm.use_kl_in_reward=true`); `resolve_params` picks it from the base config.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass, field
from typing import Any, Literal, Optional, Union

from app.config.errors import ConfigError
from app.config.schema import TrainerRunConfig
from app.config.typed import build_typed

SPACE_KINDS = ("grid", "choice", "loguniform", "uniform")
KL_ALIAS = "kl_coef"
KL_LOSS_KEY = "actor_rollout_ref.actor.kl_loss_coef"
KL_REWARD_KEY = "algorithm.kl_ctrl.kl_coef"


@dataclass(frozen=True)
class ParamSpace:
    """One searched config key. `values` holds the list for grid/choice, or (low, high) for the ranges."""

    key: str  # dotted trainer-config key, e.g. actor_rollout_ref.actor.optim.lr
    kind: Literal["grid", "choice", "loguniform", "uniform"]
    values: tuple

    @property
    def discrete(self) -> bool:
        return self.kind in ("grid", "choice")


@dataclass(frozen=True)
class SchedulerSpec:
    """`scheduler`: which trials Tune stops early."""

    type: Literal["asha", "fifo"] = "asha"
    grace_period: int = 1  # steps before a trial can be stopped
    reduction_factor: float = 2.0  # ASHA keeps the top 1/reduction_factor at each rung
    max_t: Optional[int] = None  # None: the trainer's total steps


@dataclass
class SweepBase:
    """`base`: the trainer config every trial starts from."""

    config: str = ""  # a config name under configs/, e.g. quickstart (required)
    overrides: list[str] = field(default_factory=list)  # Hydra overrides of it, shared by every trial


@dataclass
class SearchConfig:
    """`search`: how points are drawn and what ranks the trials."""

    method: Literal["grid", "random", "optuna"] = "random"  # optuna: pip install 'rayrl[optuna]'
    metric: str = "val-core/reward/mean"
    mode: Literal["max", "min"] = "max"
    num_samples: int = 1  # trials (method grid: repeats of the whole grid)
    max_concurrent_trials: Optional[int] = None  # a cap; the cluster's resources give the actual limit
    seed: Optional[int] = None  # the searcher's random seed (random draws, Optuna's sampler)


@dataclass
class SweepFile:
    """The sweep file's keys and their defaults, written only here: Hydra composes a sweep file over them (node
    `rayrl_sweep_schema`) and `parse_sweep` reads a tree with the trainer config's loader."""

    name: str = ""  # required
    base: SweepBase = field(default_factory=SweepBase)
    # the sweep folder (Tune state, trial folders, results); None: outputs/sweeps/<name>
    output_dir: Optional[str] = None
    search: SearchConfig = field(default_factory=SearchConfig)
    params: dict[str, Any] = field(default_factory=dict)  # trainer-config key -> space (see the module doc)
    scheduler: SchedulerSpec = field(default_factory=SchedulerSpec)
    trial_seed: Literal["per_trial", "fixed"] = "per_trial"  # per_trial: trainer.seed + a number from the trial id
    resume: Union[bool, Literal["auto"]] = "auto"  # auto: continue the sweep in output_dir when there is one


SWEEP_SCHEMA_NODE = "rayrl_sweep_schema"


def register_sweep_defaults() -> None:
    """Store `SweepFile`'s defaults as Hydra's base for sweep files, so they hold only what differs."""
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(name=SWEEP_SCHEMA_NODE, node=dataclasses.asdict(SweepFile()))


@dataclass(frozen=True)
class SweepSpec:
    """A checked sweep file (see `SweepFile` for each field's meaning and default)."""

    name: str
    base_config: str
    base_overrides: tuple[str, ...]
    output_dir: str
    params: tuple[ParamSpace, ...]
    method: Literal["grid", "random", "optuna"]
    metric: str
    mode: Literal["max", "min"]
    num_samples: int
    max_concurrent_trials: Optional[int]
    search_seed: Optional[int]
    scheduler: SchedulerSpec
    trial_seed: Literal["per_trial", "fixed"]
    resume: Union[bool, Literal["auto"]]

    def search_signature(self) -> dict[str, Any]:
        """What must match for a resumed sweep to be the same sweep."""
        return {
            "params": [[p.key, p.kind, list(p.values)] for p in self.params],
            "method": self.method,
            "metric": self.metric,
            "mode": self.mode,
            "num_samples": self.num_samples,
            "base_config": self.base_config,
            "base_overrides": list(self.base_overrides),
        }


def parse_sweep(raw: dict[str, Any]) -> SweepSpec:
    """Validate the sweep mapping (Hydra config as a plain dict). Parameter keys are checked against the schema."""
    try:
        sweep = build_typed(SweepFile, raw)
    except ConfigError as exc:
        raise ConfigError(f"sweep {exc}") from None
    name = _string(sweep.name, "name")
    search, scheduler = sweep.search, sweep.scheduler
    _string(search.metric, "search.metric")
    _at_least(search.num_samples, "search.num_samples", 1)
    _at_least(search.max_concurrent_trials, "search.max_concurrent_trials", 1)
    _at_least(search.seed, "search.seed", 0)
    _at_least(scheduler.grace_period, "scheduler.grace_period", 1)
    _at_least(scheduler.max_t, "scheduler.max_t", 1)
    if scheduler.reduction_factor <= 1:
        raise ConfigError(f"sweep scheduler.reduction_factor: {scheduler.reduction_factor} must be > 1")
    params = tuple(_parse_params(sweep.params))
    for p in params:
        _check_method(search.method, p)
    return SweepSpec(
        name=name,
        base_config=_string(sweep.base.config, "base.config"),
        base_overrides=tuple(sweep.base.overrides),
        output_dir=_string(sweep.output_dir or f"outputs/sweeps/{name}", "output_dir"),
        params=params,
        method=search.method,
        metric=search.metric,
        mode=search.mode,
        num_samples=search.num_samples,
        max_concurrent_trials=search.max_concurrent_trials,
        search_seed=search.seed,
        scheduler=scheduler,
        trial_seed=sweep.trial_seed,
        resume=sweep.resume,
    )


def resolve_params(spec: SweepSpec, base: TrainerRunConfig) -> SweepSpec:
    """Resolve the `kl_coef` shorthand against the base config and refuse a KL key that the base does not use."""
    actor, algo = base.actor_rollout_ref.actor, base.algorithm
    resolved = []
    for p in spec.params:
        key = p.key
        if key == KL_ALIAS:
            if actor.use_kl_loss and algo.use_kl_in_reward:
                raise ConfigError(
                    f"sweep params.{KL_ALIAS}: the base config has both a KL loss (actor_rollout_ref.actor.use_kl_loss"
                    f"=true) and a KL in the reward (algorithm.use_kl_in_reward=true); name {KL_LOSS_KEY} or "
                    f"{KL_REWARD_KEY} instead"
                )
            if not actor.use_kl_loss and not algo.use_kl_in_reward:
                raise ConfigError(
                    f"sweep params.{KL_ALIAS}: the base config has no KL term (actor_rollout_ref.actor.use_kl_loss"
                    "=false and algorithm.use_kl_in_reward=false), so the coefficient would change nothing"
                )
            key = KL_LOSS_KEY if actor.use_kl_loss else KL_REWARD_KEY
        elif key == KL_LOSS_KEY and not actor.use_kl_loss:
            hint = f"; the KL is in the reward here, search {KL_REWARD_KEY}" if algo.use_kl_in_reward else ""
            raise ConfigError(
                f"sweep params.{key}: actor_rollout_ref.actor.use_kl_loss=false in the base config, "
                f"so this coefficient is unused{hint}"
            )
        elif key == KL_REWARD_KEY and not algo.use_kl_in_reward:
            hint = f"; the KL is a loss term here, search {KL_LOSS_KEY}" if actor.use_kl_loss else ""
            raise ConfigError(
                f"sweep params.{key}: algorithm.use_kl_in_reward=false in the base config, "
                f"so this coefficient is unused{hint}"
            )
        resolved.append(dataclasses.replace(p, key=key))
    keys = [p.key for p in resolved]
    duplicated = sorted({k for k in keys if keys.count(k) > 1})
    if duplicated:
        raise ConfigError(f"sweep params: {', '.join(duplicated)} is searched twice (kl_coef names the same key)")
    for p in resolved:
        _check_against_schema(p)
    return dataclasses.replace(spec, params=tuple(resolved))


# ---------------------------------------------------------------------------------------------------- params
def _parse_params(raw: Any) -> list[ParamSpace]:
    if not raw:
        raise ConfigError(
            "sweep params: nothing to search; give at least one key with a grid/choice/loguniform/uniform space"
        )
    if not isinstance(raw, dict):
        raise ConfigError(f"sweep params: expected a mapping of config keys to spaces, got {raw!r}")
    out: list[ParamSpace] = []
    _walk_params(raw, "", out)
    return out


def _walk_params(node: dict, prefix: str, out: list[ParamSpace]) -> None:
    for name, value in node.items():
        key = f"{prefix}{name}"
        if isinstance(value, dict) and value and set(value) <= set(SPACE_KINDS):
            out.append(_parse_space(key, value))
        elif isinstance(value, dict) and value and not set(value) & set(SPACE_KINDS):
            _walk_params(value, key + ".", out)
        else:
            raise ConfigError(f"sweep params.{key}: expected one of {{{', '.join(SPACE_KINDS)}: ...}}, got {value!r}")


def _parse_space(key: str, value: dict) -> ParamSpace:
    if len(value) != 1:
        raise ConfigError(f"sweep params.{key}: give exactly one of {', '.join(SPACE_KINDS)}, got {sorted(value)}")
    ((kind, values),) = value.items()
    where = f"sweep params.{key}.{kind}"
    if not isinstance(values, (list, tuple)) or not values:
        raise ConfigError(f"{where}: expected a non-empty list, got {values!r}")
    if kind in ("grid", "choice"):
        for v in values:
            if isinstance(v, (dict, list)):
                raise ConfigError(f"{where}: values must be scalars, got {v!r}")
        if len({repr(v) for v in values}) != len(values):
            raise ConfigError(f"{where}: {list(values)} repeats a value")
        return ParamSpace(key, kind, tuple(values))
    if len(values) != 2:
        raise ConfigError(f"{where}: expected [low, high], got {list(values)}")
    low, high = (_number(v, where) for v in values)
    if not low < high:
        raise ConfigError(f"{where}: low={low} must be below high={high}")
    if kind == "loguniform" and low <= 0:
        raise ConfigError(f"{where}: low={low} must be > 0 for a log-uniform range")
    return ParamSpace(key, kind, (low, high))


def _check_method(method: str, p: ParamSpace) -> None:
    where = f"sweep params.{p.key}"
    if method == "grid" and p.kind != "grid":
        raise ConfigError(
            f"{where}: search.method=grid tries every combination, so every parameter needs a `grid` "
            f"list (got `{p.kind}`); use search.method=random or optuna for `{p.kind}`"
        )
    if method == "optuna" and p.kind == "grid":
        raise ConfigError(
            f"{where}: search.method=optuna samples its own points and cannot run a `grid`; "
            "use `choice` with the same values"
        )


def _check_against_schema(p: ParamSpace) -> None:
    """The key exists in the trainer schema as a value; ranges only for floats."""
    tp = schema_type(p.key)
    if p.kind in ("loguniform", "uniform") and _base_type(tp) is not float:
        raise ConfigError(
            f"sweep params.{p.key}: `{p.kind}` draws real numbers but {p.key} is {_type_name(tp)}; "
            "use `choice` or `grid` with its allowed values"
        )


def schema_type(key: str) -> Any:
    """The annotated type of a dotted trainer-config key; ConfigError naming the first unknown part."""
    cls: Any = TrainerRunConfig
    parts = key.split(".")
    for i, part in enumerate(parts):
        hints = typing.get_type_hints(cls)
        if part not in hints:
            where = ".".join(parts[:i]) or "the top level"
            raise ConfigError(
                f"sweep params.{key}: {'.'.join(parts[: i + 1])} is not a trainer config key "
                f"(known under {where}: {', '.join(sorted(hints))})"
            )
        cls = hints[part]
        if not dataclasses.is_dataclass(cls) and i < len(parts) - 1:
            raise ConfigError(f"sweep params.{key}: {'.'.join(parts[: i + 1])} is a value, not a section")
    if dataclasses.is_dataclass(cls):
        raise ConfigError(f"sweep params.{key}: is a section of the config, not a value to search")
    return cls


def _base_type(tp: Any) -> Any:
    if typing.get_origin(tp) is Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return args[0] if len(args) == 1 else tp
    return tp


def _type_name(tp: Any) -> str:
    base = _base_type(tp)
    return getattr(base, "__name__", str(base))


# ---------------------------------------------------------------------------------------------------- small checks
def _string(value: Any, key: str) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"sweep {key}: expected a non-empty string, got {value!r}")
    return value


def _at_least(value: Optional[int], key: str, minimum: int) -> None:
    if value is not None and value < minimum:
        raise ConfigError(f"sweep {key}: expected an integer >= {minimum}, got {value!r}")


def _number(value: Any, where: str) -> float:
    if isinstance(value, str):  # YAML 1.1 reads `1e-5` as a string
        try:
            value = float(value)
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{where}: expected a finite number, got {value!r}")
    return float(value)


register_sweep_defaults()  # Hydra's base for configs/sweep/*.yaml
