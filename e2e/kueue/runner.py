"""Run Kueue's real manager out of cluster against a local (or given) cluster, as the admin.

    kueue = await start(cluster, kubectl, qps=50, burst=100)
    await kueue.cluster_queue("team-a", {"cpu": 32, "memory": "256Gi", "nvidia.com/gpu": 8})
    await kueue.local_queue("ns", "team-a", "team-a")
    # Jobs: spec.suspend true, label kueue.x-k8s.io/queue-name: team-a
    await kueue.stop()

What ``start`` does, and why (facts in /work/shared/notes/kueue-side-by-side.md):

- applies Kueue's CRDs from the pinned module (server-side: the Workload CRD is 1.4 MB, too big
  for the last-applied annotation) and creates namespace ``kueue-system``;
- writes self-signed serving pairs for the webhook ``certDir`` and the hard-coded
  ``/etc/kueue/metrics/certs`` (certs.py), since the manager refuses to start without them;
- writes the Configuration (``configuration()``): no leader election, no internal cert
  management, webhook and health on reserved loopback ports, metrics off, the caller's client
  QPS/burst (give kube-queue the same), the visibility API server off (it would bind a fixed
  port), only the ``batch/job`` integration, ``waitForPodsReady`` left at its default (off);
- starts ``kueue --config ... --kubeconfig ... --zap-log-level=2`` as a child Process and waits
  for ``/readyz`` (which turns 200 once the webhook server listens);
- creates ResourceFlavor ``default-flavor``.

No webhook configuration is registered with the API server, so nothing defaults or validates
Kueue's objects or Jobs: Jobs must be created with ``spec.suspend: true`` themselves, and the
helpers here write complete objects.

``stop()`` undoes it: deletes the queues and flavors it made while Kueue still runs (so Kueue
releases its finalizers), stops the process, strips the finalizers Kueue could no longer remove
(its objects, and Workloads in the namespaces of its LocalQueues, which would otherwise keep
those namespaces Terminating forever), deletes the CRDs and ``kueue-system`` if it created them,
and gives back the ``/etc`` certificate directory.

Start it from the main thread (processes.py: the child's parent-death signal is tied to the
starting thread) in an asyncio event loop (anyio's asyncio backend is fine).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml

from e2e.cluster.build import Log, say
from e2e.cluster.ports import PortReservation
from e2e.cluster.probes import http_ok
from e2e.cluster.processes import ComponentError, Process
from e2e.kueue.build import crd_paths, ensure_kueue, version
from e2e.kueue.certs import acquire_metrics_certs, release_metrics_certs, write_self_signed
from e2e.support import Kubectl, KubectlError, wait_until

GROUP = "kueue.x-k8s.io"
API_VERSION = f"{GROUP}/v1beta2"
NAMESPACE = "kueue-system"
QUEUE_NAME_LABEL = f"{GROUP}/queue-name"
DEFAULT_FLAVOR = "default-flavor"
GPU = "nvidia.com/gpu"
# Always covered, in this order: a pod requesting a resource no resourceGroup covers is never
# admitted, and every e2e/bench pod asks for cpu and memory, many for GPUs.
BASE_RESOURCES = ("cpu", "memory", GPU)
DEFAULT_QPS = 50.0
DEFAULT_BURST = 100
START_TIMEOUT_S = 120.0
OBJECT_TIMEOUT_S = 60.0
SETTLE_S = 3.0  # stop(): how long the set of not-yet-deleted objects must stay unchanged
PATCH_CHUNK = 100  # names per `kubectl patch` (one request each, but one process per chunk)

# Kinds stop() clears finalizers of, namespaced ones last in the list.
_CLUSTER_KINDS = ("clusterqueues", "resourceflavors", "cohorts", "topologies", "admissionchecks")
_NAMESPACED_KINDS = ("localqueues", "workloads")


class ClusterLike(Protocol):
    """What start() needs of a cluster: LocalCluster and the e2e ClusterHandle both fit."""

    @property
    def kubeconfig(self) -> Path: ...

    @property
    def logs_dir(self) -> Path: ...


def configuration(
    webhook_port: int,
    health_port: int,
    cert_dir: Path,
    qps: float = DEFAULT_QPS,
    burst: int = DEFAULT_BURST,
) -> dict[str, Any]:
    """The Configuration (config.kueue.x-k8s.io/v1beta2) start() writes; public so a benchmark
    report can print exactly what Kueue ran with."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": NAMESPACE,
        # One replica, out of cluster: a Lease would only add start-up latency.
        "leaderElection": {"leaderElect": False},
        # Its rotator needs a Service/Secret/webhook configurations of an in-cluster install.
        "internalCertManagement": {"enable": False},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "metrics": {"bindAddress": "0"},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        # Defaults are 20/30; the benchmark gives kube-queue the same numbers.
        "clientConnection": {"qps": qps, "burst": burst},
        # The visibility API server binds a fixed port (8082) and is not needed.
        "featureGates": {"VisibilityOnDemand": False},
        "integrations": {"frameworks": ["batch/job"]},
        # waitForPodsReady: left out on purpose (Kueue's default: off).
    }


