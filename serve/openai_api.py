"""The OpenAI-compatible HTTP surface of the rollout deployment: request checks and response shapes.

`/v1/chat/completions` and `/v1/completions`, with or without `stream` (server-sent events, as the `openai` client
reads them). Everything here is plain data: a request body in, `SamplingOptions` and prompts out, or an
`ApiError` naming the field (a 400, never a 500); responses and stream chunks are dicts in OpenAI's layout. The
deployment (`serve.deployment`) does the tokenizing and the generating.
"""

from __future__ import annotations

import hmac
import json
import time
import uuid
from dataclasses import dataclass
from typing import Any, Optional

from serve.types import SamplingOptions

DEFAULT_MAX_TOKENS = 256


class ApiError(ValueError):
    """A request the route cannot serve: HTTP `status`, OpenAI's error body naming `param`."""

    def __init__(self, message: str, param: Optional[str] = None, status: int = 400):
        super().__init__(message)
        self.param, self.status = param, status

    def body(self) -> dict:
        return {"error": {"message": str(self), "type": "invalid_request_error", "param": self.param, "code": None}}


def check_bearer(authorization: Optional[str], api_key: Optional[str]) -> None:
    """Raise a 401 ApiError unless `api_key` is None or the Authorization header is `Bearer <api_key>` (compared in
    constant time, so the reply's timing does not leak the key)."""
    if api_key is None:
        return
    given = (authorization or "").encode()
    if not hmac.compare_digest(given, f"Bearer {api_key}".encode()):
        raise ApiError(
            "a valid API key is required: send 'Authorization: Bearer <key>' (rollout.http_api_key or "
            "RAYRL_API_KEY on the server)",
            status=401,
        )


@dataclass(frozen=True)
class ParsedRequest:
    sampling: SamplingOptions
    stream: bool
    include_usage: bool  # stream_options.include_usage: a last chunk with the token counts


def _number(body: dict, name: str, default: float, low: float, high: float, low_open: bool = False) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ApiError(f"'{name}' must be a number, got {value!r}", name)
    if value < low or (low_open and value == low) or value > high:
        interval = f"{'(' if low_open else '['}{low}, {high}]"
        raise ApiError(f"'{name}'={value} must lie in {interval}", name)
    return float(value)


def _integer(body: dict, name: str, default: Optional[int], low: int) -> Optional[int]:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise ApiError(f"'{name}' must be an integer, got {value!r}", name)
    if value < low:
        raise ApiError(f"'{name}'={value} must be at least {low}", name)
    return value


def parse_sampling(body: dict, max_tokens_keys: tuple[str, ...] = ("max_tokens",)) -> ParsedRequest:
    """OpenAI's sampling fields -> `SamplingOptions`; `temperature` 0 is greedy. Unknown fields are ignored, as
    the OpenAI API does for fields a model does not use."""
    if not isinstance(body, dict):
        raise ApiError("the request body must be a JSON object")
    max_tokens = None
    for key in max_tokens_keys:
        max_tokens = max_tokens or _integer(body, key, None, 1)
    temperature = _number(body, "temperature", 1.0, 0.0, 2.0)
    top_p = _number(body, "top_p", 1.0, 0.0, 1.0, low_open=True)
    n = _integer(body, "n", 1, 1)
    seed = _integer(body, "seed", None, -(2**63))
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise ApiError(f"'stream' must be true or false, got {stream!r}", "stream")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise ApiError(f"'stream_options' must be an object, got {options!r}", "stream_options")
    sampling = SamplingOptions(
        max_tokens=max_tokens or DEFAULT_MAX_TOKENS,
        temperature=temperature or 1.0,
        do_sample=temperature > 0,
        top_p=top_p,
        n=n,
        seed=seed,
    )
    return ParsedRequest(sampling, stream, bool(options.get("include_usage", False)))


def parse_messages(body: dict) -> list[dict]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError("'messages' must be a non-empty list of {role, content}", "messages")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise ApiError(f"'messages[{i}]' must be an object with a string 'role'", f"messages[{i}]")
        # an assistant turn that only called tools may have no content (the OpenAI client sends null)
        calls_only = message.get("content") is None and isinstance(message.get("tool_calls"), list)
        if not isinstance(message.get("content"), str) and not calls_only:
            raise ApiError(f"'messages[{i}].content' must be a string", f"messages[{i}].content")
    return messages


