"""The OpenAI-compatible HTTP routes of a rollout replica: POST /v1/chat/completions and /v1/completions (one JSON
body, or server-sent events with `stream`), GET /v1/models, under the application's route prefix.

`http_app` is the FastAPI app the Serve deployment (`serve.deployment.RolloutServer`) is the ingress of; Serve wants
the route functions on the deployment class, so each one there hands its request to this module's `OpenAIRoutes`,
which does the work: the API key, the body, tokenising (the chat template for chat), generating with the policy the
replica serves, and OpenAI's response layout (`serve.openai_api`).
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any, Callable, Optional

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from serve import openai_api
from serve.replica_gate import ReplicaGate, RolloutAsleep

http_app = FastAPI(title="rayrl rollout")


async def json_body(request: Request) -> dict:
    try:
        body = await request.json()
    except ValueError as err:
        raise openai_api.ApiError(f"the request body is not JSON: {err}") from None
    if not isinstance(body, dict):
        raise openai_api.ApiError("the request body must be a JSON object")
    return body


class OpenAIRoutes:
    """One replica's answers to the HTTP routes.

    `engine`: the replica's rollout engine; `gate`: its generate/update gate, so a policy version never changes under
    an answer; `version`: the policy version the replica serves now; `api_key` None: the routes are open (loopback
    only; `serve.deploy_rollout` refuses otherwise); `tokenizer_path`: the folder the tokenizer is read from, on first
    use."""

    def __init__(
        self,
        *,
        engine: Any,
        gate: ReplicaGate,
        replica: str,
        served_model_name: str,
        tokenizer_path: str,
        api_key: Optional[str],
        version: Callable[[], int],
        chat_template: Optional[str] = None,
    ) -> None:
        """`chat_template`: the run's custom chat template (model.custom_chat_template); None: the tokenizer's."""
        self._engine, self._gate, self._replica = engine, gate, replica
        self._served_model_name, self._tokenizer_path, self._api_key = served_model_name, tokenizer_path, api_key
        self._chat_template = chat_template
        self._version = version
        self._tokenizer = None

    async def models(self, request: Request):
        try:
            openai_api.check_bearer(request.headers.get("authorization"), self._api_key)
        except openai_api.ApiError as err:
            return JSONResponse(status_code=err.status, content=err.body())
        return {
            "object": "list",
            "data": [
                {
                    "id": self._served_model_name,
                    "object": "model",
                    "owned_by": "rayrl",
                    "policy_version": self._version(),
                }
            ],
        }

    async def chat_completions(self, request: Request):
        try:
            body = await self._authorized_body(request)
            messages = openai_api.parse_messages(body)
            tools = openai_api.parse_tools(body)
            parsed = openai_api.parse_sampling(body, ("max_completion_tokens", "max_tokens"))
            tokenizer = await self._chat_tokenizer()
            try:  # the template renders the tools as the model was taught to see them (a template may ignore them)
                prompt = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=True)
            except Exception as err:  # e.g. a role the model's chat template does not know
                raise openai_api.ApiError(
                    f"'messages' do not fit the model's chat template: {err}", "messages"
                ) from err
            prompt = list(prompt["input_ids"] if isinstance(prompt, dict) or hasattr(prompt, "keys") else prompt)
        except openai_api.ApiError as err:
            return JSONResponse(status_code=err.status, content=err.body())
        return await self._answer("chat", [prompt], parsed, tokenizer)

    async def completions(self, request: Request):
        try:
            body = await self._authorized_body(request)
            parsed = openai_api.parse_sampling(body)
            prompts = openai_api.parse_prompts(body)
            if parsed.stream and len(prompts) > 1:
                raise openai_api.ApiError(
                    f"'prompt' holds {len(prompts)} prompts; with 'stream' give one per request", "prompt"
                )
            tokenizer = await self._chat_tokenizer()
            prompts = [tokenizer.encode(p) if isinstance(p, str) else p for p in prompts]
        except openai_api.ApiError as err:
            return JSONResponse(status_code=err.status, content=err.body())
        return await self._answer("completion", prompts, parsed, tokenizer)

    async def _authorized_body(self, request: Request) -> dict:
        """The JSON body of a request that carries the API key (ApiError: a 401 without it, a 400 for a bad body)."""
        openai_api.check_bearer(request.headers.get("authorization"), self._api_key)
        return await json_body(request)

    async def _answer(self, kind: str, prompts: list[list[int]], parsed: openai_api.ParsedRequest, tokenizer):
        """Generate with the current policy and answer in OpenAI's layout: one JSON body, or a stream of events."""
        rid = openai_api.new_id("chatcmpl" if kind == "chat" else "cmpl")
        try:
            if parsed.stream:
                if self._gate.asleep:  # refused before the stream's 200 goes out
                    raise RolloutAsleep(self._replica)
                return StreamingResponse(
                    self._events(kind, rid, prompts[0], parsed, tokenizer), media_type="text/event-stream"
                )
            async with self._gate.generating():
                version = self._version()
                per_prompt = await self._engine.generate(prompts, parsed.sampling)
        except RolloutAsleep as err:
            return JSONResponse(
                status_code=503, content=openai_api.ApiError(str(err), status=503).body(), headers={"Retry-After": "5"}
            )
        seqs = [seq for seqs in per_prompt for seq in seqs]  # choice index: prompt * n + sample, as OpenAI orders
        texts = [(tokenizer.decode(s.token_ids, skip_special_tokens=True), s.finish_reason) for s in seqs]
        build = openai_api.chat_response if kind == "chat" else openai_api.completion_response
        return build(
            rid, self._served_model_name, version, texts, sum(map(len, prompts)), sum(len(s.token_ids) for s in seqs)
        )

    async def _events(self, kind: str, rid: str, prompt: list[int], parsed: openai_api.ParsedRequest, tokenizer):
        """Server-sent events of one streamed generation; the policy version cannot change while it runs."""
        n = parsed.sampling.n
        async with self._gate.generating():
            piece = functools.partial(openai_api.stream_chunk, kind, rid, self._served_model_name, self._version())
            if kind == "chat":
                for i in range(n):  # OpenAI opens each choice with the role
                    yield openai_api.sse(piece(i, role=True))
            texts = [openai_api.IncrementalText(tokenizer) for _ in range(n)]
            async for deltas in self._engine.stream(prompt, parsed.sampling):
                for d in deltas:
                    text = texts[d.index].add(d.token_ids, final=d.finish_reason is not None)
                    if text:
                        yield openai_api.sse(piece(d.index, text))
                    if d.finish_reason is not None:
                        yield openai_api.sse(piece(d.index, finish_reason=d.finish_reason))
            if parsed.include_usage:
                yield openai_api.sse(openai_api.usage_chunk(piece(0), len(prompt), sum(t.token_count for t in texts)))
        yield openai_api.sse("[DONE]")

    async def _chat_tokenizer(self):
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            tokenizer = await asyncio.to_thread(AutoTokenizer.from_pretrained, self._tokenizer_path)
            if self._chat_template:  # the policy was trained on prompts in this template
                tokenizer.chat_template = self._chat_template
            self._tokenizer = tokenizer
        return self._tokenizer
