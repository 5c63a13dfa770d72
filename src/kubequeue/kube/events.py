"""Kubernetes Events on the user's job, written off the decision path and aggregated.

Events are how a user learns why a job waits (``kubectl describe job``). They must never slow or
block an admission, so the admission loop drops them into a bounded buffer and this writer sends
them; when the buffer is full the Event is dropped and counted, never waited for. A repeat of the
same (object, reason, message) bumps ``count`` on the existing Event instead of creating another,
as client-go's event correlator does.
"""

from __future__ import annotations

import datetime
import itertools
import os
import socket
from dataclasses import dataclass

import anyio
import structlog
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from kubequeue.kube.client import ApiError, KubeClient, KubeError
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
    def __init__(self, client: KubeClient, buffer: int = 2048) -> None:
        self._client = client
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

    async def _write(self, p: _Pending) -> None:
        ns = p.obj.namespace
        key = (p.obj.uid, p.reason, p.message)
        now = _now()
        clock = anyio.current_time()
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
                "namespace": ns,
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
        await self._client.create(f"/api/v1/namespaces/{ns}/events", body)
        if len(self._seen) > 50_000:
            self._seen.clear()
        self._seen[key] = (name, 1, clock)
