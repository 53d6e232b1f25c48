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

from app.config.loader import ConfigError
from app.config.schema import TrainerRunConfig

SPACE_KINDS = ("grid", "choice", "loguniform", "uniform")
METHODS = ("grid", "random", "optuna")
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
    type: Literal["asha", "fifo"] = "asha"
    grace_period: int = 1  # steps before a trial can be stopped
    reduction_factor: float = 2.0  # ASHA keeps the top 1/reduction_factor at each rung
    max_t: Optional[int] = None  # None: the trainer's total steps


@dataclass(frozen=True)
class SweepSpec:
    name: str
    base_config: str  # a config name under configs/, e.g. quickstart
    base_overrides: tuple[str, ...]
    output_dir: str  # the sweep folder: Tune state, one folder per trial, results, best config
    params: tuple[ParamSpace, ...]
    method: Literal["grid", "random", "optuna"] = "random"
    metric: str = "val-core/reward/mean"
    mode: Literal["max", "min"] = "max"
    num_samples: int = 1
    max_concurrent_trials: Optional[int] = None  # a cap; the cluster's resources give the actual limit
    search_seed: Optional[int] = None  # the searcher's random seed (random draws, Optuna's sampler)
    scheduler: SchedulerSpec = field(default_factory=SchedulerSpec)
    trial_seed: Literal["per_trial", "fixed"] = "per_trial"  # per_trial: trainer.seed + a number from the trial id
    resume: Union[bool, Literal["auto"]] = "auto"  # auto: continue the sweep in output_dir when there is one

    def search_signature(self) -> dict[str, Any]:
        """What must match for a resumed sweep to be the same sweep."""
        return {"params": [[p.key, p.kind, list(p.values)] for p in self.params], "method": self.method,
                "metric": self.metric, "mode": self.mode, "num_samples": self.num_samples,
                "base_config": self.base_config, "base_overrides": list(self.base_overrides)}


_TOP_KEYS = {"name", "base", "output_dir", "search", "params", "scheduler", "trial_seed", "resume"}
_SEARCH_KEYS = {"method", "metric", "mode", "num_samples", "max_concurrent_trials", "seed"}
_SCHEDULER_KEYS = {"type", "grace_period", "reduction_factor", "max_t"}


def parse_sweep(raw: dict[str, Any]) -> SweepSpec:
    """Validate the sweep mapping (Hydra config as a plain dict). Parameter keys are checked against the schema."""
    _known(raw, _TOP_KEYS, "")
    name = _string(raw.get("name"), "name")
    base = raw.get("base") or {}
    if not isinstance(base, dict):
        raise ConfigError(f"sweep base: expected a mapping with config and overrides, got {base!r}")
    _known(base, {"config", "overrides"}, "base")
    base_config = _string(base.get("config"), "base.config")
    overrides = base.get("overrides") or []
    if not isinstance(overrides, (list, tuple)) or not all(isinstance(o, str) for o in overrides):
        raise ConfigError(f"sweep base.overrides: expected a list of key=value strings, got {overrides!r}")
    search = raw.get("search") or {}
    if not isinstance(search, dict):
        raise ConfigError(f"sweep search: expected a mapping, got {search!r}")
    _known(search, _SEARCH_KEYS, "search")
    method = search.get("method", "random")
    if method not in METHODS:
        raise ConfigError(f"sweep search.method: {method!r} is not one of {', '.join(METHODS)}")
    mode = search.get("mode", "max")
    if mode not in ("max", "min"):
        raise ConfigError(f"sweep search.mode: {mode!r} is not one of 'max', 'min'")
    num_samples = _int(search.get("num_samples", 1), "search.num_samples", minimum=1)
    cap = search.get("max_concurrent_trials")
    cap = None if cap is None else _int(cap, "search.max_concurrent_trials", minimum=1)
    seed = search.get("seed")
    seed = None if seed is None else _int(seed, "search.seed", minimum=0)
    params = tuple(_parse_params(raw.get("params")))
    for p in params:
        _check_method(method, p)
    trial_seed = raw.get("trial_seed", "per_trial")
    if trial_seed not in ("per_trial", "fixed"):
        raise ConfigError(f"sweep trial_seed: {trial_seed!r} is not one of 'per_trial', 'fixed'")
    resume = raw.get("resume", "auto")
    if resume not in (True, False, "auto"):
        raise ConfigError(f"sweep resume: {resume!r} is not one of true, false, auto")
    return SweepSpec(
        name=name, base_config=base_config, base_overrides=tuple(overrides),
        output_dir=_string(raw.get("output_dir") or f"outputs/sweeps/{name}", "output_dir"),
        params=params, method=method, metric=_string(search.get("metric", "val-core/reward/mean"), "search.metric"),
        mode=mode, num_samples=num_samples, max_concurrent_trials=cap, search_seed=seed,
        scheduler=_parse_scheduler(raw.get("scheduler")), trial_seed=trial_seed, resume=resume)


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
                    f"{KL_REWARD_KEY} instead")
            if not actor.use_kl_loss and not algo.use_kl_in_reward:
                raise ConfigError(
                    f"sweep params.{KL_ALIAS}: the base config has no KL term (actor_rollout_ref.actor.use_kl_loss"
                    "=false and algorithm.use_kl_in_reward=false), so the coefficient would change nothing")
            key = KL_LOSS_KEY if actor.use_kl_loss else KL_REWARD_KEY
        elif key == KL_LOSS_KEY and not actor.use_kl_loss:
            hint = f"; the KL is in the reward here, search {KL_REWARD_KEY}" if algo.use_kl_in_reward else ""
            raise ConfigError(f"sweep params.{key}: actor_rollout_ref.actor.use_kl_loss=false in the base config, "
                              f"so this coefficient is unused{hint}")
        elif key == KL_REWARD_KEY and not algo.use_kl_in_reward:
            hint = f"; the KL is a loss term here, search {KL_LOSS_KEY}" if actor.use_kl_loss else ""
            raise ConfigError(f"sweep params.{key}: algorithm.use_kl_in_reward=false in the base config, "
                              f"so this coefficient is unused{hint}")
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
        raise ConfigError("sweep params: nothing to search; give at least one key with a grid/choice/loguniform/"
                          "uniform space")
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
    (kind, values), = value.items()
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
        raise ConfigError(f"{where}: search.method=grid tries every combination, so every parameter needs a `grid` "
                          f"list (got `{p.kind}`); use search.method=random or optuna for `{p.kind}`")
    if method == "optuna" and p.kind == "grid":
        raise ConfigError(f"{where}: search.method=optuna samples its own points and cannot run a `grid`; "
                          "use `choice` with the same values")


