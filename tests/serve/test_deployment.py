"""serve.deployment._UpdateGate: generations run together, an update runs alone, and the gate says when the last
running generation has ended (the replica then gives the engine's freed heap back)."""
import asyncio

from serve.deployment import _UpdateGate


def test_on_idle_fires_once_when_the_last_of_overlapping_generations_ends():
    async def scenario():
        calls = []
        gate = _UpdateGate(on_idle=lambda: calls.append(gate._active))
        entered = [asyncio.Event(), asyncio.Event()]
        done = [asyncio.Event(), asyncio.Event()]

        async def generation(i: int):
            async with gate.generating():
                entered[i].set()
                await done[i].wait()

        tasks = [asyncio.create_task(generation(i)) for i in range(2)]
        await asyncio.gather(*(e.wait() for e in entered))  # both run at once
        done[0].set()
        await tasks[0]
        assert calls == []  # the other one still runs
        done[1].set()
        await tasks[1]
        assert calls == [0]
        async with gate.generating():  # a later batch: idle again at its end
            pass
        return calls

    assert asyncio.run(scenario()) == [0, 0]


def test_an_update_waits_for_running_generations():
    async def scenario():
        order = []
        gate = _UpdateGate()
        entered, release = asyncio.Event(), asyncio.Event()

        async def generation():
            async with gate.generating():
                entered.set()
                await release.wait()
                order.append("generation")

        async def update():
            async with gate.updating():
                order.append("update")

        gen = asyncio.create_task(generation())
        await entered.wait()
        upd = asyncio.create_task(update())  # scheduled before the generation wakes: it runs first, and must wait
        release.set()
        await asyncio.gather(gen, upd)
        return order

    assert asyncio.run(scenario()) == ["generation", "update"]
