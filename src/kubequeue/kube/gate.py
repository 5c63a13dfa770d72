"""The gate that keeps the controller's state still while an admission cycle runs in slices.

A cycle over a huge state (200,000 queued jobs, a drain round freeing thousands of pods) takes
seconds. Run in one go it would hold the event loop for all of them: no watch read, no Lease
renewed, no webhook answered. So the admission loop runs it in slices of a few milliseconds and
lets the event loop go on between them. Its decisions must stay those of one uninterrupted
cycle over the state it started from, so nothing may change that state between two slices:
while the gate is closed, every path that would (an informer handing over watch events, an API
answer returning to the code that asked, the pinner taking gated pods) waits for it to open.
What does not touch the state goes on: the Lease is renewed (its own client has no gate), the
webhook answers (gating the pods it would have pinned: the pinner pins them once the cycle is
done), metrics and probes are served.

It is one flag and an Event, not a lock: exactly one task (the admission loop) closes it, and
only between a cycle's first and last slice.
"""

from __future__ import annotations

import anyio

__all__ = ["DecisionGate"]


class DecisionGate:
    def __init__(self) -> None:
        # Set when the gate opens again; None while open. Made on close(): an anyio Event needs
        # a running event loop, which __init__ may not have.
        self._opened: anyio.Event | None = None

    @property
    def closed(self) -> bool:
        return self._opened is not None

    def close(self) -> None:
        if self._opened is not None:
            raise RuntimeError("the decision gate is already closed: one cycle at a time")
        self._opened = anyio.Event()

    def open(self) -> None:
        opened, self._opened = self._opened, None
        if opened is not None:
            opened.set()

    async def wait_open(self) -> None:
        """Return at once when open; else when the cycle that closed it is done."""
        while self._opened is not None:
            await self._opened.wait()
