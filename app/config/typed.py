"""A plain tree (dicts, lists, scalars) turned into a typed dataclass section, naming the exact key when something is
off: an unknown key names the nearest one, a wrong type or enum value names key and value."""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from typing import Any, Literal, Union

from app.config.errors import ConfigError


def build_typed(cls: type, data: Any, path: str = "") -> Any:
    """Any typed section (the trainer config, the sweep file's, a verl keyword argument's) from a plain tree; `path` is
    the section's dotted key, which messages start from."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path or 'config'}: expected a mapping of keys, got {data!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    extra_field = getattr(cls, "EXTRA_KEYS_FIELD", None)
    if unknown and extra_field:  # a section that hands the keys it does not know to user code (a custom sampler's)
        data = _collect_extra_keys(data, unknown, extra_field, path)
        unknown = []
    if unknown:
        where = path or "the top level"
        hints_text = "".join(_suggestion(cls, path, k) for k in unknown)
        raise ConfigError(
            f"unknown key{'s' if len(unknown) > 1 else ''} {', '.join(_join(path, k) for k in unknown)} "
            f"under {where}{hints_text}; known keys: {', '.join(sorted(fields))}"
        )
    kwargs = {name: coerce(hints[name], value, _join(path, name)) for name, value in data.items()}
    return cls(**kwargs)


def _collect_extra_keys(data: dict, unknown: list[str], extra_field: str, path: str) -> dict:
    """`data` with its `unknown` keys moved into the mapping `extra_field`; a name given both ways is an error."""
    given = data.get(extra_field) or {}
    if not isinstance(given, dict):
        raise ConfigError(f"{_join(path, extra_field)}: expected a mapping, got {given!r}")
    both = sorted(set(unknown) & set(given))
    if both:
        raise ConfigError(
            f"{', '.join(_join(path, k) for k in both)} given twice: as {path}.<name> and as "
            f"{_join(path, extra_field)}.<name>; keep one"
        )
    kept = {k: v for k, v in data.items() if k not in unknown}
    return kept | {extra_field: {**given, **{k: data[k] for k in unknown}}}


def _suggestion(cls: type, path: str, key: str) -> str:
    """'; did you mean X?' with the nearest key: a sibling spelled alike (a typo), else a key of that name deeper in
    this section (e.g. `actor.lr` for `actor.optim.lr`); empty when nothing is close."""
    near = difflib.get_close_matches(key, [f.name for f in dataclasses.fields(cls)], n=1, cutoff=0.75)
    if not near:
        near = [p for p in _nested_keys(cls) if p.rsplit(".", 1)[-1] == key][:1]
    return f"; did you mean {_join(path, near[0])}?" if near else ""


def _nested_keys(cls: type, prefix: str = "") -> list[str]:
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        out.append(prefix + f.name)
        if dataclasses.is_dataclass(hints[f.name]):
            out += _nested_keys(hints[f.name], f"{prefix}{f.name}.")
    return out


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def coerce(tp: Any, value: Any, path: str) -> Any:
    """`value` as the type `tp` (a dataclass, Optional/Union, Literal, list, dict or scalar), for the key at `path`."""
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        return build_typed(tp, value, path)
    if origin in (Union, types.UnionType):
        options = typing.get_args(tp)
        if value is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return coerce(option, value, path)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(f"{path}: {value!r} is not a valid {_describe(tp)}")
    if origin is Literal:
        allowed = typing.get_args(tp)
        if value not in allowed:
            raise ConfigError(f"{path}: {value!r} is not one of {', '.join(map(repr, allowed))}")
        return value
    if origin is list:
        (item_tp,) = typing.get_args(tp) or (Any,)
        if isinstance(value, tuple):
            value = list(value)
        if not isinstance(value, list):
            raise ConfigError(f"{path}: expected a list, got {value!r}")
        return [coerce(item_tp, v, f"{path}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: expected a mapping, got {value!r}")
        key_tp, value_tp = typing.get_args(tp) or (Any, Any)
        # each entry checked like a key of its own, so a bad amount names e.g. trainer.worker_resources.train_node
        return {coerce(key_tp, k, path): coerce(value_tp, v, _join(path, str(k))) for k, v in value.items()}
    if tp is Any:
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{path}: expected true or false, got {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ConfigError(f"{path}: expected an integer, got {value!r}")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML 1.1 reads `3e-6` as a string
            try:
                return float(value)
            except ValueError:
                pass
        raise ConfigError(f"{path}: expected a number, got {value!r}")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{path}: expected a string, got {value!r}")
    return value


def _describe(tp: Any) -> str:
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    names = []
    for a in args:
        if typing.get_origin(a) is Literal:
            names.append(" | ".join(map(repr, typing.get_args(a))))
        else:
            names.append(getattr(a, "__name__", str(a)))
    return " or ".join(names) + (" or null" if type(None) in typing.get_args(tp) else "")
