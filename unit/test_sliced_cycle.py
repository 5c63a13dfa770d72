"""A long admission cycle runs in slices (admission/loop.py) behind the decision gate
(kube/gate.py): the event loop goes on between slices, so its longest stall is a slice, not the
cycle; and nothing that would change the state the cycle decides on gets through before it is
done (API answers, watch events), while the Lease's own client does.

That a sliced cycle decides exactly what an uninterrupted one does is checked with the random
histories of test_parking_equivalence.py."""

from __future__ import annotations

import gc
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from kubequeue.admission.cycle import AdmissionCycle
from kubequeue.admission.loop import AdmissionLoop
from kubequeue.admission.tracker import JobTracker
from kubequeue.capacity.cache import CapacityCache
from kubequeue.capacity.reservations import Reservations
from kubequeue.kinds.job import JobKind
from kubequeue.kube.client import ApiError
from kubequeue.kube.gate import DecisionGate
from kubequeue.kube.informer import Informer, dict_codec
from kubequeue.queueing.queue import JobQueue
from kubequeue.resources import GPU
from unit import builders as b
from unit.apiserver import FakeApi, client_for, serve
from unit.fakes import FakeClient

JOB = JobKind()
# The budget the test holds the event loop's longest stall to: a few slices (20 ms each) of
# slack for a machine busy with other tests; the cycle itself runs several times as long.
STALL_BUDGET = 0.15


def _world(nodes: int, jobs: int) -> JobTracker:
    """``jobs`` one-GPU jobs that all fit: every one is a placement and an admission (about
    40 us each), the costliest visit a cycle makes."""
    cache = CapacityCache()
    for i in range(nodes):
        cache.upsert_node(b.node(f"n{i}", gpu=8))
    tracker = JobTracker(cache, JobQueue(), Reservations(cache))
    tracker.register(JOB)
    tracker.set_priority_classes({}, 0)
    for i in range(jobs):
        tracker.observe(JOB, b.job(f"j{i}", {GPU: "1", "cpu": "1"}))
    return tracker


def test_a_long_cycle_stalls_the_event_loop_for_a_slice_not_for_the_cycle() -> None:
    tracker = _world(2000, 12_000)
    gate = DecisionGate()
    loop = AdmissionLoop(
        tracker,
        AdmissionCycle(tracker),
        FakeClient(),  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        gate=gate,
    )
    lateness: list[float] = []
    closed_seen: list[bool] = []
    started_mid_cycle: list[int] = []

    async def main() -> tuple[Any, float, int]:
        done = anyio.Event()
        # The writes the cycle starts as it goes wait here (the test holds the only token):
        # this measures the cycle, not 12,000 writes.
        limiter = anyio.CapacityLimiter(1)
        await limiter.acquire()

        async def ticker() -> None:
            # Lateness in this thread's CPU time: the work the event loop did for others
            # while the ticker waited its turn. Unlike the wall clock, it does not count the
            # time the machine gave to other processes (the other tests running meanwhile).
            while not done.is_set():
                before = time.thread_time()
                await anyio.sleep(0.005)
                lateness.append(time.thread_time() - before)
                closed_seen.append(gate.closed)
                if gate.closed:
                    started_mid_cycle.append(loop._started)

        async with anyio.create_task_group() as tg:
            tg.start_soon(ticker)
            await anyio.sleep(0.02)
            result = await loop._decide(tg, limiter)
            done.set()
            tg.cancel_scope.cancel()  # the writes waiting for the limiter
        return result

    # What the controller does once synced (Controller.synced): the state is frozen out of the
    # cyclic collector, whose full collections would otherwise walk it (here, with whatever
    # earlier tests left in this process) in the middle of the cycle.
    gc.collect()
    gc.freeze()
    try:
        result, busy, slices = anyio.run(main)
    finally:
        gc.unfreeze()
    assert len(result.admitted) == 12_000
    assert not gate.closed
    # The cycle is long, and ran in many slices with the ticker running (behind the gate)
    # between them; without slices the ticker would have been late by all of ``busy``.
    assert busy > 3 * STALL_BUDGET or busy > 0.2, busy
    assert slices >= 8, slices
    assert any(closed_seen), "the ticker never ran while the cycle was under way"
    # The first admissions' writes started long before the cycle was done.
    assert started_mid_cycle and 0 < started_mid_cycle[0] < 12_000, started_mid_cycle[:3]
    assert max(lateness) < min(STALL_BUDGET, busy / 2), (max(lateness), busy, slices)


