"""`serve.openai_routes.OpenAIRoutes` behind a FastAPI app, without Serve: the key check, the completions layout
with the replica's policy version, and a streamed answer's events; the engine and tokenizer are stand-ins."""

from __future__ import annotations

import json

from fastapi import FastAPI, Request
from fastapi.testclient import TestClient

from serve.openai_routes import OpenAIRoutes
from serve.replica_gate import ReplicaGate
from serve.types import GeneratedSequence, TokenDelta

KEY = "secret"


class LetterTokenizer:
    """Each character is a token: its code point."""

    def encode(self, text):
        return [ord(c) for c in text]

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(i) for i in ids)


class EchoEngine:
    """Answers each prompt with the prompt reversed, once per sample; records the prompts it saw."""

    def __init__(self):
        self.prompts = []

    async def generate(self, prompts, sampling):
        self.prompts.extend(prompts)
        return [[GeneratedSequence(list(reversed(p)), [0.0] * len(p), "stop")] * sampling.n for p in prompts]

    async def stream(self, prompt, sampling):
        yield [TokenDelta(0, list(reversed(prompt))[:1], None)]
        yield [TokenDelta(0, list(reversed(prompt))[1:], "stop")]


def client(engine, version=3) -> TestClient:
    routes = OpenAIRoutes(
        engine=engine,
        gate=ReplicaGate("r1"),
        replica="r1",
        served_model_name="policy",
        tokenizer_path="unused",
        api_key=KEY,
        version=lambda: version,
    )
    routes._tokenizer = LetterTokenizer()  # what _chat_tokenizer would read from model_path
    app = FastAPI()

    async def completions(request: Request):
        return await routes.completions(request)

    async def models(request: Request):
        return await routes.models(request)

    app.post("/v1/completions")(completions)
    app.get("/v1/models")(models)
    return TestClient(app)


def test_a_request_without_the_key_is_refused_and_reaches_no_engine():
    engine = EchoEngine()
    reply = client(engine).post("/v1/completions", json={"model": "policy", "prompt": "abc"})
    assert reply.status_code == 401 and "API key" in reply.json()["error"]["message"]
    assert engine.prompts == []


def test_completions_answer_each_sample_with_the_served_policy_version():
    engine = EchoEngine()
    reply = client(engine, version=3).post(
        "/v1/completions",
        headers={"Authorization": f"Bearer {KEY}"},
        json={"model": "policy", "prompt": "abc", "n": 2, "max_tokens": 4},
    )
    body = reply.json()
    assert reply.status_code == 200, body
    assert engine.prompts == [[97, 98, 99]]  # the prompt tokenized by the replica's tokenizer
    assert [c["text"] for c in body["choices"]] == ["cba", "cba"]  # the engine's reversal, decoded, per sample
    assert body["system_fingerprint"] == "policy-v3"
    assert body["usage"]["prompt_tokens"] == 3 and body["usage"]["completion_tokens"] == 6


def test_a_streamed_completion_sends_the_text_as_it_grows_then_done():
    reply = client(EchoEngine()).post(
        "/v1/completions",
        headers={"Authorization": f"Bearer {KEY}"},
        json={"model": "policy", "prompt": "abc", "stream": True, "max_tokens": 4},
    )
    events = [line.removeprefix("data: ") for line in reply.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert "".join(c["choices"][0].get("text") or "" for c in chunks) == "cba"
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_models_names_the_served_model_and_its_policy_version():
    reply = client(EchoEngine(), version=7).get("/v1/models", headers={"Authorization": f"Bearer {KEY}"})
    assert reply.json()["data"][0] == {"id": "policy", "object": "model", "owned_by": "rayrl", "policy_version": 7}


class TemplateTokenizer(LetterTokenizer):
    """A chat tokenizer whose template writes each message's content and the names of the tools it was given."""

    def apply_chat_template(self, messages, tools=None, add_generation_prompt=True, tokenize=True):
        names = ",".join(t["function"]["name"] for t in tools or [])
        return self.encode(f"[{names}]" + "|".join(m.get("content") or "" for m in messages))


def chat_client(engine) -> TestClient:
    routes = OpenAIRoutes(
        engine=engine,
        gate=ReplicaGate("r1"),
        replica="r1",
        served_model_name="policy",
        tokenizer_path="unused",
        api_key=None,
        version=lambda: 0,
    )
    routes._tokenizer = TemplateTokenizer()
    app = FastAPI()

    async def chat(request: Request):
        return await routes.chat_completions(request)

    app.post("/v1/chat/completions")(chat)
    return TestClient(app)


CALCULATOR = {
    "type": "function",
    "function": {"name": "calculator", "description": "arithmetic", "parameters": {"type": "object", "properties": {}}},
}


def test_chat_tools_reach_the_chat_template_and_a_tool_call_turn_may_have_no_content():
    engine = EchoEngine()
    messages = [
        {"role": "user", "content": "12*34"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "calculator", "arguments": '{"expression": "12*34"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "408"},
    ]
    done = chat_client(engine).post("/v1/chat/completions", json={"messages": messages, "tools": [CALCULATOR]})
    assert done.status_code == 200, done.text
    # the template saw the tool's name and the three turns (the tool-call turn's content empty)
    assert LetterTokenizer().decode(engine.prompts[0]) == "[calculator]12*34||408"


def test_malformed_tools_are_refused_naming_the_entry():
    engine = EchoEngine()
    bad = chat_client(engine).post(
        "/v1/chat/completions",
        json={
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [CALCULATOR, {"type": "function", "function": {}}],
        },
    )
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "tools[1].function"
    assert engine.prompts == []
