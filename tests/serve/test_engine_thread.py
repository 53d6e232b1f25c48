"""The thread that steps the rollout engine for the replica's event loop (serve.engine_thread), on a fake engine.

The fake engine answers each request with one token per step until it has `length` of them, as vLLM's `LLMEngine`
does with `ignore_eos`; it records, on the engine thread, which thread called it and in what order.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field

import pytest

from serve.engine_thread import EngineDead, EngineThread


@dataclass
class Output:
    request_id: str
    tokens: int  # produced so far
    finished: bool


@dataclass
class FakeEngine:
    fail_at_step: int = -1
    running: dict[str, int] = field(default_factory=dict)  # request id -> tokens still to produce
    produced: dict[str, int] = field(default_factory=dict)
    log: list[tuple] = field(default_factory=list)
    threads: set[str] = field(default_factory=set)
    steps: int = 0
    closed: bool = False

    def _called(self, *entry) -> None:
        self.threads.add(threading.current_thread().name)
        self.log.append(entry)

    def add_request(self, request_id, prompt, params, tag=None):
        self._called("add", request_id, tag)
        self.running[request_id] = params
        self.produced[request_id] = 0

    def abort_request(self, request_ids):
        self._called("abort", *request_ids)
        for request_id in request_ids:
            self.running.pop(request_id)

    def has_unfinished_requests(self) -> bool:
        return bool(self.running)

    def step(self) -> list[Output]:
        self._called("step", sorted(self.running))
        self.steps += 1
        if self.steps == self.fail_at_step:
            raise ValueError("kernel failed")
        outputs = []
        for request_id in list(self.running):
            self.produced[request_id] += 1
            self.running[request_id] -= 1
            done = self.running[request_id] == 0
            if done:
                del self.running[request_id]
            outputs.append(Output(request_id, self.produced[request_id], done))
        return outputs


def _started(engine: FakeEngine) -> EngineThread:
    thread = EngineThread(lambda: engine, close=lambda e: setattr(e, "closed", True), name="fake-engine")
    asyncio.get_running_loop()  # the caller is a coroutine
    return thread


async def _collect(outputs) -> list[Output]:
    return [out async for out in outputs]


def test_requests_added_together_are_stepped_together_and_routed_by_id():
    engine = FakeEngine()

    async def scenario():
        thread = _started(engine)
        await thread.start()
        streams = await thread.add_requests([("a", "p", 2), ("b", "p", 3)], tag="lora-1")
        results = await asyncio.gather(*(_collect(s) for s in streams))
        thread.shutdown()
        return results

    a, b = asyncio.run(scenario())
    # both requests were in the first step: one call added them, before the thread stepped
    assert engine.log[:3] == [("add", "a", "lora-1"), ("add", "b", "lora-1"), ("step", ["a", "b"])]
    # each consumer got its own outputs, one per step, the last one finished
    assert [o.tokens for o in a] == [1, 2] and [o.finished for o in a] == [False, True]
    assert [o.tokens for o in b] == [1, 2, 3] and [o.finished for o in b] == [False, False, True]
    assert engine.steps == 3  # no step once nothing is unfinished
    assert engine.threads == {"fake-engine"} and engine.closed


def test_calls_run_on_the_engine_thread_and_return_or_raise():
    engine = FakeEngine()

    async def scenario():
        thread = _started(engine)
        await thread.start()
        name = await thread.call(lambda e: threading.current_thread().name)
        with pytest.raises(KeyError):
            await thread.call(lambda e: {}["missing"])
        still = await thread.call(lambda e: e.steps)  # a failed call leaves the engine usable
        thread.shutdown()
        with pytest.raises(EngineDead, match="not running"):  # after shutdown: refused, not left waiting
            await thread.call(lambda e: e.steps)
        return name, still

    assert asyncio.run(scenario()) == ("fake-engine", 0)


LONG = 10**9  # steps the fake engine could not take before the abort arrives


def test_a_consumer_that_leaves_early_aborts_its_request():
    engine = FakeEngine()

    async def scenario():
        thread = _started(engine)
        await thread.start()
        (long_one,) = await thread.add_requests([("long", "p", LONG)])
        async for _ in long_one:
            break  # e.g. an HTTP stream whose client went away
        await long_one.aclose()
        await thread.call(lambda e: None)  # the abort was queued before this call, so it has run
        thread.shutdown()

    asyncio.run(scenario())
    assert ("abort", "long") in engine.log and not engine.running
    assert engine.steps < LONG


def test_a_failed_step_fails_the_requests_in_flight_and_every_later_call():
    engine = FakeEngine(fail_at_step=2)

    async def scenario():
        thread = _started(engine)
        await thread.start()
        streams = await thread.add_requests([("a", "p", 5), ("b", "p", 5)])
        errors = []
        for stream in streams:
            with pytest.raises(EngineDead) as err:
                await _collect(stream)
            errors.append(err.value)
        with pytest.raises(EngineDead):
            await thread.call(lambda e: "never runs")
        with pytest.raises(EngineDead, match="kernel failed"):
            thread.check_health()
        thread.shutdown()
        return errors

    errors = asyncio.run(scenario())
    assert all(isinstance(e.__cause__, ValueError) for e in errors)
    assert engine.steps == 2  # nothing stepped the dead engine again


def test_a_failed_build_is_raised_by_start_and_health_fails():
    def build():
        raise OSError("no model at m")

    async def scenario():
        thread = EngineThread(build, name="fake-engine")
        with pytest.raises(OSError, match="no model at m"):
            await thread.start()
        with pytest.raises(EngineDead, match="not running"):
            thread.check_health()
        with pytest.raises(EngineDead, match="not running"):  # refused, not queued for a thread that is gone
            await thread.call(lambda engine: None)

    asyncio.run(scenario())
