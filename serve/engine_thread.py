"""A step-driven inference engine (vLLM's `LLMEngine`) run by one thread of its own, for asyncio callers.

Why a thread and not vLLM's `AsyncLLM`: `AsyncLLM` always runs the engine (scheduler and, with one worker, the model)
in a second process, a second runtime of Python, torch and vLLM per replica (~0.5 GiB on a CPU). Here the engine
lives in the replica's process; every call into it is made from this one thread, since vLLM's engine is not
thread-safe, and the replica's event loop only queues work and awaits results.

The engine is duck-typed (`add_request`, `abort_request`, `has_unfinished_requests`, `step` returning outputs with
`request_id` and `finished`), so the loop below is tested without vLLM (tests/serve/test_engine_thread.py).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, Optional


class EngineDead(RuntimeError):
    """The engine failed while stepping; every request then in flight and every later call gets this error."""


@dataclass
class _Work:
    run: Callable[[Any], Any]  # called with the engine, on the engine thread
    done: concurrent.futures.Future


_STOP = object()


class EngineThread:
    """Owns one engine built by `build()` on its thread. Between two engine steps it runs every queued call; it steps
    while requests are unfinished and otherwise blocks on its queue (no polling)."""

    def __init__(
        self, build: Callable[[], Any], close: Callable[[Any], None] = lambda engine: None, name: str = "engine"
    ):
        self._build = build
        self._close = close
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._started: concurrent.futures.Future = concurrent.futures.Future()
        self._failure: Optional[BaseException] = None
        self._running = False  # True from a successful build until the thread stops
        # request id -> (event loop, queue) of its consumer; touched only on the engine thread
        self._sinks: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Queue]] = {}

    async def start(self) -> None:
        """Build the engine on the thread; raises what `build()` raised."""
        self._thread.start()
        await asyncio.wrap_future(self._started)

    def shutdown(self, timeout_s: float = 60.0) -> None:
        """Stop the thread after the calls already queued; `close(engine)` runs there last."""
        if self._thread.is_alive():
            self._inbox.put(_STOP)
            self._thread.join(timeout_s)

    def check_health(self) -> None:
        if self._failure is not None:
            raise self._dead()
        if not self._running:
            raise EngineDead("the engine thread is not running")

    async def call(self, fn: Callable[[Any], Any]) -> Any:
        """`fn(engine)` run on the engine thread between two steps; its result or exception."""
        if not self._running:  # never started, failed to build, or shut down: nothing would run it
            raise EngineDead("the engine thread is not running")
        done: concurrent.futures.Future = concurrent.futures.Future()
        self._inbox.put(_Work(fn, done))
        return await asyncio.wrap_future(done)

    async def add_requests(self, requests: list[tuple[str, Any, Any]], **kwargs) -> list[AsyncIterator[Any]]:
        """Queue `(request_id, prompt, params)` requests in one call, so the next step schedules them together;
        `kwargs` go to each `engine.add_request`. One async iterator per request yields its outputs up to the finished
        one; leaving it early (a cancelled consumer, a dropped stream) aborts the request."""
        loop = asyncio.get_running_loop()
        sinks = [asyncio.Queue() for _ in requests]

        def add(engine) -> None:
            for (request_id, prompt, params), sink in zip(requests, sinks):
                self._sinks[request_id] = (loop, sink)
                engine.add_request(request_id, prompt, params, **kwargs)

        await self.call(add)
        return [self._outputs(request_id, sink) for (request_id, _, _), sink in zip(requests, sinks)]

    async def _outputs(self, request_id: str, sink: asyncio.Queue) -> AsyncIterator[Any]:
        finished = False
        try:
            while not finished:
                item = await sink.get()
                if isinstance(item, BaseException):
                    finished = True  # the engine is dead: nothing to abort
                    raise item
                finished = bool(item.finished)
                yield item
        finally:
            if not finished:
                self._inbox.put(_Work(lambda engine: self._abort(engine, request_id), concurrent.futures.Future()))

    def _dead(self) -> EngineDead:
        dead = EngineDead(f"the engine failed: {self._failure!r}")
        dead.__cause__ = self._failure
        return dead

    def _abort(self, engine, request_id: str) -> None:
        if self._sinks.pop(request_id, None) is not None:
            engine.abort_request([request_id])

    # ------------------------------------------------------------------ the engine thread
    def _serve(self) -> None:
        try:
            engine = self._build()
        except BaseException as err:  # the replica's start() re-raises it
            self._started.set_exception(err)
            return
        self._running = True
        self._started.set_result(None)
        while True:
            busy = self._failure is None and engine.has_unfinished_requests()
            try:
                work = self._inbox.get(block=not busy)
            except queue.Empty:
                work = None
            while work is not None:  # every queued call before the next step
                if work is _STOP:
                    self._running = False
                    self._close(engine)
                    return
                self._run(engine, work)
                try:
                    work = self._inbox.get_nowait()
                except queue.Empty:
                    work = None
            if self._failure is None and engine.has_unfinished_requests():
                self._step(engine)

    def _run(self, engine, work: _Work) -> None:
        if self._failure is not None:
            work.done.set_exception(self._dead())
            return
        try:
            work.done.set_result(work.run(engine))
        except BaseException as err:
            work.done.set_exception(err)

    def _step(self, engine) -> None:
        try:
            outputs = engine.step()
        except BaseException as err:
            self._failure = err
            for loop, sink in self._sinks.values():
                loop.call_soon_threadsafe(sink.put_nowait, self._dead())
            self._sinks.clear()
            return
        for output in outputs:
            loop, sink = self._sinks.get(output.request_id, (None, None))
            if sink is None:  # aborted while this step ran
                continue
            if output.finished:
                del self._sinks[output.request_id]
            loop.call_soon_threadsafe(sink.put_nowait, output)
