"""HTTP endpoints for the kubelet and Prometheus: /healthz, /readyz, /metrics, /debug/queue.

/readyz turns green once every informer has listed (a standby replica is ready too: readiness
is about serving, leadership is a separate gauge). /debug/queue answers the question users ask
most: "where is my job in line, and why is it waiting?".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from kubequeue.admission.tracker import JobTracker
from kubequeue.observability import metrics

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
        self, host: str, port: int, tracker: JobTracker, is_ready: Callable[[], bool]
    ) -> None:
        self.host = host
        self.port = port
        self.tracker = tracker
        self.is_ready = is_ready

    async def run(self) -> None:
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/debug/queue", self._queue)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port)
        await site.start()
        try:
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True):
                await runner.cleanup()

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
        return web.json_response(queue_snapshot(self.tracker))
