"""Runs one assistant turn's tool calls: in parallel up to `max_parallel_calls`, each within a timeout. Nothing a tool
does ends the run: an exception, a hang, bad JSON, an unknown tool or a call over the limit becomes an error message
in the conversation and a counted error. Responses are cut to `max_tool_response_length` characters."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

from app.agents.tool_base import BaseTool, call_tool, execute_result_text
from app.agents.tool_calls import BadToolCall, ParsedCall

TRUNCATE_SIDES = ("left", "middle", "right")
TRUNCATION_MARK = "...(truncated)..."
ERROR_KINDS = ("bad_call", "unknown_tool", "too_many_calls", "exception", "timeout")


@dataclass
class ToolResult:
    name: str  # the tool called ("" when the call did not parse)
    content: str  # what the model reads, truncated
    error: Optional[str] = None  # one of ERROR_KINDS, None when the tool answered
    reward: float = 0.0
    metrics: dict[str, Any] = field(default_factory=dict)


def truncate(text: str, limit: int, side: str) -> str:
    """`text` cut to about `limit` characters: "left" keeps its start, "right" its end, "middle" both ends (verl's
    meaning: the side named is the one kept whole up to the limit)."""
    if len(text) <= limit:
        return text
    if side == "left":
        return text[:limit] + TRUNCATION_MARK
    if side == "right":
        return TRUNCATION_MARK + text[len(text) - limit :]
    if side == "middle":
        head = limit // 2
        return text[:head] + TRUNCATION_MARK + text[len(text) - (limit - head) :]
    raise ValueError(f"tool_response_truncate_side={side!r}: one of {TRUNCATE_SIDES}")


class ToolRunner:
    def __init__(
        self,
        tools: Mapping[str, BaseTool],
        *,
        max_parallel_calls: int = 1,
        timeout_s: float = 30.0,
        max_response_length: int = 256,
        truncate_side: str = "middle",
    ):
        if truncate_side not in TRUNCATE_SIDES:
            raise ValueError(f"tool_response_truncate_side={truncate_side!r}: one of {TRUNCATE_SIDES}")
        if max_parallel_calls < 1 or max_response_length < 1 or timeout_s <= 0:
            raise ValueError("max_parallel_calls and max_response_length must be >= 1 and timeout_s > 0")
        self.tools = dict(tools)
        self.max_parallel_calls = max_parallel_calls
        self.timeout_s = timeout_s
        self.max_response_length = max_response_length
        self.truncate_side = truncate_side

    def run(
        self,
        calls: Sequence[ParsedCall],
        instance_ids: Mapping[str, str],
        execute_kwargs: Optional[Mapping[str, Mapping[str, Any]]] = None,
    ) -> list[ToolResult]:
        """One result per call, in call order. `instance_ids`: {tool name: the trajectory's instance of it}."""
        execute_kwargs = execute_kwargs or {}
        results: list[Optional[ToolResult]] = [None] * len(calls)
        threads: list[tuple[int, threading.Thread, dict, float]] = []
        for i, call in enumerate(calls):
            if i >= self.max_parallel_calls:
                results[i] = self._error(
                    "", "too_many_calls", f"not run: at most {self.max_parallel_calls} tool call(s) per turn"
                )
            elif isinstance(call, BadToolCall):
                results[i] = self._error("", "bad_call", f"could not parse the tool call: {call.error}")
            elif call.name not in self.tools:
                results[i] = self._error(
                    call.name, "unknown_tool", f"unknown tool {call.name!r}; tools: {sorted(self.tools)}"
                )
            else:
                box: dict = {}
                tool = self.tools[call.name]
                # a daemon thread per call: one that hangs past its timeout is abandoned, never joined
                thread = threading.Thread(
                    target=_execute,
                    daemon=True,
                    name=f"tool-{call.name}",
                    args=(tool, instance_ids[call.name], call.arguments, dict(execute_kwargs.get(call.name, {})), box),
                )
                thread.start()
                threads.append((i, thread, box, time.monotonic() + self.timeout_s))
        for i, thread, box, deadline in threads:  # each call gets timeout_s from its own start
            thread.join(max(0.0, deadline - time.monotonic()))
            name = calls[i].name
            if thread.is_alive() or "done" not in box:
                results[i] = self._error(name, "timeout", f"tool {name!r} did not answer within {self.timeout_s:g} s")
            elif "exception" in box:
                e = box["exception"]
                results[i] = self._error(name, "exception", f"tool {name!r} failed: {type(e).__name__}: {e}")
            else:
                text, reward, metrics = box["result"]
                results[i] = ToolResult(
                    name, truncate(text, self.max_response_length, self.truncate_side), reward=reward, metrics=metrics
                )
        return results  # type: ignore[return-value]

    def _error(self, name: str, kind: str, message: str) -> ToolResult:
        return ToolResult(name, truncate("Error: " + message, self.max_response_length, self.truncate_side), kind)


def _execute(tool: BaseTool, instance_id: str, arguments: dict, kwargs: dict, box: dict) -> None:
    try:
        box["result"] = execute_result_text(call_tool(tool.execute, instance_id, arguments, **kwargs))
    except BaseException as e:  # the tool's own failure, reported to the model; never raised into the rollout
        box["exception"] = e
    box["done"] = True
