"""The sweep spec in Ray Tune's terms: the parameter space, the search algorithm and the ASHA scheduler."""

from __future__ import annotations

from typing import Any, Optional

from app.config.errors import ConfigError
from app.tuning.spec import ParamSpace, SweepSpec

OPTUNA_MISSING = (
    "search.method=optuna needs the optuna package, which is not installed: "
    "pip install 'rayrl[optuna]' (or pip install 'optuna>=3.6'), or use search.method=random"
)


def tune_domain(p: ParamSpace) -> Any:
    from ray import tune

    if p.kind == "grid":
        return tune.grid_search(list(p.values))
    if p.kind == "choice":
        return tune.choice(list(p.values))
    if p.kind == "loguniform":
        return tune.loguniform(*p.values)
    return tune.uniform(*p.values)


def param_space(spec: SweepSpec) -> dict[str, Any]:
    """Flat {dotted config key: Tune domain}; the trial receives {dotted key: value}."""
    return {p.key: tune_domain(p) for p in spec.params}


def search_algorithm(spec: SweepSpec, max_concurrent: int = 0):
    """grid and random: Tune's variant generator (grid axes enumerated, the rest drawn); optuna: OptunaSearch.

    `max_concurrent` goes to the variant generator itself (Tune ignores TuneConfig.max_concurrent_trials for it);
    a Searcher such as Optuna's is limited through TuneConfig.max_concurrent_trials instead.
    """
    if spec.method == "optuna":
        try:
            import optuna  # noqa: F401
        except ImportError as exc:
            raise ConfigError(OPTUNA_MISSING) from exc
        from ray.tune.search.optuna import OptunaSearch

        return OptunaSearch(seed=spec.search_seed)
    from ray.tune.search import BasicVariantGenerator

    return BasicVariantGenerator(max_concurrent=max_concurrent, random_state=spec.search_seed)


def scheduler(spec: SweepSpec, total_steps: int) -> Optional[Any]:
    """ASHA on the sweep metric, counting time in trainer steps (the `step` of each report); None for fifo."""
    s = spec.scheduler
    if s.type == "fifo":
        return None
    max_t = s.max_t or total_steps
    if s.grace_period > max_t:
        raise ConfigError(
            f"sweep scheduler.grace_period={s.grace_period} is past the last step "
            f"(scheduler.max_t / trainer total steps = {max_t}); no trial could ever be stopped"
        )
    from ray.tune.schedulers import ASHAScheduler

    return ASHAScheduler(
        time_attr="step", max_t=max_t, grace_period=s.grace_period, reduction_factor=s.reduction_factor
    )
