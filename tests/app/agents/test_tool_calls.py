from app.agents.tool_calls import BadToolCall, ToolCall, parse_tool_calls


def test_hermes_calls_in_order_with_string_arguments():
    text = (
        'Let me compute.\n<tool_call>{"name": "calculator", "arguments": {"expression": "2*3"}}</tool_call>'
        '<tool_call>\n{"name": "python", "arguments": "{\\"code\\": \\"print(1)\\"}"}\n</tool_call>'
    )
    assert parse_tool_calls(text) == [
        ToolCall("calculator", {"expression": "2*3"}),
        ToolCall("python", {"code": "print(1)"}),
    ]


def test_no_call_is_an_answer():
    assert parse_tool_calls("The answer is 6.\n#### 6") == []


def test_bad_json_wrong_shape_and_unclosed_calls_are_kept_as_bad_calls():
    calls = parse_tool_calls(
        '<tool_call>{"name": "calculator", "arguments": {</tool_call>'
        '<tool_call>["calculator"]</tool_call>'
        '<tool_call>{"name": "c", "arguments": [1]}</tool_call>'
        '<tool_call>{"name": "calculator"'
    )
    assert [type(c) for c in calls] == [BadToolCall] * 4
    assert "not valid JSON" in calls[0].error
    assert "JSON object" in calls[1].error
    assert "arguments must be a JSON object" in calls[2].error
    assert "without </tool_call>" in calls[3].error
