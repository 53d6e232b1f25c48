"""The replica's gate around a stand-in engine: sleep waits for the generations in flight, nothing reaches a sleeping
engine (refused at once, never queued behind a paused scheduler), and wake-up serves again."""

from __future__ import annotations

import asyncio

import pytest

from serve.replica_gate import ReplicaGate, RolloutAsleep


class StandInEngine:
    """Records what happens, and fails the test if a request reaches it while it sleeps."""

    def __init__(self):
        self.events: list[str] = []
        self.asleep = False
        self.release = asyncio.Event()  # a generation in flight finishes when this is set
        self.started = asyncio.Event()  # set when a generation has reached the engine

    async def generate(self, name: str) -> str:
        assert not self.asleep, "a request reached a sleeping engine"
        self.events.append(f"start {name}")
        self.started.set()
        await self.release.wait()
        self.events.append(f"end {name}")
        return name

    async def sleep(self):
        self.events.append("sleep")
        self.asleep = True

    async def wake_up(self):
        self.events.append("wake_up")
        self.asleep = False


async def _generate(gate: ReplicaGate, engine: StandInEngine, name: str) -> str:
    async with gate.generating():
        return await engine.generate(name)


def test_sleep_waits_for_the_generation_in_flight_then_refuses_requests_until_woken():
    async def scenario():
        gate, engine = ReplicaGate("r1"), StandInEngine()
        running = asyncio.create_task(_generate(gate, engine, "a"))
        await engine.started.wait()
        sleeping = asyncio.create_task(gate.sleep(engine.sleep))
        await asyncio.sleep(0)  # let sleep take the gate: it must now wait for "a"
        assert not sleeping.done() and not gate.asleep
        engine.release.set()
        assert await running == "a"
        await sleeping
        assert gate.asleep and engine.events == ["start a", "end a", "sleep"]
        with pytest.raises(RolloutAsleep, match=r"replica r1 is asleep .*after the next weight sync"):
            await _generate(gate, engine, "b")
        with pytest.raises(RolloutAsleep):  # an update needs the weights in memory: wake first
            async with gate.updating():
                pass
        await gate.wake(engine.wake_up)
        assert await _generate(gate, engine, "c") == "c"
        assert engine.events == ["start a", "end a", "sleep", "wake_up", "start c", "end c"]

    asyncio.run(scenario())


def test_sleep_and_wake_are_idempotent():
    async def scenario():
        gate, engine = ReplicaGate(), StandInEngine()
        await gate.wake(engine.wake_up)  # awake already: the engine is not called
        await gate.sleep(engine.sleep)
        await gate.sleep(engine.sleep)
        await gate.wake(engine.wake_up)
        assert engine.events == ["sleep", "wake_up"]

    asyncio.run(scenario())


def test_a_request_arriving_during_the_sleep_call_is_refused_not_queued():
    async def scenario():
        gate, engine = ReplicaGate(), StandInEngine()
        entered = asyncio.Event()
        proceed = asyncio.Event()

        async def slow_sleep():
            entered.set()
            await proceed.wait()
            await engine.sleep()

        sleeping = asyncio.create_task(gate.sleep(slow_sleep))
        await entered.wait()
        late = asyncio.create_task(_generate(gate, engine, "late"))
        await asyncio.sleep(0)
        assert not late.done()  # it waits for the sleep call to finish...
        proceed.set()
        await sleeping
        with pytest.raises(RolloutAsleep):  # ...and is then refused, never handed to the sleeping engine
            await late

    asyncio.run(scenario())


def test_wait_until_returns_when_a_generation_starts_at_the_awaited_version_while_it_still_runs():
    """What the replica's `wait_for_generation` rests on: the waiter wakes on a generation's start and on an update's
    end, and returns only when its condition holds, here a generation running at version 2."""

    async def scenario():
        gate, engine, served = ReplicaGate(), StandInEngine(), {"version": 1}
        waiter = asyncio.create_task(gate.wait_until(lambda: gate.active > 0 and served["version"] == 2))
        engine.release.set()
        assert await _generate(gate, engine, "at v1") == "at v1"  # a generation at version 1 started and ended
        async with gate.updating():
            served["version"] = 2
        await asyncio.sleep(0)
        assert not waiter.done()  # version 2, but nothing generates
        engine.release.clear()
        engine.started.clear()
        running = asyncio.create_task(_generate(gate, engine, "at v2"))
        await engine.started.wait()
        await asyncio.wait_for(waiter, timeout=5)  # returned on the start alone (5 s only turns a hang into a failure)
        assert not running.done() and gate.active == 1
        engine.release.set()
        assert await running == "at v2"

    asyncio.run(scenario())


def test_rollout_asleep_survives_pickling_with_its_message():
    import pickle

    err = pickle.loads(pickle.dumps(RolloutAsleep("r7")))
    assert isinstance(err, RolloutAsleep) and err.replica == "r7" and "replica r7 is asleep" in str(err)
