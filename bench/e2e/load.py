"""Drive and observe the cluster for the end-to-end benchmark, through the API server only:
create many objects fast, and record from watches (never from a controller's own state) when
each job was admitted, where pods sat, and how much of the cluster was in use.

Everything here uses kube-queue's own raw client (bench/e2e is a benchmark of the system, so it
may use the project's HTTP layer); the watchers are Informers with their own handlers.
"""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from kubequeue.kube.client import KubeClient, KubeError
from kubequeue.kube.informer import Informer, dict_codec

__all__ = [
    "Admissions",
    "PodWatch",
    "cpu_seconds",
    "create_all",
    "patch_all",
    "patch_one",
    "peak_rss_mib",
    "percentile",
]

GPU = "nvidia.com/gpu"


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def create_all(
    client: KubeClient,
    items: Iterable[tuple[str, dict[str, Any]]],
    *,
    concurrency: int = 32,
    created: dict[str, float] | None = None,
    then: Callable[[str, dict[str, Any]], Awaitable[None]] | None = None,
) -> dict[str, float]:
    """POST every (collection path, object), ``concurrency`` at a time; returns name -> the
    monotonic time its create call returned. Transient errors are retried. ``then`` is called
    with the object's path and the created object once its slot is free (``then`` bounds its
    own concurrency)."""
    out = created if created is not None else {}
    limiter = anyio.CapacityLimiter(concurrency)

    async def one(path: str, obj: dict[str, Any]) -> None:
        async with limiter:
            made: dict[str, Any] | None = None
            for attempt in range(20):
                try:
                    made = await client.create(path, obj)
                    break
                except KubeError as exc:
                    if getattr(exc, "status", 0) == 409:
                        break  # exists (a retried create that had been applied)
                    await anyio.sleep(min(2.0, 0.05 * 2**attempt))
            out[obj["metadata"]["name"]] = time.monotonic()
        if then is not None:  # after the slot is free: it does not slow the creations
            name = obj["metadata"]["name"]
            if made is None:
                made = await client.get(f"{path}/{name}")
            await then(f"{path}/{name}", made)

    async with anyio.create_task_group() as tg:
        for path, obj in items:
            tg.start_soon(one, path, obj)
    return out


async def patch_one(
    client: KubeClient,
    path: str,
    body: Mapping[str, Any],
    rv: str | None = None,
    conflicts: list[str] | None = None,
) -> None:
    """Merge-patch one object with ``body``, guarded by ``rv`` if given: a 409 (the object
    changed since) costs a GET and another guarded patch, and is appended to ``conflicts``.
    Transient errors are retried."""
    for attempt in range(20):
        try:
            guard = {} if rv is None else {"metadata": {"resourceVersion": rv}}
            await client.merge_patch(path, {**body, **guard})
            return
        except KubeError as exc:
            if rv is not None and getattr(exc, "status", 0) == 409:
                if conflicts is not None:
                    conflicts.append(path)
                rv = str((await client.get(path))["metadata"]["resourceVersion"])
                continue
            await anyio.sleep(min(2.0, 0.05 * 2**attempt))


async def patch_all(
    client: KubeClient,
    paths: Sequence[str],
    body: Mapping[str, Any],
    concurrency: int = 32,
    *,
    versions: Mapping[str, str] | None = None,
    conflicts: list[str] | None = None,
) -> float:
    """Merge-patch every path with ``body``, ``concurrency`` at a time; returns seconds taken.

    With ``versions`` (path -> resourceVersion) each patch is guarded by it, as a queue's
    admission must be: a 409 (the object changed since, e.g. the Job controller wrote its
    status) costs a GET and another guarded patch, and is appended to ``conflicts``."""
    limiter = anyio.CapacityLimiter(concurrency)
    started = time.monotonic()

    async def one(path: str) -> None:
        rv = versions.get(path) if versions is not None else None
        async with limiter:
            await patch_one(client, path, body, rv, conflicts)

    async with anyio.create_task_group() as tg:
        for path in paths:
            tg.start_soon(one, path)
    return time.monotonic() - started


class _JobHandler:
    def __init__(self, seen: Admissions) -> None:
        self.seen = seen

    def upsert(self, obj: dict[str, Any]) -> None:
        self.seen._observe(obj)

    def delete(self, key: str) -> None:
        pass

    def synced(self) -> None:
        pass


