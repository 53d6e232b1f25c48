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
    """The valid key spelled most like `key`: first among the children of its longest valid prefix (a typo in the
    last part), else among all keys (a typo in a section name); None when nothing is close."""
    keys, _ = dotted_keys(cls)
    parts = key.split(".")
    for cut in range(len(parts) - 1, -1, -1):
        parent = ".".join(parts[:cut])
        if cut and parent not in keys:
            continue
        prefix = parent + "." if cut else ""
        children = [k for k in keys if k.startswith(prefix) and "." not in k[len(prefix):]]
        rest = ".".join(parts[cut:])
        near = difflib.get_close_matches(rest, [c[len(prefix):] for c in children], n=1, cutoff=0.6)
        if near:
            return prefix + near[0]
        break
    near = difflib.get_close_matches(key, sorted(keys), n=1, cutoff=0.6)
    if near:
        return near[0]
    # a key moved into a subsection, e.g. actor_rollout_ref.actor.lr for actor_rollout_ref.actor.optim.lr
    last, head = parts[-1], ".".join(parts[:-1])
    deeper = sorted(k for k in keys if k.rsplit(".", 1)[-1] == last and k.startswith(head + "."))
    return deeper[0] if deeper else None


def unknown_key_message(key: str, cls: type, where: str = "") -> str:
    """`unknown key K; did you mean N?` (or without the suggestion), `where` prefixed when given."""
    near = nearest_key(key, cls)
    text = f"unknown key {key}" + (f"; did you mean {near}?" if near else "")
    return f"{where}: {text}" if where else text
