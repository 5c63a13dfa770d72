"""An invariant checker that shares nothing with the controller: its own list+watch over raw
HTTP (admin certificate), its own quantity parsing, its own bookkeeping. It watches the jobs and
pods of one namespace, the nodes, and the namespace's Events, and records every violation of:

- **no over-commit**: a node's bound, non-terminal pods never request more CPU, memory or GPUs
  than it has; and a pod of an admitted job never stays Pending-unschedulable longer than
  ``unschedulable_grace_s`` (the symptom of an admission no node could hold);
- **one admission per episode**: a job is admitted (suspend false, ``kube-queue.io/admitted-at``
  set or changed) at most once between two suspensions, and never suspended again by anyone
  but the test or kube-queue itself saying so. The scenarios configure no preemption, but the
  controller requeues a starting job whose pods' room the scheduler gave to other pods
  (``--unplaceable-timeout``); every suspension kube-queue makes carries a new
  ``kube-queue.io/stopped`` stamp in the same write, and only a stamped suspension starts a new
  episode. A second admission without a suspension in between (two leaders, a lost write
  admitted again) is never excused;
- **nothing lost** (``final()``): every job is finished, admitted, deleted by the test, or still
  suspended with an Event on it saying why;
- **liveness** (``final()``): every job that fits the empty cluster was admitted in time.
"""

from __future__ import annotations

import base64
import json
import ssl
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import yaml

ADMITTED_AT = "kube-queue.io/admitted-at"
STOPPED = "kube-queue.io/stopped"
GPU = "nvidia.com/gpu"
_SUFFIX = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6,
           "G": 10**9, "T": 10**12}


def milli(text: str) -> int:
    """A Kubernetes quantity in thousandths (enough for what the scenarios write)."""
    text = str(text)
    if text.endswith("m"):
        return int(text[:-1])
    for suffix, factor in _SUFFIX.items():
        if text.endswith(suffix):
            return int(float(text[: -len(suffix)]) * factor * 1000)
    return int(float(text) * 1000)


def admin_tls(kubeconfig: Path) -> tuple[str, ssl.SSLContext]:
    """(server, TLS context) from a kubeconfig with embedded certificates (LocalCluster's)."""
    config = yaml.safe_load(kubeconfig.read_text())
    cluster = config["clusters"][0]["cluster"]
    user = config["users"][0]["user"]
    context = ssl.create_default_context(
        cadata=base64.b64decode(cluster["certificate-authority-data"]).decode()
    )
    with tempfile.TemporaryDirectory() as tmp:
        cert, key = Path(tmp) / "c", Path(tmp) / "k"
        cert.write_bytes(base64.b64decode(user["client-certificate-data"]))
        key.write_bytes(base64.b64decode(user["client-key-data"]))
        context.load_cert_chain(cert, key)
    return str(cluster["server"]), context


@dataclass
class JobSeen:
    created: float
    suspended: bool = True
    admitted_at: str | None = None
    admissions: int = 0
    first_admitted: float | None = None
    finished: bool = False
    deleted: bool = False
    user_suspends: int = 0
    stops: set[str] = field(default_factory=set)
    """kube-queue's own suspensions: the distinct ``kube-queue.io/stopped`` stamps seen."""


@dataclass
class PodSeen:
    job: str
    node: str
    requests: dict[str, int]
    terminal: bool
    unschedulable_since: float | None


@dataclass
class Findings:
    violations: list[str] = field(default_factory=list)
    relists: int = 0
    reconnects: int = 0
    events: int = 0

    def add(self, text: str) -> None:
        if text not in self.violations:
            self.violations.append(text)


