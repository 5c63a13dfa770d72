"""Which listener serves what: ``--debug-address`` moves the queue views (job names, demand,
reasons) off the metrics port, e.g. to localhost only, or turns them off."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
import anyio
import pytest

from kubequeue.admission.tracker import JobTracker
from kubequeue.capacity.cache import CapacityCache
from kubequeue.capacity.reservations import Reservations
from kubequeue.health import HealthServer
from kubequeue.queueing.queue import JobQueue
from kubequeue.settings import debug_listener

PROBES = ("/healthz", "/readyz", "/metrics")
VIEWS = ("/debug/queue", "/debug/status", "/debug/queues")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@asynccontextmanager
async def _serving(probes: bool, debug: bool) -> AsyncIterator[str]:
    cache = CapacityCache()
    tracker = JobTracker(cache, JobQueue(), Reservations(cache))
    port = _port()
    server = HealthServer("127.0.0.1", port, tracker, lambda: True, probes=probes, debug=debug)
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.run)
        url = f"http://127.0.0.1:{port}"
        async with aiohttp.ClientSession() as session:
            for _ in range(100):
                try:
                    async with session.get(url + "/nothing"):
                        break
                except aiohttp.ClientConnectionError:
                    await anyio.sleep(0.02)
        yield url
        tg.cancel_scope.cancel()


async def _statuses(url: str, paths: tuple[str, ...]) -> list[int]:
    async with aiohttp.ClientSession() as session:
        out = []
        for path in paths:
            async with session.get(url + path) as resp:
                out.append(resp.status)
        return out


@pytest.mark.parametrize(("probes", "debug"), [(True, True), (True, False), (False, True)], ids=str)
async def test_each_listener_serves_only_its_routes(probes: bool, debug: bool) -> None:
    async with _serving(probes, debug) as url:
        assert await _statuses(url, PROBES) == [200 if probes else 404] * 3
        assert await _statuses(url, VIEWS) == [200 if debug else 404] * 3


def test_debug_address_forms() -> None:
    assert debug_listener("metrics") is None
    assert debug_listener("off") is None
    assert debug_listener("127.0.0.1:8081") == ("127.0.0.1", 8081)
    assert debug_listener("[::1]:9000") == ("::1", 9000)
    for bad in ("", "8081", ":8081", "localhost:", "localhost:0", "localhost:70000", "x:y"):
        with pytest.raises(ValueError, match="expected 'metrics', 'off' or HOST:PORT"):
            debug_listener(bad)


async def test_the_status_view_lists_admitted_jobs_when_asked() -> None:
    async with _serving(True, True) as url, aiohttp.ClientSession() as session:
        async with session.get(url + "/debug/status?admitted=true") as resp:
            assert await resp.json() == {"leader": True, "admitted": 0, "jobs": []}
        async with session.get(url + "/debug/status") as resp:
            assert (await resp.json())["queued"] == 0
