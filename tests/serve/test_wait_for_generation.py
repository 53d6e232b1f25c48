"""The replica's `wait_for_generation`, which a fault drill waits on to kill the replica while a generate is in flight:
the method itself over a real `ReplicaGate`, with a stand-in for the rest of the replica (no Ray, no engine)."""

from __future__ import annotations

import asyncio
import os
from types import SimpleNamespace

from serve.deployment import RolloutServer
from serve.replica_gate import ReplicaGate


def test_it_answers_none_at_its_timeout_and_the_replicas_report_once_a_generation_at_the_version_runs():
    async def scenario():
        replica = SimpleNamespace(_gate=ReplicaGate("r1"), _replica="r1", _version=1)
        started, release = asyncio.Event(), asyncio.Event()

        async def generation():
            async with replica._gate.generating():
                started.set()
                await release.wait()

        running = asyncio.create_task(generation())  # at version 1
        await started.wait()
        assert await RolloutServer.wait_for_generation(replica, 2, 0.05) is None
        release.set()
        await running
        async with replica._gate.updating():
            replica._version = 2
        waiter = asyncio.create_task(RolloutServer.wait_for_generation(replica, 2, 30.0))
        started.clear()
        release.clear()
        running = asyncio.create_task(generation())
        # 5 s only turns a hang into a failure: the waiter wakes when the generation starts
        report = await asyncio.wait_for(waiter, timeout=5)
        assert report == {"replica": "r1", "pid": os.getpid(), "generating": 1} and not running.done()
        release.set()
        await running

    asyncio.run(scenario())
