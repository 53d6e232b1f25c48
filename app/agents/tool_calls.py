"""Tool calls in the model's text, in the format `multi_turn.format` names:

- `hermes`: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, any number of them, anywhere in the turn;
- `llama3_json` (Llama 3.x): the whole turn is a JSON object `{"name": ..., "parameters": {...}}`, optionally after
  `<|python_tag|>`; several calls are objects one after another, separated by `;` or white space;
- `mistral`: `[TOOL_CALLS]` and then a JSON list of `{"name": ..., "arguments": {...}}`.

A call that does not parse is kept as a `BadToolCall`, which the runner answers with an error message, so the policy
sees what it got wrong. `MARKERS` are the special tokens a format's calls start with: the agent loop keeps them when
it decodes a turn (it skips the other special tokens)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Union

FORMATS = ("hermes", "llama3_json", "mistral")
MARKERS = {"hermes": None, "llama3_json": "<|python_tag|>", "mistral": "[TOOL_CALLS]"}
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
    parser = _PARSERS.get(fmt)
    if parser is None:
        raise ValueError(f"tool-call format {fmt!r} is not supported; supported: {FORMATS}")
    return parser(text)


def _hermes(text: str) -> list[ParsedCall]:
    calls: list[ParsedCall] = [_parse_one(m.group(1), "arguments") for m in _CALL.finditer(text)]
    tail = _CALL.sub("", text)
    if _OPEN in tail:  # opened and never closed: the model meant a call
        raw = tail[tail.index(_OPEN) + len(_OPEN) :]
        calls.append(BadToolCall(raw.strip(), f"{_OPEN} without {_CLOSE}"))
    return calls


def _llama3_json(text: str) -> list[ParsedCall]:
    body = text.strip()
    tagged = body.startswith(MARKERS["llama3_json"])
    if tagged:
        body = body[len(MARKERS["llama3_json"]) :].strip()
    if not body.startswith("{"):  # a turn that is not a JSON object is an answer, unless the tag announced a call
        return [BadToolCall(body, 'expected a JSON object {"name": ..., "parameters": {...}}')] if tagged else []
    calls: list[ParsedCall] = []
    decoder = json.JSONDecoder()
    pos = 0
    while pos < len(body):
        try:
            data, end = decoder.raw_decode(body, pos)
        except json.JSONDecodeError as e:
            calls.append(BadToolCall(body[pos:].strip(), f"not valid JSON: {e.msg} at character {e.pos - pos}"))
            return calls
        calls.append(_call_from(data, body[pos:end], "parameters"))
        pos = end
        while pos < len(body) and (body[pos].isspace() or body[pos] == ";"):
            pos += 1
    return calls


def _mistral(text: str) -> list[ParsedCall]:
    marker = MARKERS["mistral"]
    if marker not in text:
        return []
    raw = text[text.index(marker) + len(marker) :].strip()
    try:
        data, _ = json.JSONDecoder().raw_decode(raw)
    except json.JSONDecodeError as e:
        return [BadToolCall(raw, f"not valid JSON: {e.msg} at character {e.pos}")]
    if isinstance(data, dict):  # one call without the list around it
        data = [data]
    if not isinstance(data, list):
        return [BadToolCall(raw, f'expected a JSON list of {{"name": ..., "arguments": {{...}}}} after {marker}')]
    return [_call_from(item, json.dumps(item), "arguments") for item in data]


def _parse_one(raw: str, arguments_key: str) -> ParsedCall:
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as e:
        return BadToolCall(raw.strip(), f"not valid JSON: {e.msg} at character {e.pos}")
    return _call_from(data, raw, arguments_key)


def _call_from(data: Any, raw: str, arguments_key: str) -> ParsedCall:
    """A call from a decoded JSON value; `arguments_key` is the format's name for the arguments ("arguments" is read
    too, for Llama models that write it instead of "parameters")."""
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        return BadToolCall(raw.strip(), f'expected a JSON object {{"name": ..., "{arguments_key}": {{...}}}}')
    arguments = data.get(arguments_key, data.get("arguments", {}))
    if isinstance(arguments, str):  # some models send the arguments object as a JSON string
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError as e:
            return BadToolCall(raw.strip(), f"{arguments_key} is a string that is not valid JSON: {e.msg}")
    if not isinstance(arguments, dict):
        return BadToolCall(raw.strip(), f"{arguments_key} must be a JSON object, got {type(arguments).__name__}")
    return ToolCall(data["name"], arguments)


_PARSERS: dict[str, Callable[[str], list[ParsedCall]]] = {
    "hermes": _hermes,
    "llama3_json": _llama3_json,
    "mistral": _mistral,
}
