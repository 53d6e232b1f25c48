"""Name -> function registries for config-selected algorithms.

A config names an algorithm by string (e.g. ``algorithm.adv_estimator: grpo``). A ``Registry`` maps such names to
functions; a value of the form ``"some.module:function"`` is imported instead, so users can plug in their own
function without touching this package. Every registry knows the config key it serves, so an unknown name produces an
error that says which key was wrong and which names would have worked.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any, Callable, Iterator, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


class Registry:
    """Maps names to callables for one config key.

    Args:
        key: the config key whose value is looked up here, e.g. ``"algorithm.adv_estimator"``; used in error messages.
    """

    def __init__(self, key: str) -> None:
        self.key = key
        self._entries: dict[str, Callable[..., Any]] = {}
        self._traits: dict[str, Any] = {}

    def register(self, name: str, traits: Any = None) -> Callable[[F], F]:
        """Decorator: ``@REG.register("name")`` adds the function under ``name`` and returns it unchanged;
        ``traits`` (e.g. what the algorithm needs from the trainer) are kept for ``traits(name)``."""
        if not isinstance(name, str) or not name or ":" in name:
            raise ValueError(f"{self.key}: registry names must be non-empty strings without ':', got {name!r}")

        def decorator(fn: F) -> F:
            existing = self._entries.get(name)
            if existing is not None and existing is not fn:
                raise ValueError(
                    f"{self.key}: name {name!r} is already registered to "
                    f"{existing.__module__}.{existing.__qualname__}"
                )
            self._entries[name] = fn
            if traits is not None:
                self._traits[name] = traits
            return fn

        return decorator

    def get(self, name: str) -> Callable[..., Any]:
        """Return the function registered as ``name``, or import ``"module.path:function"``."""
        if not isinstance(name, str):
            raise ValueError(f"{self.key} must be a string, got {type(name).__name__} {name!r}")
        if name in self._entries:
            return self._entries[name]
        if ":" in name:
            return self._import(name)
        raise ValueError(
            f"unknown {self.key}={name!r}; known names: {', '.join(self.names())} "
            f"(or give 'module.path:function' to use your own)"
        )

    def traits(self, name: str, default: Any = None) -> Any:
        """The traits registered with ``name``; a function imported as ``"module:function"`` may carry its own as a
        ``traits`` attribute; else ``default``. Unknown names raise as ``get`` does."""
        fn = self.get(name)
        return self._traits[name] if name in self._traits else getattr(fn, "traits", default)

    def _import(self, spec: str) -> Callable[..., Any]:
        module_name, _, attr_path = spec.partition(":")
        if not module_name or not attr_path:
            raise ValueError(f"{self.key}={spec!r}: expected 'module.path:function'")
        try:
            obj: Any = importlib.import_module(module_name)
        except ImportError as err:
            raise ValueError(f"{self.key}={spec!r}: cannot import module {module_name!r}: {err}") from err
        for part in attr_path.split("."):
            try:
                obj = getattr(obj, part)
            except AttributeError as err:
                raise ValueError(f"{self.key}={spec!r}: module {module_name!r} has no attribute {attr_path!r}") from err
        if not callable(obj):
            raise ValueError(f"{self.key}={spec!r}: {attr_path!r} is a {type(obj).__name__}, not a function")
        return obj

    def names(self) -> tuple[str, ...]:
        """Registered names, sorted."""
        return tuple(sorted(self._entries))

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry(key={self.key!r}, names={list(self.names())})"


def call_with_supported_kwargs(fn: Callable[..., Any], /, **kwargs: Any) -> Any:
    """Call ``fn`` with the subset of ``kwargs`` that it accepts.

    Lets one call site feed estimators with different needs (``values`` for GAE, ``index`` for GRPO, ...). A function
    that takes ``**kwargs`` receives everything. A required parameter that is missing raises a TypeError naming it.
    """
    sig = inspect.signature(fn)
    params = sig.parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return fn(**kwargs)
    accepted = {
        name: value
        for name, value in kwargs.items()
        if name in params
        and params[name].kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    }
    missing = [
        name
        for name, p in params.items()
        if p.default is inspect.Parameter.empty
        and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        and name not in accepted
    ]
    if missing:
        qualname = getattr(fn, "__qualname__", repr(fn))
        raise TypeError(f"{qualname} needs {missing}, which the caller did not provide (given: {sorted(kwargs)})")
    return fn(**accepted)
