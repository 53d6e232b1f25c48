import threading

import pytest

from app.agents.tool_base import BaseTool, FunctionSchema, ToolSchema
from app.agents.tool_calls import BadToolCall, ToolCall
from app.agents.tool_runner import TRUNCATION_MARK, ToolRunner, truncate


class EchoTool(BaseTool):
    def execute(self, instance_id, parameters, **kwargs):
        return f"{instance_id}:{parameters['text']}", 0.5, {"n": 1}


class AsyncEchoTool(BaseTool):  # verl writes its tools' methods as coroutines
    async def execute(self, instance_id, parameters, **kwargs):
        return parameters["text"].upper(), 0.0, {}


class FailingTool(BaseTool):
    def execute(self, instance_id, parameters, **kwargs):
        raise KeyError("boom")


class HangingTool(BaseTool):
    def __init__(self, config, schema):
        super().__init__(config, schema)
        self.release_event = threading.Event()

    def execute(self, instance_id, parameters, **kwargs):
        self.release_event.wait()  # hangs until the test lets it go
        return "late", 0.0, {}


def tool(cls, name):
    return cls({}, ToolSchema(FunctionSchema(name)))


def runner(**kwargs):
    tools = {
        "echo": tool(EchoTool, "echo"),
        "aecho": tool(AsyncEchoTool, "aecho"),
        "fail": tool(FailingTool, "fail"),
        "hang": tool(HangingTool, "hang"),
    }
    return ToolRunner(tools, **kwargs), tools


IDS = {"echo": "e1", "aecho": "a1", "fail": "f1", "hang": "h1"}


def test_answers_in_call_order_sync_and_async():
    run, _ = runner(max_parallel_calls=2)
    results = run.run([ToolCall("echo", {"text": "hi"}), ToolCall("aecho", {"text": "yo"})], IDS)
    assert [(r.name, r.content, r.error, r.reward) for r in results] == [
        ("echo", "e1:hi", None, 0.5),
        ("aecho", "YO", None, 0.0),
    ]


def test_errors_become_messages_and_counted_kinds():
    run, tools = runner(max_parallel_calls=3, timeout_s=0.2)
    try:
        results = run.run(
            [
                ToolCall("fail", {}),
                ToolCall("hang", {}),
                ToolCall("nope", {}),
                ToolCall("echo", {"text": "over the limit"}),
            ],
            IDS,
        )
    finally:
        tools["hang"].release_event.set()
    assert [r.error for r in results] == ["exception", "timeout", "unknown_tool", "too_many_calls"]
    assert results[0].content == "Error: tool 'fail' failed: KeyError: 'boom'"
    assert results[1].content == "Error: tool 'hang' did not answer within 0.2 s"
    assert "unknown tool 'nope'" in results[2].content and "'echo'" in results[2].content
    assert results[3].content == "Error: not run: at most 3 tool call(s) per turn"


def test_bad_json_call():
    run, _ = runner()
    [result] = run.run([BadToolCall('{"name": ', "not valid JSON: Expecting value at character 9")], IDS)
    assert result.error == "bad_call"
    assert result.content == "Error: could not parse the tool call: not valid JSON: Expecting value at character 9"


def test_truncation_sides_keep_what_verl_keeps():
    text = "0123456789"
    assert truncate(text, 10, "left") == text  # at the limit: untouched
    assert truncate(text, 4, "left") == "0123" + TRUNCATION_MARK
    assert truncate(text, 4, "right") == TRUNCATION_MARK + "6789"
    assert truncate(text, 5, "middle") == "01" + TRUNCATION_MARK + "789"


def test_runner_truncates_responses():
    run, _ = runner(max_response_length=4, truncate_side="right")
    [result] = run.run([ToolCall("echo", {"text": "abcdef"})], IDS)
    assert result.content == TRUNCATION_MARK + "cdef"
    with pytest.raises(ValueError, match="tool_response_truncate_side='top'"):
        ToolRunner({}, truncate_side="top")
