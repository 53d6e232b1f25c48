import pytest

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


def test_every_format_refuses_nothing_else_and_an_unknown_format_is_named():
    with pytest.raises(
        ValueError, match=r"'gpt-oss' is not supported; supported: \('hermes', 'llama3_json', 'mistral'\)"
    ):
        parse_tool_calls("hi", "gpt-oss")


# llama3_json: the whole turn is one JSON object (or several, separated by ";"), optionally after <|python_tag|>


def test_llama3_json_one_call_with_and_without_the_python_tag():
    call = '{"name": "calculator", "parameters": {"expression": "2*3"}}'
    assert parse_tool_calls(call, "llama3_json") == [ToolCall("calculator", {"expression": "2*3"})]
    assert parse_tool_calls(f"<|python_tag|>{call}\n", "llama3_json") == [ToolCall("calculator", {"expression": "2*3"})]


def test_llama3_json_several_calls_and_arguments_spelled_either_way():
    text = (
        '{"name": "calculator", "parameters": {"expression": "1+1"}}; '
        '{"name": "python", "arguments": "{\\"code\\": \\"print(1)\\"}"}\n{"name": "clock"}'
    )
    assert parse_tool_calls(text, "llama3_json") == [
        ToolCall("calculator", {"expression": "1+1"}),
        ToolCall("python", {"code": "print(1)"}),
        ToolCall("clock", {}),
    ]


def test_llama3_json_bad_json_and_missing_name_are_bad_calls():
    [bad] = parse_tool_calls('{"name": "calculator", "parameters": {', "llama3_json")
    assert isinstance(bad, BadToolCall) and "not valid JSON" in bad.error
    [nameless] = parse_tool_calls('{"parameters": {"expression": "1"}}', "llama3_json")
    assert nameless == BadToolCall(
        '{"parameters": {"expression": "1"}}', 'expected a JSON object {"name": ..., "parameters": {...}}'
    )
    [good, trailing] = parse_tool_calls('{"name": "c"} then some text', "llama3_json")
    assert good == ToolCall("c", {}) and "not valid JSON" in trailing.error
    [tag_only] = parse_tool_calls("<|python_tag|>print(1)", "llama3_json")  # the tag announced a call
    assert tag_only.raw == "print(1)" and "JSON object" in tag_only.error


def test_llama3_json_text_is_an_answer():
    assert parse_tool_calls("The answer is 6.\n#### 6", "llama3_json") == []
    assert parse_tool_calls('I would call {"name": "calculator"} but no.', "llama3_json") == []  # not the whole turn


# mistral: [TOOL_CALLS] and a JSON list of {"name", "arguments"}


def test_mistral_calls_in_order():
    text = (
        '[TOOL_CALLS] [{"name": "calculator", "arguments": {"expression": "2*3"}}, '
        '{"name": "python", "arguments": "{\\"code\\": \\"print(1)\\"}"}]'
    )
    assert parse_tool_calls(text, "mistral") == [
        ToolCall("calculator", {"expression": "2*3"}),
        ToolCall("python", {"code": "print(1)"}),
    ]
    one = '[TOOL_CALLS]{"name": "calculator", "arguments": {"expression": "1"}}'  # a single object, no list
    assert parse_tool_calls(one, "mistral") == [ToolCall("calculator", {"expression": "1"})]


def test_mistral_bad_json_missing_name_and_wrong_shape_are_bad_calls():
    [bad] = parse_tool_calls('[TOOL_CALLS][{"name": "calculator", "arguments": {', "mistral")
    assert isinstance(bad, BadToolCall) and "not valid JSON" in bad.error
    good, nameless = parse_tool_calls('[TOOL_CALLS][{"name": "c", "arguments": {}}, {"arguments": {}}]', "mistral")
    assert good == ToolCall("c", {})
    assert nameless == BadToolCall('{"arguments": {}}', 'expected a JSON object {"name": ..., "arguments": {...}}')
    [scalar] = parse_tool_calls('[TOOL_CALLS] "calculator"', "mistral")
    assert "JSON list" in scalar.error
    [args] = parse_tool_calls('[TOOL_CALLS][{"name": "c", "arguments": [1]}]', "mistral")
    assert "arguments must be a JSON object, got list" in args.error


def test_mistral_text_is_an_answer():
    assert parse_tool_calls("The answer is 6.\n#### 6", "mistral") == []
    assert parse_tool_calls('[{"name": "calculator", "arguments": {}}]', "mistral") == []  # no [TOOL_CALLS]
