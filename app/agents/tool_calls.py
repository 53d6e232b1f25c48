"""Tool calls in the model's text, Hermes format: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, any number
of them, anywhere in the turn. A call that does not parse is kept as a `BadToolCall`, which the runner answers with
an error message, so the policy sees what it got wrong."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Union

FORMATS = ("hermes",)
_OPEN, _CLOSE = "<tool_call>", "</tool_call>"
_CALL = re.compile(re.escape(_OPEN) + r"(.*?)" + re.escape(_CLOSE), re.DOTALL)


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class BadToolCall:
    raw: str
    error: str  # why it did not parse, for the error message the model reads


ParsedCall = Union[ToolCall, BadToolCall]


def parse_tool_calls(text: str, fmt: str = "hermes") -> list[ParsedCall]:
    """The calls in `text`, in order; [] when there are none (the model answered)."""
    if fmt not in FORMATS:
        raise ValueError(f"tool-call format {fmt!r} is not supported; supported: {FORMATS}")
    calls: list[ParsedCall] = [_parse_one(m.group(1)) for m in _CALL.finditer(text)]
    tail = _CALL.sub("", text)
    if _OPEN in tail:  # opened and never closed: the model meant a call
        raw = tail[tail.index(_OPEN) + len(_OPEN) :]
        calls.append(BadToolCall(raw.strip(), f"{_OPEN} without {_CLOSE}"))
    return calls


def _parse_one(raw: str) -> ParsedCall:
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as e:
        return BadToolCall(raw.strip(), f"not valid JSON: {e.msg} at character {e.pos}")
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        return BadToolCall(raw.strip(), 'expected a JSON object {"name": ..., "arguments": {...}}')
    arguments = data.get("arguments", {})
    if isinstance(arguments, str):  # some models send the arguments object as a JSON string
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError as e:
            return BadToolCall(raw.strip(), f"arguments is a string that is not valid JSON: {e.msg}")
    if not isinstance(arguments, dict):
        return BadToolCall(raw.strip(), f"arguments must be a JSON object, got {type(arguments).__name__}")
    return ToolCall(data["name"], arguments)
