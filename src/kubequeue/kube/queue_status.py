"""Writes each Queue's ``.status`` (pending, admitted, used, borrowed, Ready condition) through the
status subresource, from the leader only, at a bounded rate and only when something changed.

Level-triggered: every round compares what the status should say with what the Queue object, as
last observed, says, so a lost write or a restart simply gets written again. A Ready condition's
``lastTransitionTime`` moves only when its status flips (Kubernetes API conventions), and a queue
becoming unusable gets one Warning Event (InvalidSpec / ParentInvalid) naming the problem.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping
from typing import Any

import anyio
import structlog

from kubequeue.kube.client import ApiError, KubeClient, TransportError
from kubequeue.kube.events import EventRecorder, InvolvedObject
from kubequeue.kube.gate import DecisionGate
from kubequeue.observability import metrics

__all__ = ["QUEUE_API", "QueueStatusWriter"]

log = structlog.get_logger(__name__)

QUEUE_API = "/apis/kube-queue.io/v1alpha1/queues"
_API_VERSION = "kube-queue.io/v1alpha1"


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _without_times(conditions: Any) -> list[dict[str, Any]]:
    if not isinstance(conditions, list):
        return []
    return [
        {k: v for k, v in c.items() if k != "lastTransitionTime"}
        for c in conditions
        if isinstance(c, dict)
    ]


class QueueStatusWriter:
    def __init__(
        self,
        client: KubeClient,
        desired: Callable[[], Mapping[str, dict[str, Any]]],
        observed: Callable[[], Mapping[str, dict[str, Any]]],
        events: EventRecorder | None = None,
        *,
        interval: float = 2.0,
        gate: DecisionGate | None = None,
    ) -> None:
        self.client = client
        self.gate = gate
        self.desired = desired
        self.observed = observed
        self.events = events
        self.interval = interval
        self._warned: dict[str, str] = {}  # queue -> the problem last reported in an Event

    async def run(self) -> None:
        while True:
            await anyio.sleep(self.interval)
            await self.write_once()

    async def write_once(self) -> int:
        """One round; returns how many Queues were written."""
        gate = self.gate
        if gate is not None and gate.closed:  # the usage it reports is being decided on
            await gate.wait_open()
        written = 0
        observed = self.observed()
        for name, status in self.desired().items():
            obj = observed.get(name)
            if obj is None:
                continue  # deleted meanwhile, or not listed yet
            body = self._body(obj, status)
            self._warn_once(name, obj, status)
            if body is None:
                continue
            try:
                await self.client.merge_patch(f"{QUEUE_API}/{name}/status", {"status": body})
                written += 1
            except ApiError as exc:
                if not exc.not_found:
                    log.warning("queue.status_write_failed", queue=name, error=str(exc))
            except TransportError as exc:
                # The next round writes it again (the status is level-triggered): a blip costs
                # one round, never the process (this runs in the leader's task group).
                metrics.TRANSPORT_ERRORS.labels("queue_status").inc()
                log.warning("queue.status_write_failed", queue=name, error=str(exc))
        return written

    def _body(self, obj: Mapping[str, Any], status: dict[str, Any]) -> dict[str, Any] | None:
        """The merge patch that makes the object's status say ``status`` (None: it does)."""
        current = obj.get("status") if isinstance(obj.get("status"), dict) else {}
        assert isinstance(current, dict)
        generation = (obj.get("metadata") or {}).get("generation")
        conditions = []
        old = {c.get("type"): c for c in current.get("conditions") or [] if isinstance(c, dict)}
        for cond in status.get("conditions", []):
            cond = dict(cond)
            if isinstance(generation, int):
                cond["observedGeneration"] = generation
            before = old.get(cond["type"])
            same = isinstance(before, dict) and before.get("status") == cond["status"]
            cond["lastTransitionTime"] = (
                before.get("lastTransitionTime") if same and before else None
            ) or _now()
            conditions.append(cond)
        wanted = {**status, "conditions": conditions}
        unchanged = all(
            current.get(k) == v for k, v in wanted.items() if k != "conditions"
        ) and _without_times(current.get("conditions")) == _without_times(conditions)
        if unchanged:
            return None
        body: dict[str, Any] = dict(wanted)
        for field in ("used", "borrowed"):  # merge patch: a resource no longer used is removed
            before_map = current.get(field)
            if isinstance(before_map, dict):
                body[field] = {
                    **{k: None for k in before_map if k not in wanted[field]},
                    **wanted[field],
                }
        return body

    def _warn_once(self, name: str, obj: Mapping[str, Any], status: Mapping[str, Any]) -> None:
        if self.events is None:
            return
        [ready] = [c for c in status.get("conditions", []) if c.get("type") == "Ready"] or [{}]
        broken = ready.get("status") == "False"
        if not broken and ready.get("reason") in (None, "Ready"):
            self._warned.pop(name, None)
            return
        message = str(ready.get("message", ""))
        if self._warned.get(name) == message:
            return
        self._warned[name] = message
        meta = obj.get("metadata") or {}
        self.events.emit(
            InvolvedObject(_API_VERSION, "Queue", "", name, str(meta.get("uid", ""))),
            "Warning",
            str(ready.get("reason") or "InvalidSpec"),
            f"queue {name} takes no jobs until fixed: {message}"
            if broken
            else f"queue {name}: {message}",
        )
        log.warning("queue.invalid", queue=name, reason=ready.get("reason"), message=message)
