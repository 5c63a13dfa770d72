"""Kubernetes Events on the user's job, written off the decision path and aggregated.

Events are how a user learns why a job waits (``kubectl describe job``). They must never slow or
block an admission, so the admission loop drops them into a bounded buffer and this writer sends
them; when the buffer is full the Event is dropped and counted, never waited for. A repeat of the
same (object, reason, message) bumps ``count`` on the existing Event instead of creating another,
as client-go's event correlator does.

A write that fails is dropped and counted, never retried and never fatal: Events are advice, and
the next occurrence will be written. After a transport error the writer pauses briefly (with
jitter) so a struggling API server is not sent the whole buffer at once, and a create whose
answer was lost is remembered as if it had succeeded: a repeat then patches it, and falls back to
creating it if it turns out not to exist.
"""

from __future__ import annotations

import datetime
import itertools
import os
import random
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio
import structlog
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from kubequeue.kube.client import ApiError, KubeClient, KubeError, TransportError
from kubequeue.observability import metrics

__all__ = ["EventRecorder", "InvolvedObject"]

log = structlog.get_logger(__name__)
COMPONENT = "kube-queue"
_AGGREGATE_FOR = 3600.0  # seconds a repeat is folded into the existing Event


@dataclass(frozen=True, slots=True)
class InvolvedObject:
    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str


@dataclass(frozen=True, slots=True)
class _Pending:
    obj: InvolvedObject
    type: str
    reason: str
    message: str


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class EventRecorder:
    def __init__(
        self,
        client: KubeClient,
        buffer: int = 2048,
        *,
        pause_after_transport_error: float = 1.0,
        clock: Callable[[], float] = anyio.current_time,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
    ) -> None:
        self._client = client
        self._pause = pause_after_transport_error
        self._clock = clock
        self._sleep = sleep
        self._send: MemoryObjectSendStream[_Pending]
        self._recv: MemoryObjectReceiveStream[_Pending]
        self._send, self._recv = anyio.create_memory_object_stream[_Pending](buffer)
        self._seen: dict[tuple[str, str, str], tuple[str, int, float]] = {}
        self._instance = os.environ.get("POD_NAME") or socket.gethostname()
        self._serial = itertools.count()

    def emit(self, obj: InvolvedObject, type_: str, reason: str, message: str) -> None:
        try:
            self._send.send_nowait(_Pending(obj, type_, reason, message[:1024]))
        except anyio.WouldBlock:
            metrics.EVENTS_DROPPED.inc()

    async def run(self) -> None:
        async with self._recv:
            async for pending in self._recv:
                try:
                    await self._write(pending)
                except KubeError as exc:
                    metrics.EVENTS_DROPPED.inc()
                    log.warning("event.write_failed", reason=pending.reason, error=str(exc))
                    if isinstance(exc, TransportError):
                        metrics.TRANSPORT_ERRORS.labels("event").inc()
                        await self._sleep(self._pause * random.uniform(0.5, 1.0))

    async def _write(self, p: _Pending) -> None:
        ns = p.obj.namespace or "default"  # Events about cluster-scoped objects (Queues)
        key = (p.obj.uid, p.reason, p.message)
        now = _now()
        clock = self._clock()
        seen = self._seen.get(key)
        if seen is not None and clock - seen[2] < _AGGREGATE_FOR:
            name, count, _ = seen
            try:
                await self._client.merge_patch(
                    f"/api/v1/namespaces/{ns}/events/{name}",
                    {"count": count + 1, "lastTimestamp": now},
                )
                self._seen[key] = (name, count + 1, seen[2])
                return
            except ApiError as exc:
                if not exc.not_found:
                    raise
        name = f"{p.obj.name}.{int(clock * 1e6):x}{next(self._serial):x}"[:253]
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": ns},
            "involvedObject": {
                "apiVersion": p.obj.api_version,
                "kind": p.obj.kind,
                "namespace": p.obj.namespace,
                "name": p.obj.name,
                "uid": p.obj.uid,
            },
            "type": p.type,
            "reason": p.reason,
            "message": p.message,
            "count": 1,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": self._instance,
        }
        if len(self._seen) > 50_000:
            self._seen.clear()
        try:
            await self._client.create(f"/api/v1/namespaces/{ns}/events", body)
        except TransportError as exc:
            if exc.maybe_applied:  # a repeat patches it, or creates it after all on 404
                self._seen[key] = (name, 1, clock)
            raise
        self._seen[key] = (name, 1, clock)
