"""Name -> function registries for config-selected algorithms, and loading a user's own function.

A config names an algorithm by string (e.g. ``algorithm.adv_estimator: grpo``). A ``Registry`` maps such names to
functions; a value of the form ``"some.module:function"`` (or ``"path/to/file.py:function"``) is imported instead, so
users can plug in their own function without touching this package. Every registry knows the config key it serves, so
an unknown name produces an error that says which key was wrong and which names would have worked.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
from typing import Any, Callable, Generic, Iterator, TypeVar

F = TypeVar("F", bound=Callable[..., Any])
G = TypeVar("G", bound=Callable[..., Any])


class Registry(Generic[F]):
    """Maps names to callables of one kind (``F``, e.g. ``PolicyLossFn``) for one config key.

    Args:
        key: the config key whose value is looked up here, e.g. ``"algorithm.adv_estimator"``; used in error messages.
    """

    def __init__(self, key: str) -> None:
        self.key = key
        self._entries: dict[str, F | str] = {}  # a str: "module:function", imported on first lookup
        self._traits: dict[str, Any] = {}

    def register(self, name: str, traits: Any = None, *, overwrite: bool = False) -> Callable[[G], G]:
        """Decorator: ``@REG.register("name")`` adds the function under ``name`` and returns it unchanged;
        ``traits`` (e.g. what the algorithm needs from the trainer) are kept for ``traits(name)``."""

        def decorator(fn: G) -> G:
            self.add(name, fn, traits=traits, overwrite=overwrite)
            return fn

        return decorator

    def add(self, name: str, target: F | str, *, traits: Any = None, overwrite: bool = False) -> None:
        """Register ``target`` (a function, or ``"module:function"`` imported on first lookup) under ``name``. A
        second, different target for a taken name needs ``overwrite`` (the same one again is harmless: reloads)."""
        if not isinstance(name, str) or not name or ":" in name:
            raise ValueError(f"{self.key}: registry names must be non-empty strings without ':', got {name!r}")
        if not (callable(target) or (isinstance(target, str) and ":" in target)):
            raise TypeError(f"{self.key}={name!r} must be a function or 'module:function', got {target!r}")
        existing = self._entries.get(name)
        if existing is not None and existing is not target and not overwrite:
            where = existing if isinstance(existing, str) else f"{existing.__module__}.{existing.__qualname__}"
            raise ValueError(
                f"{self.key}: name {name!r} is already registered to {where}; pass overwrite=True to replace it"
            )
        self._entries[name] = target
        if traits is not None:
            self._traits[name] = traits

    def remove(self, name: str) -> None:
        """Forget ``name`` (and its traits); no error when it is not registered."""
        self._entries.pop(name, None)
        self._traits.pop(name, None)

    def get(self, name: str) -> F:
        """Return the function registered as ``name``, or import ``"module.path:function"``."""
        if not isinstance(name, str):
            raise ValueError(f"{self.key} must be a string, got {type(name).__name__} {name!r}")
        if name in self._entries:
            entry = self._entries[name]
            if isinstance(entry, str):  # registered lazily: imported once, then kept
                entry = self._entries[name] = self._import(entry)
            return entry
        if ":" in name:
            return self._import(name)
        raise ValueError(
            f"unknown {self.key}={name!r}; known names: {', '.join(self.names())} "
            f"(or give 'module.path:function' to use your own)"
        )

    def traits(self, name: str, default: Any = None) -> Any:
        """The traits registered with ``name`` (a registered entry's module is not imported for them); a function
        imported as ``"module:function"`` may carry its own as a ``traits`` attribute; else ``default``. Unknown
        names raise as ``get`` does."""
        if name in self._traits:
            return self._traits[name]
        if isinstance(self._entries.get(name), str):  # registered lazily: its traits came with the registration
            return default
        return getattr(self.get(name), "traits", default)

    def check(self, name: str) -> None:
        """Raise as ``get`` would for an unknown or unusable name, without importing a registered entry's module
        (a user's ``"module:function"`` is imported: that is what would run)."""
        if not (isinstance(name, str) and name in self._entries):
            self.get(name)

    def _import(self, spec: str) -> F:
        try:
            return load_callable(spec)
        except (ImportError, OSError, AttributeError, TypeError, ValueError) as err:
            raise ValueError(f"{self.key}={spec!r}: {err}") from err

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


def load_callable(spec: str) -> Callable[..., Any]:
    """The function a user names as ``"package.module:function"`` or ``"path/to/file.py:function"`` (after the colon
    a dotted path inside the module, e.g. ``Class.method``). ValueError for a malformed spec, FileNotFoundError for a
    missing file, ImportError (naming the module's own error) when it cannot be imported, AttributeError (listing the
    module's functions) when the name is missing, TypeError when it is not callable."""
    module_part, sep, attr_path = spec.rpartition(":")
    if not sep or not module_part or not attr_path:
        raise ValueError(f"expected 'module.path:function' or 'file.py:function', got {spec!r}")
    if module_part.endswith(".py") or os.sep in module_part:
        try:
            module = load_module_from_file(module_part)
        except FileNotFoundError:
            raise
        except Exception as err:  # the file's own code failed
            raise ImportError(f"importing {module_part} failed: {type(err).__name__}: {err}") from err
    else:
        try:
            module = importlib.import_module(module_part)
        except ImportError as err:
            raise ImportError(f"cannot import module {module_part!r}: {err}") from err
    obj: Any = module
    for part in attr_path.split("."):
        if not hasattr(obj, part):
            names = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
            raise AttributeError(
                f"{module_part} has no function {attr_path!r}; functions there: {', '.join(names) or '(none)'}"
            )
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError(f"{attr_path!r} in {module_part} is a {type(obj).__name__}, not a function")
    return obj


def load_module_from_file(path: str) -> Any:
    """Import a python file by path, under a module name derived from the absolute path (one copy per file)."""
    path = os.path.abspath(os.path.expanduser(path))
    if not os.path.isfile(path):
        raise FileNotFoundError(f"python file not found: {path}")
    name = "_user_file_" + "".join(c if c.isalnum() else "_" for c in path)
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