def _crd_name(path: Path) -> str:
    """``kueue.x-k8s.io_clusterqueues.yaml`` -> ``clusterqueues.kueue.x-k8s.io`` (controller-gen's
    naming; cheaper than parsing the 1.4 MB Workload CRD)."""
    group, _, plural = path.stem.partition("_")
    return f"{plural}.{group}"


def _quantity(value: str | int | float) -> str:
    return str(value)


def _items(found: Any) -> list[dict[str, Any]]:
    return list(found.get("items", [found])) if found else []


def _active(obj: Mapping[str, Any]) -> bool:
    return any(
        c.get("type") == "Active" and c.get("status") == "True"
        for c in (obj.get("status") or {}).get("conditions") or []
    )


@dataclass
class RunningKueue:
    """A started Kueue manager and everything start() and the helpers created for it."""

    kubectl: Kubectl
    process: Process
    version: str
    binary: Path
    work_dir: Path
    config: dict[str, Any]
    config_path: Path
    ports: dict[str, int]
    started_in_s: float = 0.0
    log: Log = say
    _reservation: PortReservation | None = None
    _own_reservation: bool = False
    _crds: list[str] = field(default_factory=list)
    _created_crds: bool = False
    _created_namespace: bool = False
    _metrics_certs_ours: bool = False
    _created: dict[str, list[tuple[str | None, str]]] = field(default_factory=dict)
    _stopped: bool = False

    # ------------------------------------------------------------------ process
    @property
    def pid(self) -> int | None:
        """The manager's pid (for CPU seconds and peak RSS from /proc)."""
        return self.process.pid

    def tail(self, lines: int = 60) -> str:
        """The last lines of Kueue's log, for error messages."""
        return self.process.tail(lines)

    def ensure_running(self) -> None:
        """Raise ComponentError (with the log tail) if the manager has exited."""
        code = self.process.exit_code()
        if code is not None and not self._stopped:
            raise ComponentError(f"kueue exited with code {code}", self.process)

    # ------------------------------------------------------------------ objects
    async def _apply(self, manifest: Mapping[str, Any]) -> None:
        await self.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-",
                           stdin=json.dumps(manifest))
        meta = manifest["metadata"]
        plural = {"ResourceFlavor": "resourceflavors", "ClusterQueue": "clusterqueues",
                  "LocalQueue": "localqueues", "Topology": "topologies"}[manifest["kind"]]
        key = (meta.get("namespace"), meta["name"])
        if key not in self._created.setdefault(plural, []):
            self._created[plural].append(key)

    async def _wait_active(self, plural: str, name: str, namespace: str | None) -> None:
        where = ["-n", namespace] if namespace else []

        async def active() -> bool:
            self.ensure_running()
            return _active(await self.kubectl.json("get", f"{plural}.{GROUP}", name, *where))

        await wait_until(f"{plural} {name} Active", active, OBJECT_TIMEOUT_S)

    async def resource_flavor(self, name: str = DEFAULT_FLAVOR,
                              node_labels: Mapping[str, str] | None = None,
                              topology: str | None = None) -> None:
        """Create (or update) a ResourceFlavor; start() already made ``default-flavor``.
        With ``topology`` (a Topology's name) it is a Topology Aware Scheduling flavor, which
        Kueue requires to name at least one node label."""
        spec: dict[str, Any] = {}
        if node_labels:
            spec["nodeLabels"] = dict(node_labels)
        if topology:
            spec["topologyName"] = topology
        await self._apply({"apiVersion": API_VERSION, "kind": "ResourceFlavor",
                           "metadata": {"name": name}, "spec": spec})

    async def topology(self, name: str, levels: Sequence[str]) -> None:
        """Create a Topology (TAS): node labels, coarsest first; Kueue allows
        ``kubernetes.io/hostname`` only as the last level."""
        await self._apply({"apiVersion": API_VERSION, "kind": "Topology",
                           "metadata": {"name": name},
                           "spec": {"levels": [{"nodeLabel": label} for label in levels]}})

    async def cluster_queue(
        self,
        name: str,
        quotas: Mapping[str, str | int | float],
        *,
        queueing_strategy: str = "BestEffortFIFO",
        cohort: str | None = None,
        borrowing_limit: Mapping[str, str | int | float] | None = None,
        lending_limit: Mapping[str, str | int | float] | None = None,
        preemption: Mapping[str, Any] | None = None,
        flavor: str = DEFAULT_FLAVOR,
        wait: bool = True,
    ) -> dict[str, Any]:
        """Create (or update) a ClusterQueue with one resourceGroup and one flavor holding
        ``quotas`` as nominal quota; returns the manifest.

        cpu, memory and nvidia.com/gpu are always covered (quota 0 where not given), plus any
        other resource in ``quotas``: a pod asking for an uncovered resource is never
        admitted. ``namespaceSelector`` is ``{}`` (all namespaces): in v1beta2 a missing one
        selects none. ``borrowing_limit``/``lending_limit`` are per resource and matter only
        with a ``cohort``. With ``wait`` it returns once Kueue reports the queue Active.
        """
        resources = [*BASE_RESOURCES, *(r for r in quotas if r not in BASE_RESOURCES)]
        quota_list: list[dict[str, str]] = []
        for resource in resources:
            entry = {"name": resource, "nominalQuota": _quantity(quotas.get(resource, 0))}
            if borrowing_limit and resource in borrowing_limit:
                entry["borrowingLimit"] = _quantity(borrowing_limit[resource])
            if lending_limit and resource in lending_limit:
                entry["lendingLimit"] = _quantity(lending_limit[resource])
            quota_list.append(entry)
        spec: dict[str, Any] = {
            "namespaceSelector": {},
            "queueingStrategy": queueing_strategy,
            "resourceGroups": [{
                "coveredResources": resources,
                "flavors": [{"name": flavor, "resources": quota_list}],
            }],
        }
        if cohort:
            spec["cohortName"] = cohort
        if preemption:
            spec["preemption"] = dict(preemption)
        manifest = {"apiVersion": API_VERSION, "kind": "ClusterQueue",
                    "metadata": {"name": name}, "spec": spec}
        await self._apply(manifest)
        if wait:
            await self._wait_active("clusterqueues", name, None)
        return manifest

    async def local_queue(self, namespace: str, name: str, cluster_queue: str,
                          *, wait: bool = True) -> dict[str, Any]:
        """Create (or update) a LocalQueue pointing at ``cluster_queue``; Jobs in ``namespace``
        labelled ``kueue.x-k8s.io/queue-name: <name>`` go to it. Returns the manifest."""
        manifest = {"apiVersion": API_VERSION, "kind": "LocalQueue",
                    "metadata": {"name": name, "namespace": namespace},
                    "spec": {"clusterQueue": cluster_queue}}
        await self._apply(manifest)
        if wait:
            await self._wait_active("localqueues", name, namespace)
        return manifest

    # ------------------------------------------------------------------ stop
    async def stop(self, timeout_s: float = 30.0, clean_up: bool = True) -> None:
        """Stop Kueue and remove what start() and the helpers created; idempotent.

        Errors while cleaning up are logged, not raised: stop() runs in teardown paths, where
        an exception would hide the test's own failure. ``clean_up=False`` only stops the
        process, for a cluster that is thrown away next (stripping the finalizers of 5,000
        Workloads takes a quarter of an hour on 2 cores).
        """
        if self._stopped:
            return
        self._stopped = True
        try:
            if self.process.running() and clean_up:
                await self._delete_created(timeout_s)
            await asyncio.to_thread(self.process.stop, 10.0)
            if clean_up:
                await self._clear_leftovers()
        finally:
            if self._metrics_certs_ours:
                await asyncio.to_thread(release_metrics_certs)
            if self._reservation is not None and self._own_reservation:
                self._reservation.release()

    async def _delete_created(self, timeout_s: float) -> None:
        """Delete our objects while Kueue runs: it drops their finalizers once unused."""
        # LocalQueues before ClusterQueues before flavors: each is in use by the previous.
        order = ("localqueues", "clusterqueues", "resourceflavors", "topologies")
        for plural in order:
            for namespace, name in self._created.get(plural, []):
                where = ["-n", namespace] if namespace else []
                with contextlib.suppress(KubectlError):
                    await self.kubectl("delete", f"{plural}.{GROUP}", name, *where,
                                       "--ignore-not-found", "--wait=false")
        # Kueue drops an unused object's finalizer within a second, but a ClusterQueue with
        # admitted workloads (and its flavor) stays until they finish: waiting for that would be
        # waiting for the timeout. So stop waiting once nothing changed for SETTLE_S;
        # _clear_leftovers() handles what is left.
        deadline = time.monotonic() + timeout_s
        previous: list[tuple[str, str | None, str]] | None = None
        changed_at = time.monotonic()
        while remaining := await self._remaining():
            now = time.monotonic()
            if remaining != previous:
                previous, changed_at = remaining, now
            elif now - changed_at >= SETTLE_S or now >= deadline:
                return
            await asyncio.sleep(0.5)

    async def _remaining(self) -> list[tuple[str, str | None, str]]:
        left: list[tuple[str, str | None, str]] = []
        for plural, keys in self._created.items():
            for namespace, name in keys:
                where = ["-n", namespace] if namespace else []
                try:
                    out = await self.kubectl("get", f"{plural}.{GROUP}", name, *where,
                                             "--ignore-not-found", "-o", "name")
                except KubectlError:
                    continue
                if out.strip():
                    left.append((plural, namespace, name))
        return left

    async def _clear_leftovers(self) -> None:
        """With Kueue gone, nobody removes its finalizers: strip them, then delete what
        remains of ours (and the CRDs and namespace if we created them)."""
        try:
            if self._created_crds and self._crds:
                # Deleting a CRD waits for all its objects; clear every one's finalizers.
                await self._strip_finalizers_everywhere()
                await self.kubectl("delete", "crd", "--ignore-not-found", "--wait=true",
                                   *self._crds, timeout_s=120)
            else:
                for plural, namespace, name in await self._remaining():
                    where = ["-n", namespace] if namespace else []
                    await self._unfinalize(plural, [name], where)
                namespaces = {ns for ns, _ in self._created.get("localqueues", []) if ns}
                for namespace in sorted(namespaces):
                    names = await self._names("workloads", ["-n", namespace])
                    await self._unfinalize("workloads", names, ["-n", namespace])
            if self._created_namespace:
                await self.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found",
                                   "--wait=false")
        except (KubectlError, TimeoutError) as error:
            self.log(f"[kueue] cleanup incomplete: {error}")

    async def _strip_finalizers_everywhere(self) -> None:
        for plural in _CLUSTER_KINDS:
            await self._unfinalize(plural, await self._names(plural, []), [])
        for plural in _NAMESPACED_KINDS:
            found = await self.kubectl.json("get", f"{plural}.{GROUP}", "-A")
            by_namespace: dict[str, list[str]] = {}
            for item in _items(found):
                if item["metadata"].get("finalizers"):
                    meta = item["metadata"]
                    by_namespace.setdefault(meta["namespace"], []).append(meta["name"])
            for namespace, names in by_namespace.items():
                await self._unfinalize(plural, names, ["-n", namespace])

    async def _names(self, plural: str, where: Sequence[str]) -> list[str]:
        out = await self.kubectl("get", f"{plural}.{GROUP}", *where, "-o",
                                 "jsonpath={.items[*].metadata.name}")
        return out.split()

    async def _unfinalize(self, plural: str, names: Sequence[str], where: Sequence[str]) -> None:
        for start in range(0, len(names), PATCH_CHUNK):
            chunk = names[start:start + PATCH_CHUNK]
            try:
                await self.kubectl("patch", f"{plural}.{GROUP}", *chunk, *where, "--type=merge",
                                   "-p", '{"metadata":{"finalizers":null}}', timeout_s=120)
            except KubectlError as error:
                if "NotFound" not in error.stderr and "not found" not in error.stderr:
                    raise


