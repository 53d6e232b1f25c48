"""Pulling the prompt, ground truth and other fields out of a row."""

from __future__ import annotations

from typing import Any

from app.data.errors import DataError

_MISSING = object()


def get_dotted(row: dict[str, Any], key: str, default: Any = _MISSING) -> Any:
    """``get_dotted({"reward_model": {"ground_truth": "3"}}, "reward_model.ground_truth") == "3"``.

    A top-level column whose name itself contains dots wins over the nested reading. Without ``default`` a missing
    key raises KeyError naming the part that is missing.
    """
    if key in row:
        return row[key]
    value: Any = row
    for part in key.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        else:
            if default is not _MISSING:
                return default
            raise KeyError(part)
    return value


def has_root(columns: list[str], key: str) -> bool:
    """Whether a (possibly dotted) key can be found given the file's top-level columns."""
    return key in columns or key.split(".")[0] in columns


def to_messages(value: Any, where: str, prompt_key: str) -> list[dict[str, str]]:
    """A prompt cell as chat messages: a list of ``{"role", "content"}`` is kept, a string becomes one user message."""
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if isinstance(value, (list, tuple)) and value:
        messages = []
        for i, msg in enumerate(value):
            if not (isinstance(msg, dict) and isinstance(msg.get("role"), str) and isinstance(msg.get("content"), str)):
                raise DataError(
                    f"{where}: {prompt_key!r} message {i} must be a dict with string 'role' and 'content', "
                    f"got {msg!r:.200}"
                )
            messages.append({"role": msg["role"], "content": msg["content"]})
        return messages
    raise DataError(
        f"{where}: {prompt_key!r} must be text or a non-empty list of chat messages, "
        f"got {type(value).__name__} {value!r:.200}"
    )


def with_system_prompt(messages: list[dict[str, str]], system_prompt: str | None) -> list[dict[str, str]]:
    """Put ``system_prompt`` first unless the row already starts with its own system message (the row's wins: it
    was written for that prompt)."""
    if not system_prompt or (messages and messages[0]["role"] == "system"):
        return messages
    return [{"role": "system", "content": system_prompt}, *messages]