@dataclass
class Admissions:
    """When each Job was first seen unsuspended (admitted), running (the Job controller has
    created its pods: status active, or already succeeded) and finished, from a Job watch."""

    admitted: dict[str, float] = field(default_factory=dict)
    running: dict[str, float] = field(default_factory=dict)
    finished: dict[str, float] = field(default_factory=dict)
    # How many times each job went suspend true -> false (more than once: admitted twice, or
    # preempted and admitted again).
    transitions: dict[str, int] = field(default_factory=dict)
    _suspended: dict[str, bool] = field(default_factory=dict)

    def _observe(self, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        suspended = (obj.get("spec") or {}).get("suspend") is True
        now = time.monotonic()
        if not suspended:
            self.admitted.setdefault(name, now)
            if self._suspended.get(name, True):
                self.transitions[name] = self.transitions.get(name, 0) + 1
        self._suspended[name] = suspended
        status = obj.get("status") or {}
        if not suspended and (status.get("active") or status.get("succeeded")):
            self.running.setdefault(name, now)
        for c in status.get("conditions") or []:
            if c.get("type") in ("Complete", "Failed") and c.get("status") == "True":
                self.finished.setdefault(name, now)

    def informer(self, client: KubeClient, namespace: str | None = None) -> Informer[Any]:
        path = f"/apis/batch/v1/namespaces/{namespace}/jobs" if namespace else "/apis/batch/v1/jobs"
        return Informer(
            client, "bench-jobs", path, dict_codec(), _JobHandler(self), watch_timeout=600
        )


class _PodHandler:
    def __init__(self, seen: PodWatch) -> None:
        self.seen = seen

    def upsert(self, obj: dict[str, Any]) -> None:
        self.seen._observe(obj)

    def delete(self, key: str) -> None:
        self.seen._gone(key)

    def synced(self) -> None:
        pass


@dataclass
class PodWatch:
    """Pods as the API server has them: per node the GPUs and CPUs their requests take (bound,
    not finished), and pods that stayed Pending unschedulable (admitted, yet no node could take
    them) for longer than ``unschedulable_after`` seconds."""

    unschedulable_after: float = 10.0
    gpus_by_node: dict[str, int] = field(default_factory=dict)
    cpu_by_node: dict[str, float] = field(default_factory=dict)
    _pods: dict[str, tuple[str, int, float]] = field(default_factory=dict)
    _pending_since: dict[str, float] = field(default_factory=dict)
    stuck: set[str] = field(default_factory=set)
    # The node each pod was first seen bound to (kept after it ends): where plans went.
    bound: dict[str, str] = field(default_factory=dict)
    bound_at: dict[str, float] = field(default_factory=dict)
    pending_on: dict[str, str] = field(default_factory=dict)

    def _gone(self, key: str) -> None:
        old = self._pods.pop(key, None)
        if old is not None:
            node, gpus, cpu = old
            self.gpus_by_node[node] -= gpus
            self.cpu_by_node[node] -= cpu
        self._pending_since.pop(key, None)

    def _observe(self, obj: dict[str, Any]) -> None:
        meta, spec, status = obj["metadata"], obj.get("spec") or {}, obj.get("status") or {}
        key = f"{meta.get('namespace', '')}/{meta['name']}"
        phase = status.get("phase")
        node = spec.get("nodeName")
        self._gone(key)
        if phase in ("Succeeded", "Failed") or meta.get("deletionTimestamp"):
            return
        if not node:
            unschedulable = any(
                c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
                for c in status.get("conditions") or []
            )
            if unschedulable:
                self._pending_since.setdefault(key, time.monotonic())
                # What it was waiting on, for the report: where it was pinned, if anywhere.
                selector = spec.get("nodeSelector") or {}
                self.pending_on[key] = selector.get("kubernetes.io/hostname", "")
            return
        gpus, cpu = 0, 0.0
        for c in spec.get("containers") or []:
            requests = (c.get("resources") or {}).get("requests") or {}
            gpus += int(requests.get(GPU, 0))
            cpu += _cpu(requests.get("cpu", "0"))
        if key not in self.bound:
            self.bound[key] = node
            self.bound_at[key] = time.monotonic()
        self._pods[key] = (node, gpus, cpu)
        self.gpus_by_node[node] = self.gpus_by_node.get(node, 0) + gpus
        self.cpu_by_node[node] = self.cpu_by_node.get(node, 0.0) + cpu

    def check_stuck(self) -> None:
        now = time.monotonic()
        for key, since in self._pending_since.items():
            if now - since > self.unschedulable_after:
                self.stuck.add(key)

    def informer(self, client: KubeClient) -> Informer[Any]:
        return Informer(
            client, "bench-pods", "/api/v1/pods", dict_codec(), _PodHandler(self), watch_timeout=600
        )


def _cpu(text: Any) -> float:
    s = str(text)
    return float(s[:-1]) / 1000 if s.endswith("m") else float(s)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (and its waited-for children)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")
