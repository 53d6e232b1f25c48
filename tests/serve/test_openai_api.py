"""The OpenAI-compatible route's request checks and response shapes (`serve.openai_api`), without a server."""

from __future__ import annotations

import json

import pytest

from serve import http_access, openai_api
from serve.openai_api import ApiError, IncrementalText, parse_messages, parse_prompts, parse_sampling


def test_sampling_fields_map_to_options_and_temperature_zero_is_greedy():
    parsed = parse_sampling(
        {
            "temperature": 0,
            "max_completion_tokens": 7,
            "max_tokens": 99,
            "n": 3,
            "seed": 5,
            "stream": True,
            "stream_options": {"include_usage": True},
            "frequency_penalty": 0,
        },
        ("max_completion_tokens", "max_tokens"),
    )
    s = parsed.sampling
    assert s.greedy and (s.max_tokens, s.n, s.seed) == (7, 3, 5)  # the newer name wins, as in OpenAI's API
    assert parsed.stream and parsed.include_usage
    sampled = parse_sampling({"temperature": 0.7, "top_p": 0.9}).sampling
    assert sampled.do_sample and (sampled.temperature, sampled.top_p) == (0.7, 0.9)
    assert sampled.max_tokens == openai_api.DEFAULT_MAX_TOKENS and not parse_sampling({}).stream


@pytest.mark.parametrize(
    "body, param",
    [
        ({"temperature": "hot"}, "temperature"),
        ({"temperature": 2.5}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": 1.5}, "max_tokens"),
        ({"n": 0}, "n"),
        ({"n": True}, "n"),
        ({"stream": "yes"}, "stream"),
        ({"stream_options": [1]}, "stream_options"),
    ],
)
def test_bad_sampling_fields_are_400s_naming_the_field(body, param):
    with pytest.raises(ApiError) as err:
        parse_sampling(body)
    assert err.value.status == 400 and err.value.param == param and f"'{param}'" in str(err.value)
    assert err.value.body()["error"]["param"] == param


def test_messages_and_prompts_are_checked():
    assert parse_messages({"messages": [{"role": "user", "content": "hi"}]})[0]["content"] == "hi"
    for body, param in (
        ({"messages": "hi"}, "messages"),
        ({"messages": []}, "messages"),
        ({"messages": [{"content": "hi"}]}, "messages[0]"),
        ({"messages": [{"role": "user", "content": None}]}, "messages[0].content"),
    ):
        with pytest.raises(ApiError) as err:
            parse_messages(body)
        assert err.value.param == param
    assert parse_prompts({"prompt": "a"}) == ["a"]
    assert parse_prompts({"prompt": ["a", "b"]}) == ["a", "b"]
    assert parse_prompts({"prompt": [1, 2]}) == [[1, 2]]
    assert parse_prompts({"prompt": [[1], [2, 3]]}) == [[1], [2, 3]]
    for bad in (None, "", [], ["a", ""], [1, "a"], [[]], {"p": 1}):  # an empty prompt would fail in the engine
        with pytest.raises(ApiError, match="'prompt'"):
            parse_prompts({"prompt": bad})


class _ByteTokenizer:
    """Token i is byte i: a multi-byte UTF-8 character spans several tokens, as in byte-level BPE."""

    def decode(self, ids, skip_special_tokens=True):
        return bytes(ids).decode("utf-8", errors="replace")


def test_incremental_text_holds_back_half_characters():
    text = IncrementalText(_ByteTokenizer())
    euro = list("€".encode())  # three bytes
    assert text.add(list(b"ab")) == "ab"
    assert text.add(euro[:2]) == ""  # an incomplete character is not sent as a replacement mark
    assert text.add(euro[2:] + list(b"c")) == "€c"
    assert text.add([0xE2], final=True) == "\ufffd"  # at the end, what is there is sent
    assert text.token_count == 7


def test_stream_pieces_follow_openai_layout():
    opening = openai_api.stream_chunk("chat", "id", "m", 3, 1, role=True)
    assert opening["object"] == "chat.completion.chunk" and opening["choices"][0]["delta"] == {
        "role": "assistant",
        "content": "",
    }
    end = openai_api.stream_chunk("chat", "id", "m", 3, 1, finish_reason="stop")
    assert end["choices"][0] == {"index": 1, "delta": {}, "finish_reason": "stop"}
    piece = openai_api.stream_chunk("completion", "id", "m", 3, 0, "xy")
    assert piece["object"] == "text_completion" and piece["choices"][0]["text"] == "xy"
    assert piece["system_fingerprint"] == "policy-v3"
    last = openai_api.usage_chunk(piece, 4, 6)
    assert last["choices"] == [] and last["usage"] == {"prompt_tokens": 4, "completion_tokens": 6, "total_tokens": 10}
    assert openai_api.sse(piece) == f"data: {json.dumps(piece)}\n\n" and openai_api.sse("[DONE]") == "data: [DONE]\n\n"


def test_bearer_check_takes_exactly_the_key():
    openai_api.check_bearer(None, None)  # no key configured: open
    openai_api.check_bearer("Bearer k1", "k1")
    for header in (None, "", "k1", "Bearer k2", "bearer k1", "Bearer k1 "):
        with pytest.raises(ApiError, match="a valid API key is required") as err:
            openai_api.check_bearer(header, "k1")
        assert err.value.status == 401


def test_a_key_is_needed_beyond_loopback_from_the_config_or_the_environment(monkeypatch):
    from types import SimpleNamespace

    monkeypatch.delenv("RAYRL_API_KEY", raising=False)
    assert http_access.http_api_key(SimpleNamespace(http_host="127.0.0.1", http_api_key=None)) is None
    with pytest.raises(ValueError, match=r"http_host='0\.0\.0\.0' exposes the OpenAI routes .* RAYRL_API_KEY"):
        http_access.http_api_key(SimpleNamespace(http_host="0.0.0.0", http_api_key=None))
    assert http_access.http_api_key(SimpleNamespace(http_host="0.0.0.0", http_api_key="cfg")) == "cfg"
    monkeypatch.setenv("RAYRL_API_KEY", "env")
    assert http_access.http_api_key(SimpleNamespace(http_host="0.0.0.0", http_api_key=None)) == "env"
    assert http_access.http_api_key(SimpleNamespace(http_host="0.0.0.0", http_api_key="cfg")) == "cfg"  # config wins
    assert http_access.http_api_key(SimpleNamespace(http_host="127.0.0.1", http_api_key=None)) == "env"  # then enforced