async def test_api_answers_wait_for_the_gate_and_the_lease_client_does_not() -> None:
    api = FakeApi()
    api.put("/api/v1/namespaces/default/configmaps/a", {"metadata": {"name": "a"}})
    gate = DecisionGate()
    async with serve(api.app) as url, client_for(url) as client:
        client.gate = gate
        got: list[str] = []

        async def ask(path: str) -> None:
            try:
                await client.get(path)
                got.append("answer")
            except ApiError as exc:
                got.append(str(exc.status))

        gate.close()
        async with anyio.create_task_group() as tg:
            tg.start_soon(ask, "/api/v1/namespaces/default/configmaps/a")
            tg.start_soon(ask, "/api/v1/namespaces/default/configmaps/missing")
            with anyio.fail_after(5):  # the Lease is renewed meanwhile
                lease = await client.lease.get("/api/v1/namespaces/default/configmaps/a")
            assert lease["metadata"]["name"] == "a"
            with anyio.fail_after(5):
                while len(api.requests) < 3:  # noqa: ASYNC110 - the server has answered
                    await anyio.sleep(0.01)
            await anyio.sleep(0.1)
            assert got == [], "an answer came back to its caller while a cycle was deciding"
            gate.open()
        assert sorted(got) == ["404", "answer"]


class _OneWatch:
    """Lists nothing; its one watch delivers ``lines`` after 50 ms, then stays open."""

    def __init__(self, lines: list[bytes]) -> None:
        self.lines = lines

    async def request(self, method: str, path: str, **_: Any) -> bytes:
        return json.dumps({"metadata": {"resourceVersion": "1"}, "items": []}).encode()

    @asynccontextmanager
    async def stream(self, path: str, query: Any, timeout: Any) -> AsyncIterator[Any]:
        lines = self.lines

        class Content:
            async def iter_any(self) -> AsyncIterator[bytes]:
                await anyio.sleep(0.05)  # the gate is closed by then
                for line in lines:
                    yield line
                await anyio.sleep_forever()

        class Response:
            content = Content()

        yield Response()


class _Seen:
    def __init__(self) -> None:
        self.names: list[str] = []

    def upsert(self, obj: dict[str, Any]) -> None:
        self.names.append(obj["metadata"]["name"])

    def delete(self, key: str) -> None:
        self.names.append(f"-{key}")

    def synced(self) -> None:
        pass


@pytest.mark.parametrize("closed_before_list", [False, True])
async def test_watch_events_wait_for_the_gate(closed_before_list: bool) -> None:
    obj = {"metadata": {"namespace": "ns", "name": "x", "resourceVersion": "5"}}
    line = json.dumps({"type": "ADDED", "object": obj}).encode() + b"\n"
    gate = DecisionGate()
    seen = _Seen()
    informer = Informer(
        _OneWatch([line]),  # type: ignore[arg-type]
        "jobs",
        "/apis/batch/v1/jobs",
        dict_codec(),
        seen,
        gate=gate,
    )
    async with anyio.create_task_group() as tg:
        if closed_before_list:
            gate.close()
            tg.start_soon(informer.run)
        else:
            await tg.start(informer.run)
            gate.close()
        await anyio.sleep(0.1)
        assert seen.names == []
        gate.open()
        with anyio.fail_after(5):
            while seen.names != ["x"]:  # noqa: ASYNC110 - a plain predicate
                await anyio.sleep(0.01)
        tg.cancel_scope.cancel()


async def test_a_cancelled_loop_finishes_its_cycle_and_undoes_what_it_began() -> None:
    """Leadership lost mid-cycle: the cycle ends (no job left begun with no write to settle
    it), and its admissions, started into the cancelled group, undo themselves."""
    tracker = _world(200, 1500)
    loop = AdmissionLoop(
        tracker,
        AdmissionCycle(tracker),
        FakeClient(),  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        slice_seconds=0.0,
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(loop.run)
        loop.wake()
        with anyio.fail_after(5):
            while not loop.gate.closed:  # until a cycle is under way
                await anyio.lowlevel.checkpoint()
        tg.cancel_scope.cancel()
    assert not loop.gate.closed
    assert not tracker.inflight
    assert len(tracker.reservations) == 0
    assert len(tracker.queue) == 1500
