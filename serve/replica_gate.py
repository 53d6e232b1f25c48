"""Who may use a replica's engine when: many generations at once, or one weight update alone, and no request at all
while the engine sleeps (colocated GPU placement, where the trainer holds the memory vLLM freed).

A request that reached a sleeping vLLM would block its engine thread (vLLM's scheduler is paused) and with it the
`wake_up` queued behind it, so a request is refused at once with `RolloutAsleep` instead: the trainer never sends one
between its `sleep` and `wake_up`, and an HTTP caller gets a 503 that says when to come back. `sleep` first waits for
the generations in flight to finish, so none is cut off. Pure asyncio: tested without Ray or vLLM.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Awaitable, Callable


class RolloutAsleep(RuntimeError):
    """The replica's engine is asleep: the trainer holds its GPU memory until the next weight sync wakes it."""

    def __init__(self, replica: str = ""):
        self.replica = replica
        super().__init__(
            f"rollout replica {replica or '?'} is asleep while the trainer updates the policy "
            "(trainer.placement=colocated); it serves again after the next weight sync (wake_up)"
        )

    def __reduce__(self):  # Ray pickles exceptions by their init arguments
        return (RolloutAsleep, (self.replica,))


class ReplicaGate:
    def __init__(self, replica: str = ""):
        self._replica = replica
        self._cond = asyncio.Condition()
        self._active = 0  # generations in flight
        self._exclusive = False  # an update, a sleep or a wake-up is running
        self._asleep = False

    @property
    def asleep(self) -> bool:
        return self._asleep

    @property
    def active(self) -> int:
        """Generations running now."""
        return self._active

    @property
    def exclusive(self) -> bool:
        """An update, a sleep or a wake-up is running, or waiting for the generations in flight to finish."""
        return self._exclusive

    @contextlib.asynccontextmanager
    async def generating(self):
        """Around one generation: waits out an update in progress; refuses at once while asleep."""
        async with self._cond:
            await self._cond.wait_for(lambda: not self._exclusive)
            if self._asleep:
                raise RolloutAsleep(self._replica)
            self._active += 1
            self._cond.notify_all()  # for `wait_until`: a generation has started
        try:
            yield
        finally:
            async with self._cond:
                self._active -= 1
                self._cond.notify_all()

    async def wait_until(self, predicate: Callable[[], bool]) -> None:
        """Return once `predicate()` holds; it is checked again whenever a generation starts or ends, and when an
        update, a sleep or a wake-up ends."""
        async with self._cond:
            await self._cond.wait_for(predicate)

    @contextlib.asynccontextmanager
    async def updating(self):
        """Around one weight update: alone, after the generations in flight. A sleeping engine is woken first by the
        caller (its memory holds the weights being replaced): an update while asleep is refused."""
        async with self._exclusively():
            if self._asleep:
                raise RolloutAsleep(self._replica)
            yield

    async def sleep(self, engine_sleep: Callable[[], Awaitable[None]]) -> None:
        """Run `engine_sleep()` once the generations in flight are done; later requests are refused until `wake`."""
        async with self._exclusively():
            if not self._asleep:
                await engine_sleep()
                self._asleep = True

    async def wake(self, engine_wake: Callable[[], Awaitable[None]]) -> None:
        async with self._exclusively():
            if self._asleep:
                await engine_wake()
                self._asleep = False

    @contextlib.asynccontextmanager
    async def _exclusively(self):
        async with self._cond:
            await self._cond.wait_for(lambda: not self._exclusive)
            self._exclusive = True
            await self._cond.wait_for(lambda: self._active == 0)
        try:
            yield
        finally:
            async with self._cond:
                self._exclusive = False
                self._cond.notify_all()
