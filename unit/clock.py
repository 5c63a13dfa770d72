"""Time for async tests: a virtual clock to inject, and a bounded wait for a condition."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable

import anyio
import anyio.lowlevel


async def wait_until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    """Poll plain state that has no event to wait on; fail the test after ``timeout``."""
    with anyio.fail_after(timeout):
        while not predicate():  # noqa: ASYNC110 - the state is plain data, nothing to wait on
            await anyio.sleep(0.005)


async def settle(max_rounds: int = 10_000) -> None:
    """Let every other task run until each is blocked on something (asyncio only).

    anyio.wait_all_tasks_blocked does the same but sleeps 0.1 s whenever a task is runnable,
    which turns a few hundred virtual-time steps into tens of seconds.
    """
    this = asyncio.current_task()
    for _ in range(max_rounds):
        await asyncio.sleep(0)
        if all(
            task is this or (task._fut_waiter is not None and not task._fut_waiter.done())  # type: ignore[attr-defined]
            for task in asyncio.all_tasks()
        ):
            return


class FakeClock:
    """Virtual monotonic time: ``sleep`` waits until the test moves time past its deadline.

    ``advance`` moves time forward in steps, waking each sleeper at its own deadline and letting
    every task run until it blocks again before moving on, so code sees time pass as it would in
    real life, only without the waiting.
    """

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self._sleepers: list[tuple[float, int, anyio.Event]] = []
        self._seq = itertools.count()

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await anyio.lowlevel.checkpoint()
            return
        wake = anyio.Event()
        heapq.heappush(self._sleepers, (self.now + seconds, next(self._seq), wake))
        await wake.wait()

    async def advance(self, seconds: float) -> None:
        target = self.now + seconds
        await settle()
        while self._sleepers and self._sleepers[0][0] <= target:
            deadline, _, wake = heapq.heappop(self._sleepers)
            self.now = max(self.now, deadline)
            wake.set()
            await settle()
        self.now = target
        await settle()

    async def run_for(self, seconds: float, step: float = 0.1) -> None:
        """Advance in small steps (for code that also does other awaits in between)."""
        steps = round(seconds / step)
        for _ in range(steps):
            await self.advance(step)