class Invariants:
    """The bookkeeping and the rules, fed one object at a time (by Checker's watches, or by a
    unit test): no I/O here."""

    def __init__(self, unschedulable_grace_s: float = 15.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.grace = unschedulable_grace_s
        self.clock = clock
        self.jobs: dict[str, JobSeen] = {}
        self.pods: dict[str, PodSeen] = {}
        self.used: dict[str, dict[str, int]] = {}
        self.nodes: dict[str, dict[str, int]] = {}
        self.reasons: dict[str, set[str]] = {}
        self.events_from: dict[str, int] = {}
        """Event objects seen (created or updated: a repeated Event counts again), by source."""
        self.found = Findings()
        self.admission_times: list[float] = []

    # ------------------------------------------------------------------ what the test tells us
    def user_suspended(self, name: str) -> None:
        """The test itself suspended ``name`` again: a new admission episode may follow."""
        self.jobs.setdefault(name, JobSeen(self.clock())).user_suspends += 1

    def user_deleted(self, name: str) -> None:
        self.jobs.setdefault(name, JobSeen(self.clock())).deleted = True

    # ------------------------------------------------------------------ observations
    def job_seen(self, obj: dict[str, Any], deleted: bool = False) -> None:
        meta = obj.get("metadata") or {}
        name = meta["name"]
        seen = self.jobs.setdefault(name, JobSeen(self.clock()))
        if deleted:
            seen.deleted = True
            return
        status = obj.get("status") or {}
        seen.finished = any(
            c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
            for c in status.get("conditions") or []
        )
        suspended = (obj.get("spec") or {}).get("suspend") is True
        annotations = meta.get("annotations") or {}
        stamp = annotations.get(ADMITTED_AT)
        stopped = annotations.get(STOPPED)
        if stopped:
            # Seen even when the suspension itself was missed (a relist between it and the
            # next admission): the stamp stays on the job until kube-queue stops it again.
            seen.stops.add(str(stopped))
        if not suspended and stamp and (seen.suspended or stamp != seen.admitted_at):
            seen.admissions += 1
            self.admission_times.append(self.clock())
            seen.first_admitted = seen.first_admitted or self.clock()
            if seen.admissions > 1 + seen.user_suspends + len(seen.stops):
                self.found.add(f"job {name} admitted {seen.admissions} times "
                               f"({seen.user_suspends} suspensions by the test, "
                               f"{len(seen.stops)} by kube-queue)")
        if suspended and not seen.suspended and not seen.finished:
            episodes = seen.admissions
            if episodes > seen.user_suspends + len(seen.stops):
                self.found.add(f"job {name} suspended again by someone other than the test "
                               "and without kube-queue's stopped stamp")
        seen.suspended = suspended
        seen.admitted_at = stamp if not suspended else seen.admitted_at

    def pod_seen(self, obj: dict[str, Any], deleted: bool = False) -> None:
        meta = obj.get("metadata") or {}
        name = meta["name"]
        if deleted:
            self._charge(self.pods.pop(name, None), -1)
            return
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        requests: dict[str, int] = {}
        for container in spec.get("containers") or []:
            for res, qty in ((container.get("resources") or {}).get("requests") or {}).items():
                requests[res] = requests.get(res, 0) + milli(qty)
        unschedulable = any(
            c.get("type") == "PodScheduled" and c.get("status") == "False"
            and c.get("reason") == "Unschedulable" for c in status.get("conditions") or []
        )
        before = self.pods.get(name)
        since = (before.unschedulable_since if before and before.unschedulable_since else
                 self.clock()) if unschedulable and not spec.get("nodeName") else None
        job = (meta.get("labels") or {}).get("batch.kubernetes.io/job-name", "")
        seen = PodSeen(
            job=job,
            node=spec.get("nodeName") or "",
            requests=requests,
            terminal=status.get("phase") in ("Succeeded", "Failed"),
            unschedulable_since=since,
        )
        self._charge(before, -1)
        self._charge(seen, +1)
        self.pods[name] = seen
        if seen.node:
            self._check_node(seen.node)

    def _charge(self, pod: PodSeen | None, sign: int) -> None:
        """Keeps every node's sum of bound, non-terminal requests (updated per pod event, so
        thousands of pods cost nothing per check)."""
        if pod is None or not pod.node or pod.terminal:
            return
        used = self.used.setdefault(pod.node, {})
        for res, qty in pod.requests.items():
            used[res] = used.get(res, 0) + sign * qty

    def node_seen(self, obj: dict[str, Any], deleted: bool = False) -> None:
        name = obj["metadata"]["name"]
        if deleted:
            self.nodes.pop(name, None)
            return
        alloc = (obj.get("status") or {}).get("allocatable") or {}
        self.nodes[name] = {res: milli(qty) for res, qty in alloc.items()}

    def event_seen(self, obj: dict[str, Any], deleted: bool = False) -> None:
        if deleted:
            return
        source = (obj.get("source") or {}).get("component") or obj.get("reportingComponent")
        self.events_from[str(source)] = self.events_from.get(str(source), 0) + 1
        involved = obj.get("involvedObject") or {}
        if involved.get("kind") == "Job":
            self.reasons.setdefault(involved.get("name", ""), set()).add(
                f"{obj.get('type')}/{obj.get('reason')}"
            )

    def _check_node(self, node: str) -> None:
        alloc = self.nodes.get(node)
        if alloc is None:
            return
        used = self.used.get(node, {})
        for res in ("cpu", "memory", GPU):
            if used.get(res, 0) > alloc.get(res, 0):
                self.found.add(f"node {node} over-committed on {res}: "
                               f"{used[res] / 1000:g} > {alloc.get(res, 0) / 1000:g}")

    def check_unschedulable(self) -> None:
        now = self.clock()
        for name, pod in self.pods.items():
            job = self.jobs.get(pod.job)
            if (pod.unschedulable_since is not None and job is not None
                    and job.first_admitted is not None and not job.deleted
                    and now - max(pod.unschedulable_since, job.first_admitted) > self.grace):
                self.found.add(f"pod {name} of admitted job {pod.job} unschedulable for more "
                               f"than {self.grace:g}s")

    # ------------------------------------------------------------------ the end
    def final(self, fits: Callable[[str], bool], admit_within_s: float) -> list[str]:
        """Nothing lost and liveness, at the end of a scenario; returns all violations."""
        self.check_unschedulable()
        for name, job in sorted(self.jobs.items()):
            if job.deleted or job.finished:
                continue
            if job.suspended:
                if fits(name):
                    self.found.add(f"job {name} fits the empty cluster but was not admitted "
                                   f"within {admit_within_s:g}s")
                elif not self.reasons.get(name):
                    self.found.add(f"job {name} waits with no Event saying why")
        return self.found.violations



class Checker(Invariants):
    """Invariants fed by an independent list+watch of one namespace (and all nodes)."""

    def __init__(
        self,
        kubeconfig: Path,
        namespace: str,
        unschedulable_grace_s: float = 15.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(unschedulable_grace_s, clock)
        self.server, self._tls = admin_tls(kubeconfig)
        self.namespace = namespace
        self._synced: set[str] = set()

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Checker]:
        """Watch while the block runs; returns once every watch has listed."""
        ns = self.namespace
        streams: list[tuple[str, Callable[..., None]]] = [
            ("/api/v1/nodes", self.node_seen),
            (f"/apis/batch/v1/namespaces/{ns}/jobs", self.job_seen),
            (f"/api/v1/namespaces/{ns}/pods", self.pod_seen),
            (f"/api/v1/namespaces/{ns}/events", self.event_seen),
        ]
        connector = aiohttp.TCPConnector(ssl=self._tls, limit=16)
        async with aiohttp.ClientSession(connector=connector) as session, \
                anyio.create_task_group() as tg:
            for path, apply in streams:
                tg.start_soon(self._watch, session, path, apply)
            tg.start_soon(self._sweep)
            with anyio.fail_after(60):
                while len(self._synced) < len(streams):  # noqa: ASYNC110 - a predicate
                    await anyio.sleep(0.05)
            try:
                yield self
            finally:
                tg.cancel_scope.cancel()

    async def _sweep(self) -> None:
        while True:
            await anyio.sleep(1)
            self.check_unschedulable()

    async def _list(self, session: aiohttp.ClientSession, path: str,
                    apply: Callable[..., None]) -> str:
        items: list[dict[str, Any]] = []
        cont = ""
        while True:
            params = {"limit": "500", **({"continue": cont} if cont else {})}
            async with session.get(self.server + path, params=params,
                                   timeout=aiohttp.ClientTimeout(total=60)) as resp:
                resp.raise_for_status()
                page = await resp.json()
            items += page.get("items") or []
            cont = (page.get("metadata") or {}).get("continue") or ""
            if not cont:
                break
        listed = {i["metadata"]["name"] for i in items}
        tables: dict[str, dict[str, Any]] = {"jobs": self.jobs, "pods": self.pods,
                                             "nodes": self.nodes}
        current = tables.get(path.rsplit("/", 1)[-1], {})
        for gone in [n for n in current if n not in listed]:
            apply({"metadata": {"name": gone}}, deleted=True)
        for item in items:
            apply(item)
        self._synced.add(path)
        return str(page["metadata"]["resourceVersion"])

    async def _watch(self, session: aiohttp.ClientSession, path: str,
                     apply: Callable[..., None]) -> None:
        rv = ""
        while True:
            try:
                if not rv:
                    rv = await self._list(session, path, apply)
                    self.found.relists += 1
                params = {"watch": "1", "resourceVersion": rv, "allowWatchBookmarks": "true",
                          "timeoutSeconds": "60"}
                async with session.get(self.server + path, params=params,
                                       timeout=aiohttp.ClientTimeout(sock_read=90)) as resp:
                    if resp.status == 410:
                        rv = ""
                        continue
                    resp.raise_for_status()
                    buffer = b""
                    async for chunk in resp.content.iter_any():
                        buffer += chunk
                        while b"\n" in buffer:
                            line, buffer = buffer.split(b"\n", 1)
                            event = json.loads(line)
                            obj = event.get("object") or {}
                            kind = event.get("type")
                            if kind == "ERROR":
                                rv = "" if obj.get("code") == 410 else rv
                                raise _Restart
                            rv = obj.get("metadata", {}).get("resourceVersion") or rv
                            if kind != "BOOKMARK":
                                self.found.events += 1
                                apply(obj, deleted=kind == "DELETED")
            except (_Restart, aiohttp.ClientError, TimeoutError, json.JSONDecodeError,
                    OSError):
                self.found.reconnects += 1
                await anyio.sleep(0.5)


class _Restart(Exception):
    pass
