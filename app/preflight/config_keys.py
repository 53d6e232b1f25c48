"""The dotted keys of a typed config section (the trainer schema, the sweep file) and the nearest one to a misspelt
key, for messages such as `unknown key a.b.lrr; did you mean a.b.lr?`."""

from __future__ import annotations

import dataclasses
import difflib
import typing
from typing import Any, Optional


def dotted_keys(cls: type, prefix: str = "") -> tuple[set[str], set[str]]:
    """(every key, sections and values alike; the keys whose value is a free-form mapping, under which any key goes)."""
    hints = typing.get_type_hints(cls)
    keys, open_keys = set(), set()
    for f in dataclasses.fields(cls):
        key, tp = prefix + f.name, hints[f.name]
        keys.add(key)
        if dataclasses.is_dataclass(tp):
            sub_keys, sub_open = dotted_keys(tp, key + ".")
            keys |= sub_keys
            open_keys |= sub_open
            if getattr(tp, "EXTRA_KEYS_FIELD", None):  # a section that hands other keys to user code (data.sampler)
                open_keys.add(key)
        elif _is_free_form(tp):
            open_keys.add(key)
    return keys, open_keys


def _is_free_form(tp: Any) -> bool:
    return tp is Any or typing.get_origin(tp) is dict or tp is dict


def is_known(key: str, cls: type) -> bool:
    """`key` names a key of `cls`, or a key inside one of its free-form mappings (reward_kwargs, worker_resources)."""
    keys, open_keys = dotted_keys(cls)
    return key in keys or any(key.startswith(k + ".") for k in open_keys)


def nearest_key(key: str, cls: type) -> Optional[str]:
    """The valid key spelled most like `key`, or None when nothing is close. Part by part: each part that is not a key
    there becomes the closest child of the section so far (a typo in a section or in the last name); a last name found
    nowhere close is looked for deeper in its section (actor_rollout_ref.actor.lr -> actor_rollout_ref.actor.optim.lr);
    else the closest key overall."""
    keys, _ = dotted_keys(cls)
    parts = key.split(".")
    fixed: list[str] = []
    for i, part in enumerate(parts):
        prefix = ".".join(fixed)
        if _join(prefix, part) in keys:
            fixed.append(part)
            continue
        children = sorted(
            k[len(prefix) + 1 :] if prefix else k
            for k in keys
            if (k.startswith(prefix + ".") if prefix else True) and "." not in (k[len(prefix) + 1 :] if prefix else k)
        )
        near = difflib.get_close_matches(part, children, n=1, cutoff=0.6)
        if near:
            fixed.append(near[0])
            continue
        if i == len(parts) - 1:
            deeper = sorted((k for k in keys if k.startswith(prefix + ".") and k.rsplit(".", 1)[-1] == part), key=len)
            if deeper:
                return deeper[0]
        break
    else:
        found = ".".join(fixed)
        if found in keys and found != key:
            return found
    near = difflib.get_close_matches(key, sorted(keys), n=1, cutoff=0.6)
    return near[0] if near else None


def _join(prefix: str, part: str) -> str:
    return f"{prefix}.{part}" if prefix else part


def unknown_key_message(key: str, cls: type, where: str = "") -> str:
    """`unknown key K; did you mean N?` (or without the suggestion), `where` prefixed when given."""
    near = nearest_key(key, cls)
    text = f"unknown key {key}" + (f"; did you mean {near}?" if near else "")
    return f"{where}: {text}" if where else text
