"""Choosing the reward function: verl's ``custom_reward_function.path/.name`` or the built-in rules."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from typing import Any, Callable


class RewardConfigError(ValueError):
    """custom_reward_function points at a file or function that cannot be used."""


@dataclass(frozen=True)
class RewardFnSpec:
    """Which ``compute_score(data_source, solution_str, ground_truth, extra_info, **reward_kwargs)`` to call.

    Attributes:
        path: python file (custom_reward_function.path); None for the built-in rules (algos.rewards).
        name: function in that file (custom_reward_function.name).
        reward_kwargs: extra keyword arguments for every call (custom_reward_function.reward_kwargs).
    """

    path: str | None = None
    name: str = "compute_score"
    reward_kwargs: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_config(cls, section: Any) -> "RewardFnSpec":
        """From verl's ``custom_reward_function`` section (mapping or object with path/name/reward_kwargs); an
        empty or null path means the built-in rules."""

        def get(key: str, default: Any) -> Any:
            if section is None:
                return default
            value = section.get(key, default) if hasattr(section, "get") else getattr(section, key, default)
            return default if value is None else value

        path = get("path", None) or None
        return cls(
            path=path,
            name=get("name", "compute_score") or "compute_score",
            reward_kwargs=dict(get("reward_kwargs", {})),
        )


def load_reward_fn(spec: RewardFnSpec) -> Callable[..., Any]:
    """The callable for ``spec``, with reward_kwargs bound; RewardConfigError if the file or function is unusable."""
    if spec.path is None:
        from algos.rewards import default_compute_score

        fn: Callable[..., Any] = default_compute_score
    else:
        from algos.registry import load_callable

        path = os.path.abspath(os.path.expanduser(spec.path))
        if not os.path.isfile(path):
            raise RewardConfigError(f"custom_reward_function.path: file not found: {path}")
        try:
            fn = load_callable(f"{path}:{spec.name}")
        except ImportError as err:  # the file's own code failed
            raise RewardConfigError(f"custom_reward_function.path: {err}") from err
        except (AttributeError, TypeError) as err:  # the name is missing or not a function
            raise RewardConfigError(f"custom_reward_function.name: {err}") from err
    return functools.partial(fn, **spec.reward_kwargs) if spec.reward_kwargs else fn