# ---------------------------------------------------------------------- start
async def _existing(kubectl: Kubectl, kind: str, names: Sequence[str]) -> set[str]:
    # -o name, not a jsonpath over .items: for a single name kubectl prints the bare object.
    out = await kubectl("get", kind, *names, "--ignore-not-found", "-o", "name")
    return {line.rpartition("/")[2] for line in out.split()}


async def install_crds(kubectl: Kubectl) -> tuple[list[str], bool]:
    """Apply Kueue's CRDs from the pinned module and wait until served; returns their names
    and whether any of them was missing before (then stop() deletes them again)."""
    paths = await asyncio.to_thread(crd_paths)
    names = [_crd_name(p) for p in paths]
    before = await _existing(kubectl, "crd", names)
    args = ["apply", "--server-side", "--force-conflicts"]
    for path in paths:
        args += ["-f", str(path)]
    await kubectl(*args, timeout_s=180)

    async def established() -> bool:
        items = _items(await kubectl.json("get", "crd", *names))
        return len(items) == len(names) and all(
            any(c["type"] == "Established" and c["status"] == "True"
                for c in (crd.get("status") or {}).get("conditions") or [])
            for crd in items
        )

    await wait_until("Kueue CRDs established", established, 60)
    return names, len(before) < len(names)