def parse_tools(body: dict) -> Optional[list[dict]]:
    """`tools`: OpenAI function tools, handed to the model's chat template as they are (None when absent)."""
    tools = body.get("tools")
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise ApiError(
            "'tools' must be a list of {type: 'function', function: {name, description, parameters}}", "tools"
        )
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type") != "function":
            raise ApiError(f"'tools[{i}].type' must be 'function'", f"tools[{i}].type")
        function = tool.get("function")
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise ApiError(f"'tools[{i}].function' must be an object with a string 'name'", f"tools[{i}].function")
    return tools


def parse_prompts(body: dict) -> list[Any]:
    """`/v1/completions`' prompt: a string, a list of strings, a list of token ids or a list of such lists."""
    prompt = body.get("prompt")
    if isinstance(prompt, str) and prompt:
        return [prompt]
    if isinstance(prompt, list) and prompt:
        if all(isinstance(p, str) and p for p in prompt):
            return list(prompt)
        if all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            return [list(prompt)]
        if all(isinstance(p, list) and p and all(isinstance(t, int) for t in p) for p in prompt):
            return [list(p) for p in prompt]
    raise ApiError("'prompt' must be a non-empty string, a list of them, or token ids", "prompt")


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def chat_response(
    rid: str, model: str, version: int, texts: list[tuple[str, str]], prompt_tokens: int, completion_tokens: int
) -> dict:
    """`texts`: (content, finish_reason) per choice."""
    return {
        "id": rid,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": f"policy-v{version}",
        "choices": [
            {"index": i, "message": {"role": "assistant", "content": text}, "finish_reason": reason}
            for i, (text, reason) in enumerate(texts)
        ],
        "usage": usage(prompt_tokens, completion_tokens),
    }


def completion_response(
    rid: str, model: str, version: int, texts: list[tuple[str, str]], prompt_tokens: int, completion_tokens: int
) -> dict:
    return {
        "id": rid,
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": f"policy-v{version}",
        "choices": [
            {"index": i, "text": text, "logprobs": None, "finish_reason": reason}
            for i, (text, reason) in enumerate(texts)
        ],
        "usage": usage(prompt_tokens, completion_tokens),
    }


def chat_chunk(rid: str, model: str, version: int, index: int, delta: dict, finish_reason: Optional[str]) -> dict:
    return {
        "id": rid,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": f"policy-v{version}",
        "choices": [{"index": index, "delta": delta, "finish_reason": finish_reason}],
    }


def completion_chunk(rid: str, model: str, version: int, index: int, text: str, finish_reason: Optional[str]) -> dict:
    return {
        "id": rid,
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": f"policy-v{version}",
        "choices": [{"index": index, "text": text, "logprobs": None, "finish_reason": finish_reason}],
    }


def stream_chunk(
    kind: str,
    rid: str,
    model: str,
    version: int,
    index: int,
    text: Optional[str] = None,
    finish_reason: Optional[str] = None,
    role: bool = False,
) -> dict:
    """One piece of choice `index` of a `kind` ("chat" or "completion") stream: new `text`, the role that opens a
    chat choice, or (no text) the choice's end with its `finish_reason`."""
    if kind == "chat":
        delta = {"role": "assistant", "content": ""} if role else ({"content": text} if text is not None else {})
        return chat_chunk(rid, model, version, index, delta, finish_reason)
    return completion_chunk(rid, model, version, index, text or "", finish_reason)


def usage_chunk(chunk: dict, prompt_tokens: int, completion_tokens: int) -> dict:
    """The last chunk of a stream with `stream_options.include_usage`: no choices, the totals."""
    return {**chunk, "choices": [], "usage": usage(prompt_tokens, completion_tokens)}


def sse(payload: dict | str) -> str:
    """One server-sent event: `data: <json>` and a blank line (`[DONE]` ends the stream)."""
    return f"data: {payload if isinstance(payload, str) else json.dumps(payload)}\n\n"


class IncrementalText:
    """Text deltas of a growing token sequence. Decoding each token alone breaks characters and spaces that span
    tokens, so this decodes the whole sequence and emits the new suffix, holding back a trailing replacement
    character (a multi-byte character not yet complete)."""

    def __init__(self, tokenizer):
        self._tokenizer = tokenizer
        self._ids: list[int] = []
        self._sent = 0

    def add(self, token_ids: list[int], final: bool = False) -> str:
        self._ids.extend(token_ids)
        text = self._tokenizer.decode(self._ids, skip_special_tokens=True)
        end = len(text) if final or not text.endswith("\ufffd") else len(text.rstrip("\ufffd"))
        delta, self._sent = text[self._sent : end], max(self._sent, end)
        return delta

    @property
    def token_count(self) -> int:
        return len(self._ids)
