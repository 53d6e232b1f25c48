"""Registry of rule-based reward functions, looked up by a sample's data_source.

A name ending in ``*`` matches every data_source that starts with the rest (``aime*``: ``aime_2024``, ``aime25``),
as verl's ``default_compute_score`` matches prefixes; an exact name wins over a prefix, a longer prefix over a shorter.

A registered function has the reduced signature ``fn(solution_str, ground_truth, extra_info=None, **kwargs)``
and returns a float or a dict with a ``score`` key (plus extra metric keys). It may be given as a callable or as a
``"module:function"`` / ``"path/to/file.py:function"`` string, which is imported on first lookup
(``algos.registry.load_callable``, as for every user function). A rule whose ground truth has a shape of its own (a
code source's tests, a QA source's targets) may register ``check_ground_truth``, a function that raises ValueError
naming what is wrong: the trainer's data check calls it on every row before any worker starts.

The registry lives in each process: reward worker processes import ``algos.rewards`` afresh, so a reward registered
at run time in the trainer is not seen there. Register in a module that ``algos.rewards`` imports, or use
``custom_reward_function.path``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from algos.registry import Registry

RewardFn = Callable[..., Any]

REWARDS: Registry[RewardFn] = Registry("data_source")
GroundTruthCheck = Callable[[Any], Any]


@dataclass(frozen=True)
class RewardTraits:
    check_ground_truth: GroundTruthCheck | None = None  # raises ValueError for a ground truth the rule cannot score


class UnknownDataSourceError(KeyError):
    """No reward function is registered for a data_source."""

    def __str__(self) -> str:  # KeyError would print the message with quotes around it
        return str(self.args[0])


def register_reward(
    *data_sources: str,
    fn: RewardFn | str | None = None,
    overwrite: bool = False,
    check_ground_truth: GroundTruthCheck | None = None,
):
    """Register ``fn`` for each of ``data_sources``; without ``fn`` it is a decorator. ``check_ground_truth``: raises
    ValueError for a ground truth the rule cannot score (its return value is ignored).

    Re-registering a data_source with a different function raises unless ``overwrite`` is set, so that two modules
    cannot silently fight over a name.
    """
    if not data_sources:
        raise ValueError("register_reward needs at least one data_source name")

    def _register(target: RewardFn | str) -> RewardFn | str:
        for name in data_sources:
            # traits always given: a rule registered over another does not inherit its check
            REWARDS.add(name, target, traits=RewardTraits(check_ground_truth), overwrite=overwrite)
        return target

    if fn is not None:
        return _register(fn)
    return _register


def unregister_reward(data_source: str) -> None:
    REWARDS.remove(data_source)


def known_data_sources() -> list[str]:
    return list(REWARDS.names())


PREFIX_MARK = "*"


def _registered_name(data_source: str) -> str | None:
    """The registered name that ``data_source`` resolves to: itself, else the longest matching ``prefix*``."""
    if data_source in REWARDS:
        return data_source
    prefixes = [n for n in REWARDS.names() if n.endswith(PREFIX_MARK) and data_source.startswith(n[:-1])]
    return max(prefixes, key=len, default=None)


def get_reward_fn(data_source: str) -> RewardFn:
    """The reward function for ``data_source``; raises UnknownDataSourceError listing the known names."""
    name = _registered_name(data_source)
    if name is None:
        raise UnknownDataSourceError(
            f"no reward function registered for data_source {data_source!r}; known: {', '.join(known_data_sources())}. "
            "Register one with algos.rewards.register_reward or set custom_reward_function.path"
        )
    return REWARDS.get(name)


def ground_truth_check(data_source: str) -> GroundTruthCheck | None:
    """The ground-truth check of the rule ``data_source`` resolves to; None when it has none (or no rule matches)."""
    name = _registered_name(data_source)
    return REWARDS.traits(name, RewardTraits()).check_ground_truth if name is not None else None