async def start(
    cluster: ClusterLike,
    kubectl: Kubectl,
    *,
    qps: float = DEFAULT_QPS,
    burst: int = DEFAULT_BURST,
    ports: PortReservation | None = None,
    work_dir: Path | None = None,
    log_level: int = 2,
    timeout_s: float = START_TIMEOUT_S,
    log: Log = say,
) -> RunningKueue:
    """Build Kueue if needed (minutes, once per machine), install it on ``cluster`` and start
    it; returns once its /readyz is 200 and ``default-flavor`` exists.

    ``qps``/``burst`` are Kueue's client rate limits (give kube-queue the same). ``ports``: a
    reservation to take the two loopback ports from (default: a private one, released by
    stop()). ``work_dir`` holds the Configuration and the webhook certs (default: a ``kueue``
    directory beside ``cluster.logs_dir``); the log is ``cluster.logs_dir/kueue.log``.
    """
    binary = ensure_kueue(log)  # in the calling (main) thread: see processes.py
    work = (work_dir or cluster.logs_dir.parent / "kueue").resolve()
    work.mkdir(parents=True, exist_ok=True)
    reservation = ports or PortReservation()
    webhook_port, health_port = reservation.take(), reservation.take()
    cert_dir = work / "webhook-certs"
    await asyncio.to_thread(write_self_signed, cert_dir, "kueue-webhook-e2e")
    metrics_ours = await asyncio.to_thread(acquire_metrics_certs)
    config = configuration(webhook_port, health_port, cert_dir, qps, burst)
    config_path = work / "config.yaml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    env.update(KUBECONFIG=str(cluster.kubeconfig), HOME=str(work))
    process = Process(
        "kueue",
        [str(binary), f"--config={config_path}", f"--kubeconfig={cluster.kubeconfig}",
         f"--zap-log-level={log_level}"],
        cluster.logs_dir,
        env=env,
    )
    running = RunningKueue(
        kubectl=kubectl, process=process, version=version(), binary=binary, work_dir=work,
        config=config, config_path=config_path,
        ports={"webhook": webhook_port, "health": health_port}, log=log,
        _reservation=reservation, _own_reservation=ports is None,
        _metrics_certs_ours=metrics_ours,
    )
    try:
        running._crds, running._created_crds = await install_crds(kubectl)
        if not await _existing(kubectl, "namespace", [NAMESPACE]):
            await kubectl("create", "namespace", NAMESPACE)
            running._created_namespace = True
        started = time.monotonic()
        process.start()
        await _wait_ready(process, f"http://127.0.0.1:{health_port}/readyz", timeout_s)
        running.started_in_s = time.monotonic() - started
        await running.resource_flavor(DEFAULT_FLAVOR)
    except BaseException:
        await running.stop()
        raise
    log(f"[kueue] {running.version} ready in {running.started_in_s:.1f}s "
        f"(pid {running.pid}, qps {qps}, burst {burst}); log {process.log_path}")
    return running


async def _wait_ready(process: Process, url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not await asyncio.to_thread(http_ok, url):
        if process.exit_code() is not None:
            raise ComponentError(
                f"kueue exited with code {process.exit_code()} before {url} answered", process)
        if time.monotonic() > deadline:
            raise ComponentError(f"timed out after {timeout_s:.0f}s waiting for {url}", process)
        await asyncio.sleep(0.25)


@asynccontextmanager
async def running_kueue(cluster: ClusterLike, kubectl: Kubectl,
                        **options: Any) -> AsyncIterator[RunningKueue]:
    """``async with running_kueue(cluster, kubectl, qps=50, burst=100) as kueue:`` start()
    on entry, stop() on exit, however the block ends."""
    kueue = await start(cluster, kubectl, **options)
    try:
        yield kueue
    finally:
        await kueue.stop()
