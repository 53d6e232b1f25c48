"""Registry of rule-based reward functions, looked up by a sample's data_source.

A registered function has the reduced signature ``fn(solution_str, ground_truth, extra_info=None, **kwargs)``
and returns a float or a dict with a ``score`` key (plus extra metric keys). It may be given as a callable or as a
``"module:function"`` / ``"path/to/file.py:function"`` string, which is imported on first lookup.

The registry lives in each process: reward worker processes import ``algos.rewards`` afresh, so a reward registered
at run time in the trainer is not seen there. Register in a module that ``algos.rewards`` imports, or use
``custom_reward_function.path``.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from typing import Any, Callable

RewardFn = Callable[..., Any]

_REGISTRY: dict[str, RewardFn | str] = {}


class UnknownDataSourceError(KeyError):
    """No reward function is registered for a data_source."""

    def __str__(self) -> str:  # KeyError would print the message with quotes around it
        return str(self.args[0])


def register_reward(*data_sources: str, fn: RewardFn | str | None = None, overwrite: bool = False):
    """Register ``fn`` for each of ``data_sources``; without ``fn`` it is a decorator.

    Re-registering a data_source with a different function raises unless ``overwrite`` is set, so that two modules
    cannot silently fight over a name.
    """
    if not data_sources:
        raise ValueError("register_reward needs at least one data_source name")

    def _register(target: RewardFn | str) -> RewardFn | str:
        if not (callable(target) or (isinstance(target, str) and ":" in target)):
            raise TypeError(f"reward for {data_sources} must be a callable or 'module:function', got {target!r}")
        for name in data_sources:
            existing = _REGISTRY.get(name)
            if existing is not None and existing is not target and not overwrite:
                raise ValueError(
                    f"data_source {name!r} already has reward {existing!r}; pass overwrite=True to replace"
                )
            _REGISTRY[name] = target
        return target

    if fn is not None:
        return _register(fn)
    return _register


def unregister_reward(data_source: str) -> None:
    _REGISTRY.pop(data_source, None)


def known_data_sources() -> list[str]:
    return sorted(_REGISTRY)


def get_reward_fn(data_source: str) -> RewardFn:
    """The reward function for ``data_source``; raises UnknownDataSourceError listing the known names."""
    try:
        target = _REGISTRY[data_source]
    except KeyError:
        raise UnknownDataSourceError(
            f"no reward function registered for data_source {data_source!r}; known: {', '.join(known_data_sources())}. "
            "Register one with algos.rewards.register_reward or set custom_reward_function.path"
        ) from None
    if isinstance(target, str):
        target = load_callable(target)
        _REGISTRY[data_source] = target
    return target


def load_callable(spec: str) -> Callable[..., Any]:
    """Import ``"package.module:function"`` or ``"path/to/file.py:function"`` and return the function."""
    module_part, sep, attr = spec.rpartition(":")
    if not sep or not module_part or not attr:
        raise ValueError(f"expected 'module:function' or 'file.py:function', got {spec!r}")
    if module_part.endswith(".py") or os.sep in module_part:
        module = load_module_from_file(module_part)
    else:
        module = importlib.import_module(module_part)
    fn = getattr(module, attr, None)
    if fn is None or not callable(fn):
        names = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
        raise AttributeError(f"{module_part} has no function {attr!r}; functions there: {', '.join(names) or '(none)'}")
    return fn


def load_module_from_file(path: str):
    """Import a python file by path, under a module name derived from the absolute path (one copy per file)."""
    path = os.path.abspath(os.path.expanduser(path))
    if not os.path.isfile(path):
        raise FileNotFoundError(f"reward function file not found: {path}")
    name = "_reward_file_" + "".join(c if c.isalnum() else "_" for c in path)
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path} as a python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