def _check_against_schema(p: ParamSpace) -> None:
    """The key exists in the trainer schema as a value; ranges only for floats."""
    tp = schema_type(p.key)
    if p.kind in ("loguniform", "uniform") and _base_type(tp) is not float:
        raise ConfigError(f"sweep params.{p.key}: `{p.kind}` draws real numbers but {p.key} is {_type_name(tp)}; "
                          "use `choice` or `grid` with its allowed values")


def schema_type(key: str) -> Any:
    """The annotated type of a dotted trainer-config key; ConfigError naming the first unknown part."""
    cls: Any = TrainerRunConfig
    parts = key.split(".")
    for i, part in enumerate(parts):
        hints = typing.get_type_hints(cls)
        if part not in hints:
            where = ".".join(parts[:i]) or "the top level"
            raise ConfigError(f"sweep params.{key}: {'.'.join(parts[:i + 1])} is not a trainer config key "
                              f"(known under {where}: {', '.join(sorted(hints))})")
        cls = hints[part]
        if not dataclasses.is_dataclass(cls) and i < len(parts) - 1:
            raise ConfigError(f"sweep params.{key}: {'.'.join(parts[:i + 1])} is a value, not a section")
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
def _parse_scheduler(raw: Any) -> SchedulerSpec:
    if raw is None:
        return SchedulerSpec()
    if not isinstance(raw, dict):
        raise ConfigError(f"sweep scheduler: expected a mapping, got {raw!r}")
    _known(raw, _SCHEDULER_KEYS, "scheduler")
    kind = raw.get("type", "asha")
    if kind not in ("asha", "fifo"):
        raise ConfigError(f"sweep scheduler.type: {kind!r} is not one of 'asha', 'fifo'")
    grace = _int(raw.get("grace_period", 1), "scheduler.grace_period", minimum=1)
    factor = _number(raw.get("reduction_factor", 2.0), "sweep scheduler.reduction_factor")
    if factor <= 1:
        raise ConfigError(f"sweep scheduler.reduction_factor: {factor} must be > 1")
    max_t = raw.get("max_t")
    max_t = None if max_t is None else _int(max_t, "scheduler.max_t", minimum=1)
    return SchedulerSpec(kind, grace, factor, max_t)


def _known(raw: dict, known: set[str], where: str) -> None:
    unknown = sorted(set(raw) - known)
    if unknown:
        prefix = f"{where}." if where else ""
        raise ConfigError(f"sweep {', '.join(prefix + k for k in unknown)}: unknown key; known keys"
                          f"{' under ' + where if where else ''}: {', '.join(sorted(known))}")


def _string(value: Any, key: str) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"sweep {key}: expected a non-empty string, got {value!r}")
    return value


def _int(value: Any, key: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"sweep {key}: expected an integer >= {minimum}, got {value!r}")
    return value


def _number(value: Any, where: str) -> float:
    if isinstance(value, str):  # YAML 1.1 reads `1e-5` as a string
        try:
            value = float(value)
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{where}: expected a finite number, got {value!r}")
    return float(value)
