"""HTTP endpoints for the kubelet, Prometheus and users: /healthz, /readyz, /metrics, and the
queue views /debug/status (every waiting job: position in its queue, demand, why it waits;
with ``?admitted=true`` every admitted job instead: its topology domain and nodes),
/debug/queues (every Queue: limits, usage, borrowing) and /debug/queue (the older flat list).

/readyz turns green once every informer has listed (a standby replica is ready too: readiness
is about serving, leadership is a separate gauge). The queue views answer the question users ask
most, "where is my job in line, and why is it waiting?"; they show job names, demand and
reasons, never specs. Only the leader evaluates jobs, so ask the leader (``kubectl queue`` does).

The same class serves either set or both: ``--debug-address`` can move the queue views to a
listener of their own (e.g. localhost only) where job names are not for everyone on the pod
network.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from kubequeue.admission.cycle import AdmissionCycle
from kubequeue.admission.tracker import JobTracker
from kubequeue.kube.gate import DecisionGate
from kubequeue.observability import metrics
from kubequeue.status import admitted_rows, job_rows, queue_rows

__all__ = ["HealthServer", "queue_snapshot"]


def queue_snapshot(tracker: JobTracker, limit: int = 1000) -> dict[str, Any]:
    jobs = tracker.queue.ordered()
    rows = []
    for position, job in enumerate(jobs[:limit]):
        kind, namespace, name = job.key
        rows.append(
            {
                "position": position,
                "kind": kind,
                "namespace": namespace,
                "name": name,
                "priority": job.priority,
                "created": job.created,
                "problem": job.problem,
                "never_fits": job.never_fits or None,
                "waiting_for": job.wait_reason or None,
            }
        )
    return {
        "queued": len(jobs),
        "admitting": len(tracker.inflight),
        "holding_capacity": len(tracker.reservations),
        "jobs": rows,
    }


class HealthServer:
    def __init__(
        self,
        host: str,
        port: int,
        tracker: JobTracker,
        is_ready: Callable[[], bool],
        cycle: AdmissionCycle | None = None,
        is_leader: Callable[[], bool] = lambda: True,
        *,
        probes: bool = True,
        debug: bool = True,
        gate: DecisionGate | None = None,
    ) -> None:
        # The queue views read the state an admission cycle in slices decides on: they answer
        # between cycles, as they did when a cycle held the event loop (kube/gate.py).
        self.gate = gate
        self.probes = probes
        self.debug = debug
        self.host = host
        self.port = port
        self.tracker = tracker
        self.is_ready = is_ready
        self.cycle = cycle
        self.is_leader = is_leader

    async def run(self) -> None:
        app = web.Application()
        if self.probes:
            app.router.add_get("/healthz", self._healthz)
            app.router.add_get("/readyz", self._readyz)
            app.router.add_get("/metrics", self._metrics)
        if self.debug:
            app.router.add_get("/debug/queue", self._queue)
            app.router.add_get("/debug/status", self._status)
            app.router.add_get("/debug/queues", self._queues)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port)
        await site.start()
        try:
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True):
                await runner.cleanup()

    async def _between_cycles(self) -> None:
        if self.gate is not None and self.gate.closed:
            await self.gate.wait_open()

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _readyz(self, _: web.Request) -> web.Response:
        if self.is_ready():
            return web.Response(text="ok")
        return web.Response(status=503, text="informers have not listed yet")

    async def _metrics(self, _: web.Request) -> web.Response:
        body = generate_latest(metrics.REGISTRY)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _queue(self, _: web.Request) -> web.Response:
        await self._between_cycles()
        return web.json_response(queue_snapshot(self.tracker))

    async def _status(self, request: web.Request) -> web.Response:
        await self._between_cycles()
        try:
            limit = max(1, min(int(request.query.get("limit", "1000")), 100_000))
        except ValueError:
            return web.json_response({"error": "limit must be an integer"}, status=400)
        queue = request.query.get("queue") or None
        namespace = request.query.get("namespace") or None
        if request.query.get("admitted") in ("true", "1"):
            admitted = admitted_rows(self.tracker, queue=queue, namespace=namespace, limit=limit)
            return web.json_response(
                {
                    "leader": self.is_leader(),
                    "admitted": len(self.tracker.admitted),
                    "jobs": admitted,
                }
            )
        rows = job_rows(self.tracker, self.cycle, queue=queue, namespace=namespace, limit=limit)
        return web.json_response(
            {"leader": self.is_leader(), "queued": len(self.tracker.queue), "jobs": rows}
        )

    async def _queues(self, _: web.Request) -> web.Response:
        await self._between_cycles()
        strict = self.cycle.strict_fifo if self.cycle is not None else False
        return web.json_response(
            {"leader": self.is_leader(), "queues": queue_rows(self.tracker, strict)}
        )
