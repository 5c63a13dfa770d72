"""kube/events.py: repeats fold into one Event, and no failed write stops the writer."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import anyio.lowlevel
import pytest

from kubequeue.kube.events import EventRecorder, InvolvedObject
from kubequeue.observability import metrics
from unit.clock import FakeClock, wait_until
from unit.fakes import FakeClient

JOB = InvolvedObject("batch/v1", "Job", "default", "j", "uid-j")
OTHER = InvolvedObject("batch/v1", "Job", "default", "k", "uid-k")
EVENTS = "/api/v1/namespaces/default/events"


class Harness:
    def __init__(self) -> None:
        self.client = FakeClient()
        self.clock = FakeClock()
        self.pauses: list[float] = []
        self.recorder = EventRecorder(
            self.client,  # type: ignore[arg-type]
            clock=self.clock,
            sleep=self._sleep,
        )

    async def _sleep(self, seconds: float) -> None:
        self.pauses.append(seconds)
        await anyio.lowlevel.checkpoint()

    def events(self) -> list[dict[str, object]]:
        return [o for p, o in self.client.store.objects.items() if p.startswith(EVENTS + "/")]

    def counts(self) -> list[tuple[str, object]]:
        return sorted((str(e["message"]), e["count"]) for e in self.events())

    async def send(self, obj: InvolvedObject, message: str = "waiting for 4 GPUs") -> None:
        """Emit one Event and wait until the writer has dealt with it (and is idle again)."""
        self.recorder.emit(obj, "Normal", "Queued", message)
        stats = self.recorder._recv.statistics
        await wait_until(
            lambda: stats().current_buffer_used == 0 and stats().tasks_waiting_receive == 1
        )


@asynccontextmanager
async def running() -> AsyncIterator[Harness]:
    h = Harness()
    async with anyio.create_task_group() as tg:
        tg.start_soon(h.recorder.run)
        await wait_until(lambda: h.recorder._recv.statistics().tasks_waiting_receive == 1)
        yield h
        tg.cancel_scope.cancel()


def dropped() -> float:
    return metrics.EVENTS_DROPPED._value.get()


def transport_errors() -> float:
    return metrics.TRANSPORT_ERRORS.labels("event")._value.get()


async def test_a_repeat_within_the_window_bumps_the_count() -> None:
    async with running() as h:
        for _ in range(3):
            await h.send(JOB)
        await h.send(JOB, "something else")
        await h.send(OTHER)
        assert h.counts() == [
            ("something else", 1),
            ("waiting for 4 GPUs", 1),
            ("waiting for 4 GPUs", 3),
        ]
        assert [m for m, _ in h.client.calls].count("POST") == 3


async def test_a_repeat_after_the_window_is_a_new_event() -> None:
    async with running() as h:
        await h.send(JOB)
        h.clock.now += 3601
        await h.send(JOB)
        assert h.counts() == [("waiting for 4 GPUs", 1), ("waiting for 4 GPUs", 1)]


async def test_an_aggregated_event_that_vanished_is_created_again() -> None:
    async with running() as h:
        await h.send(JOB)
        h.client.store.objects.clear()  # expired (Events live an hour by default)
        await h.send(JOB)
        assert h.counts() == [("waiting for 4 GPUs", 1)]


@pytest.mark.parametrize("mode", ["refuse", "drop", "reject"])
@pytest.mark.parametrize("method", ["POST", "PATCH"])
async def test_a_failed_write_is_dropped_counted_and_the_writer_goes_on(
    mode: str, method: str
) -> None:
    before_dropped, before_transport = dropped(), transport_errors()
    async with running() as h:
        if method == "PATCH":
            await h.send(JOB)  # the first one is created; the repeat is the patch that fails
        h.client.fail[method] = [mode]
        await h.send(JOB)
        await h.send(JOB)  # the writer is alive and aggregation still works
        counts = h.counts()
    assert dropped() - before_dropped == 1
    if mode == "reject":
        assert transport_errors() == before_transport
        assert h.pauses == []
    else:
        assert transport_errors() - before_transport == 1
        assert len(h.pauses) == 1
        assert 0.5 <= h.pauses[0] <= 1.0
    # A create applied before its answer was lost is patched by the repeat (count 2); a lost
    # patch is re-sent with the same absolute count. Only a create that never happened leaves
    # the repeat to create the Event afresh.
    expected = 1 if method == "POST" and mode != "drop" else 2
    assert counts == [("waiting for 4 GPUs", expected)]
