"""The end-to-end scenarios (issue 12), each on a fresh local cluster, each seeded.

A *system* is what admits the suspended jobs: ``kube-queue`` (our controller, as the e2e tests run
it: the chart's RBAC, out of cluster) or ``kueue`` (the real Kueue manager, out of cluster; see
e2e/kueue). Both get the same API server flags and the same client QPS/burst.

- ceiling: no queue controller; a plain client loop un-suspends N suspended Jobs as fast as the
  API server takes it. The physical limit of any suspend-based queue on this machine.
- burst: N nodes x 8 GPUs, M suspended Jobs of mixed shapes (all of them fit at once) created as
  fast as possible; time until all admitted, admissions/s, create -> admitted p50/p99,
  controller CPU seconds and peak RSS.
- fragmentation: 64 x 8-GPU nodes partly filled by pods no queue manages (1-3 GPUs free on most
  nodes); a mix of 1/2/4/8-GPU jobs and 4 x 2-GPU gangs; GPU utilisation over time, jobs
  finished per minute, and admitted pods left Pending unschedulable for > 10 s (watched).
- topology: gangs requiring one rack among scattered holes (issue 31), beside Kueue's Topology
  Aware Scheduling; gangs kept in one rack, unschedulable pods, utilisation, wait per shape.
- baseline: Kueue's own scheduler-performance mix (30 queues; small/medium/large CPU jobs
  arriving at fixed intervals, priorities 50/100/200), scaled by ``scale``; wall, usage, time to
  admission per class, and admitted pods left Pending unschedulable for > 10 s.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import anyio
from e2e.cluster.nodes import NodeSpec
from e2e.cluster.runner import LocalCluster
from e2e.controller import KubeQueue, free_port, install_identity, render_chart
from e2e.support import Kubectl
from e2e.webhook import pod_gate_configuration, write_serving_cert

from bench.e2e.load import (
    GPU,
    Admissions,
    PodWatch,
    cpu_seconds,
    create_all,
    patch_all,
    patch_one,
    peak_rss_mib,
    percentile,
)
from kubequeue.kube.client import KubeClient, PoolLimits, connect

__all__ = ["Settings", "run_scenario"]

RUN_FOR = "pod-complete.stage.kwok.x-k8s.io/delay"
KUEUE_LABEL = "kueue.x-k8s.io/queue-name"
QUEUE_LABEL = "kube-queue.io/queue-name"
PAUSE = "registry.k8s.io/pause:3.10"


@dataclass(frozen=True)
class Settings:
    qps: float = 100.0  # both systems' client QPS and burst (stated in the report)
    burst: int = 200
    scale: float = 1.0
    seed: int = 7
    kube_queue_args: tuple[str, ...] = ()  # extra controller flags (experiments)
    create_concurrency: int = 32  # burst: Job creations in flight at once


def _job(
    name: str,
    *,
    gpus: int = 0,
    cpu: str = "1",
    memory: str = "1Gi",
    pods: int = 1,
    run_for: str = "600s",
    labels: dict[str, str] | None = None,
    priority_class: str | None = None,
) -> dict[str, Any]:
    requests: dict[str, str] = {"cpu": cpu, "memory": memory}
    limits: dict[str, str] = {}
    if gpus:
        requests[GPU] = limits[GPU] = str(gpus)
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 0,
        "containers": [
            {"name": "main", "image": PAUSE, "resources": {"requests": requests, "limits": limits}}
        ],
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {
            "suspend": True,
            "parallelism": pods,
            "completions": pods,
            "backoffLimit": 0,
            "template": {"metadata": {"annotations": {RUN_FOR: run_for}}, "spec": spec},
        },
    }


# ---------------------------------------------------------------------------- the systems
class System:
    """A queue controller under test, started on a cluster, stopped afterwards."""

    name = ""
    pid: int | None = None

    async def prepare(self, cluster: LocalCluster, kubectl: Kubectl) -> None:
        """Everything its queue objects need, so they can be created; it admits nothing yet
        unless it is started (kube-queue) or its queues are released (Kueue: stopPolicy)."""
        raise NotImplementedError

    async def start(self, cluster: LocalCluster, kubectl: Kubectl) -> None:
        """Admit from now on."""
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError

    async def topology(self, levels: Sequence[str], node_labels: dict[str, str]) -> None:
        """Declare the cluster's topology levels (coarsest first) before queues are made, for
        the nodes carrying ``node_labels``. kube-queue needs nothing for a required topology
        (any node label is a level); Kueue needs a Topology and a TAS ResourceFlavor."""

    async def queue(
        self,
        kubectl: Kubectl,
        name: str,
        cpu: str,
        memory: str,
        gpus: int,
        namespace: str,
        *,
        no_borrowing: bool = True,
    ) -> dict[str, str]:
        """Create a queue with this quota for jobs in ``namespace``; the labels to put on a
        job to put it in that queue."""
        raise NotImplementedError


class KubeQueueSystem(System):
    name = "kube-queue"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.kq: KubeQueue | None = None
        self.identity: Any = None

    async def prepare(self, cluster: LocalCluster, kubectl: Kubectl) -> None:
        if self.identity is None:
            self.identity = await install_identity(
                cluster.binaries.helm, kubectl, cluster.work_dir / "kube-queue"
            )

    async def start(self, cluster: LocalCluster, kubectl: Kubectl) -> None:
        await self.prepare(cluster, kubectl)
        self.kq = await KubeQueue(
            self.identity,
            cluster.logs_dir,
            "kube-queue",
            "--log-level=info",
            f"--kube-api-qps={self.settings.qps}",
            f"--kube-api-burst={self.settings.burst}",
            "--pods-ready-timeout=0",
            *self.settings.kube_queue_args,
        ).start(timeout_s=120)
        self.pid = self.kq.process.pid

    async def stop(self) -> None:
        if self.kq is not None:
            await self.kq.stop()

    async def queue(
        self,
        kubectl: Kubectl,
        name: str,
        cpu: str,
        memory: str,
        gpus: int,
        namespace: str,
        *,
        no_borrowing: bool = True,
    ) -> dict[str, str]:
        quota = {"cpu": cpu, "memory": memory, GPU: gpus}
        spec: dict[str, Any] = {"quota": {"max": quota}}
        if no_borrowing:
            spec["quota"]["min"] = quota
        await kubectl.apply(
            {
                "apiVersion": "kube-queue.io/v1alpha1",
                "kind": "Queue",
                "metadata": {"name": name},
                "spec": spec,
            }
        )
        return {QUEUE_LABEL: name}


class KubeQueuePinnedSystem(KubeQueueSystem):
    """kube-queue with pinning: it serves the webhook and the chart's pod-gate webhooks
    (every namespace but kube-system, as the chart has them) point at it."""

    name = "kube-queue-pinned"

    async def start(self, cluster: LocalCluster, kubectl: Kubectl) -> None:
        cert_dir = cluster.work_dir / "webhook"
        ca = await anyio.to_thread.run_sync(write_serving_cert, cert_dir)
        port = free_port()
        flags = (
            f"--webhook-port={port}",
            "--webhook-host=127.0.0.1",
            f"--webhook-cert-dir={cert_dir}",
        )
        self.settings = replace(
            self.settings, kube_queue_args=(*self.settings.kube_queue_args, *flags)
        )
        await super().start(cluster, kubectl)
        rendered = await render_chart(cluster.binaries.helm)
        config = pod_gate_configuration(rendered, "kube-queue-bench", port, ca, None)
        await kubectl("apply", "-f", "-", stdin=json.dumps(config))


def placement_figures(
    kq: KubeQueue | None, bound: dict[str, str], namespace: str
) -> dict[str, Any]:
    """From the controller's log (its plan: ``job.admitted`` placement, and its requeues) and
    the pods' own nodes (``bound``): pods bound off the plan of a job admitted once, Unplaceable
    requeues, holds relocated. Plans over more than 5 nodes are shown cut in the log: skipped."""
    if kq is None:
        return {}
    planned: dict[str, Counter[str]] = {}
    admissions: Counter[str] = Counter()
    unplaceable = relocated = 0
    for line in kq.log().splitlines():
        if not line.startswith("{"):
            continue
        event = json.loads(line)
        name = event.get("event")
        if name == "job.admitted" and str(event.get("job", "")).startswith(f"{namespace}/"):
            job = event["job"].partition("/")[2]
            admissions[job] += 1
            text = str(event.get("placement", ""))
            if "more nodes" in text:
                continue
            plan: Counter[str] = Counter()
            for part in filter(None, text.split(", ")):
                node, _, count = part.partition(" (")
                plan[node] += int(count.split()[0])
            planned[job] = plan
        elif name == "job.requeued" and event.get("reason") == "Unplaceable":
            unplaceable += 1
        elif name == "reservation.relocated":
            relocated += int(event.get("pods", 0))
    on_nodes: dict[str, Counter[str]] = {}
    for key, node in bound.items():
        ns, _, pod = key.partition("/")
        if ns == namespace:
            on_nodes.setdefault(pod.rsplit("-", 1)[0], Counter())[node] += 1
    off = judged = 0
    for job, plan in planned.items():
        if admissions[job] != 1 or job not in on_nodes:
            continue
        judged += sum(on_nodes[job].values())
        off += sum((on_nodes[job] - plan).values())
    return {
        "pods_judged_against_plan": judged,
        "pods_bound_off_plan": off,
        "unplaceable_requeues": unplaceable,
        "holds_relocated": relocated,
    }


class KueueSystem(System):
    """Kueue, started in prepare() (its queue objects need the manager's webhooks and status);
    for a backlog its ClusterQueues are created with ``stopPolicy: Hold`` and released by
    start(), the equivalent of starting kube-queue with a full queue."""

    name = "kueue"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.running: Any = None
        self.held: list[str] = []
        self.holding = False
        self.flavor: str | None = None

    async def prepare(self, cluster: LocalCluster, kubectl: Kubectl) -> None:
        if self.running is None:
            from e2e.kueue import runner

            self.running = await runner.start(
                cluster, kubectl, qps=self.settings.qps, burst=self.settings.burst
            )
            self.pid = self.running.pid
            self.holding = True

    async def start(self, cluster: LocalCluster, kubectl: Kubectl) -> None:
        await self.prepare(cluster, kubectl)
        self.holding = False
        for name in self.held:
            await kubectl(
                "patch",
                "clusterqueue",
                name,
                "--type=merge",
                "-p",
                '{"spec":{"stopPolicy":"None"}}',
            )
        self.held = []

    async def stop(self) -> None:
        if self.running is not None:
            # Each scenario runs on a cluster of its own, discarded after it: no clean-up.
            await self.running.stop(clean_up=False)

    async def topology(self, levels: Sequence[str], node_labels: dict[str, str]) -> None:
        # Topology Aware Scheduling (beta, on by default in the pinned release): a Topology
        # whose last level is the hostname (so Kueue assigns each pod its node, as pinning
        # does) and a flavor naming it; the ClusterQueues then hand out that flavor.
        await self.running.topology("bench", [*levels, "kubernetes.io/hostname"])
        await self.running.resource_flavor("tas-flavor", node_labels, topology="bench")
        self.flavor = "tas-flavor"

    async def queue(
        self,
        kubectl: Kubectl,
        name: str,
        cpu: str,
        memory: str,
        gpus: int,
        namespace: str,
        *,
        no_borrowing: bool = True,
    ) -> dict[str, str]:
        await self.running.cluster_queue(
            name,
            {"cpu": cpu, "memory": memory, GPU: gpus},
            **({"flavor": self.flavor} if self.flavor else {}),
        )
        if self.holding:
            await kubectl(
                "patch",
                "clusterqueue",
                name,
                "--type=merge",
                "-p",
                '{"spec":{"stopPolicy":"Hold"}}',
            )
            self.held.append(name)
        # A LocalQueue of a held ClusterQueue is not Active: do not wait for it then.
        await self.running.local_queue(namespace, name, name, wait=not self.holding)
        return {KUEUE_LABEL: name}


class ClientLoopSystem(System):
    """No queue: the burst's own creator un-suspends each Job the moment its create returns
    (64 patches in flight beside the creations), guarded by the resourceVersion the create
    answered (a 409 costs a GET and another try).
    A queue with no watch, no decision and no cost of its own: the most any suspend-based
    queue could admit while the same Jobs are being created on the same machine (the PATCH
    ceiling is measured with nothing else running)."""

    name = "client-loop"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.conflicts: list[str] = []  # paths whose guarded patch met a newer object
        # Its own patches in flight, beside the creator's (as a queue's connections are): the
        # PATCH ceiling's best concurrency.
        self.limiter = anyio.CapacityLimiter(64)

    async def prepare(self, cluster: LocalCluster, kubectl: Kubectl) -> None:
        pass

    async def start(self, cluster: LocalCluster, kubectl: Kubectl) -> None:
        pass

    async def stop(self) -> None:
        pass

    async def queue(
        self,
        kubectl: Kubectl,
        name: str,
        cpu: str,
        memory: str,
        gpus: int,
        namespace: str,
        *,
        no_borrowing: bool = True,
    ) -> dict[str, str]:
        return {}

    def after_create(self, client: KubeClient) -> Callable[[str, dict[str, Any]], Awaitable[None]]:
        async def admit(path: str, made: dict[str, Any]) -> None:
            async with self.limiter:
                rv = str(made["metadata"]["resourceVersion"])
                await patch_one(client, path, {"spec": {"suspend": False}}, rv, self.conflicts)

        return admit


def make_system(name: str, settings: Settings) -> System:
    systems: dict[str, type[System]] = {
        "kube-queue": KubeQueueSystem,
        "kube-queue-pinned": KubeQueuePinnedSystem,
        "kueue": KueueSystem,
        "client-loop": ClientLoopSystem,
    }
    return systems[name](settings)  # type: ignore[call-arg]


# ---------------------------------------------------------------------------- helpers
@asynccontextmanager
async def _client(cluster: LocalCluster, settings: Settings) -> AsyncIterator[KubeClient]:
    # Room for the ceiling's 128 patches at once, and the client loop's creations and patches.
    async with connect(str(cluster.kubeconfig), limits=PoolLimits(requests=192)) as client:
        yield client


async def _nodes(cluster: LocalCluster, client: KubeClient, specs: Sequence[NodeSpec]) -> None:
    """Create fake nodes and wait until every one is Ready without the not-ready taint."""
    cluster.create_nodes(specs)
    wanted = {s.name for s in specs}
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        found = await client.get("/api/v1/nodes")
        ready = {
            n["metadata"]["name"]
            for n in found["items"]
            if any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in n["status"].get("conditions", [])
            )
            and not any(
                t.get("key") == "node.kubernetes.io/not-ready"
                for t in n["spec"].get("taints") or []
            )
        }
        if wanted <= ready:
            return
        await anyio.sleep(1)
    raise TimeoutError(f"{len(wanted - ready)} nodes not ready")


async def _namespace(client: KubeClient, name: str) -> None:
    await client.create(
        "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    for _ in range(100):  # pods are refused until the default ServiceAccount exists
        found = await client.get(f"/api/v1/namespaces/{name}/serviceaccounts")
        if any(sa["metadata"]["name"] == "default" for sa in found["items"]):
            return
        await anyio.sleep(0.2)


async def _run_informer_until(informer: Any, done: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    async with anyio.create_task_group() as tg:
        await tg.start(informer.run)
        while not done() and time.monotonic() < deadline:  # noqa: ASYNC110 - a predicate
            await anyio.sleep(0.05)
        tg.cancel_scope.cancel()
    return done()


# ---------------------------------------------------------------------------- scenarios
async def ceiling(cluster: LocalCluster, settings: Settings, jobs: int) -> dict[str, Any]:
    async with _client(cluster, settings) as client:
        await _namespace(client, "ceiling")
        path = "/apis/batch/v1/namespaces/ceiling/jobs"
        # As fast as the API server takes it: the best of a few client concurrencies, each
        # on its own jobs (the same spec a queue would patch).
        best: dict[str, Any] = {}
        # Creating the Jobs is timed too, at the same concurrency and with nothing else
        # running: the most a burst (jobs admitted while they are created) could ever admit.
        created_per_s: dict[str, float] = {}
        for concurrency in (32, 64, 128):
            prefix = f"c{concurrency}"
            stamps = await create_all(
                client,
                ((path, _job(f"{prefix}-{i:05d}")) for i in range(jobs)),
                concurrency=concurrency,
            )
            span = max(stamps.values()) - min(stamps.values())
            created_per_s[str(concurrency)] = len(stamps) / span if span else float("nan")
            seconds = await patch_all(
                client,
                [f"{path}/{prefix}-{i:05d}" for i in range(jobs)],
                {"spec": {"suspend": False}},
                concurrency=concurrency,
            )
            rate = jobs / seconds
            if rate > best.get("patches_per_s", 0):
                best = {
                    "jobs": jobs,
                    "seconds": seconds,
                    "patches_per_s": rate,
                    "concurrency": concurrency,
                }
            await anyio.sleep(5)  # let the Job controller's pods settle before the next try
        # The same, each patch guarded by the resourceVersion a list returned (what a queue
        # that never admits on stale state must send), at the best concurrency: the Job
        # controller's first status write on each new Job makes some of them conflict.
        prefix = "guarded"
        await create_all(client, ((path, _job(f"{prefix}-{i:05d}")) for i in range(jobs)))
        listed = await client.get(path)
        versions = {
            f"{path}/{item['metadata']['name']}": str(item["metadata"]["resourceVersion"])
            for item in listed["items"]
            if item["metadata"]["name"].startswith(prefix)
        }
        conflicts: list[str] = []
        seen = Admissions()
        wanted = {p.rsplit("/", 1)[1] for p in versions}
        async with anyio.create_task_group() as tg:
            # Until the Job controller has created every patched job's pods: the jobs/s that
            # reach running when nothing but the patches stands in between.
            tg.start_soon(
                _run_informer_until,
                seen.informer(client, "ceiling"),
                lambda: wanted <= seen.running.keys(),
                600,
            )
            started = time.monotonic()
            seconds = await patch_all(
                client,
                list(versions),
                {"spec": {"suspend": False}},
                concurrency=best["concurrency"],
                versions=versions,
                conflicts=conflicts,
            )
        best["created_per_s"] = created_per_s
        best["best_created_per_s"] = max(created_per_s.values())
        best["guarded_patches_per_s"] = jobs / seconds
        best["guarded_conflicts"] = len(conflicts)
        running = [seen.running[n] for n in wanted if n in seen.running]
        best["guarded_all_running_s"] = max(running) - started if running else float("nan")
        best["guarded_running_per_s"] = len(running) / best["guarded_all_running_s"]
    return best


def _burst_shapes(rng: random.Random, count: int) -> list[tuple[int, str]]:
    """(GPUs, CPU) per job: CPU-only 30%, 1 GPU 40%, 2 GPUs 20%, 4 GPUs 10% (1.2 GPUs on
    average, so every job fits at once on nodes x 8 GPUs when count <= 5 x nodes)."""
    out = []
    for _ in range(count):
        p = rng.random()
        gpus = 0 if p < 0.3 else 1 if p < 0.7 else 2 if p < 0.9 else 4
        out.append((gpus, rng.choice(["500m", "1", "2"])))
    return out


async def burst(
    cluster: LocalCluster,
    system: System,
    settings: Settings,
    nodes: int,
    jobs: int,
    backlog: bool = False,
) -> dict[str, Any]:
    """With ``backlog``, every job is created before the controller starts (a cold start or
    failover with a full queue): admissions/s is then the controller's own pace, comparable to
    the PATCH ceiling; without, jobs are admitted as fast as they are created."""
    kubectl = Kubectl(cluster.binaries.kubectl, cluster.kubeconfig)
    rng = random.Random(settings.seed)
    async with _client(cluster, settings) as client:
        await _nodes(
            cluster,
            client,
            [
                NodeSpec(f"gpu-{i:04d}", cpu="64", memory="512Gi", gpus=8, pods=250)
                for i in range(nodes)
            ],
        )
        await _namespace(client, "burst")
        if backlog:
            await system.prepare(cluster, kubectl)
        else:
            await system.start(cluster, kubectl)
        labels = await system.queue(
            kubectl,
            "burst",
            str(nodes * 64),
            f"{nodes * 512}Gi",
            nodes * 8,
            "burst",
            no_borrowing=False,
        )
        seen = Admissions()
        pods = PodWatch()
        names = [f"b-{i:05d}" for i in range(jobs)]
        manifests = [
            _job(name, gpus=g, cpu=c, memory="1Gi", labels=labels)
            for name, (g, c) in zip(names, _burst_shapes(rng, jobs), strict=True)
        ]
        path = "/apis/batch/v1/namespaces/burst/jobs"
        created: dict[str, float] = {}
        if backlog:
            await create_all(client, ((path, m) for m in manifests), created=created)
            await system.start(cluster, kubectl)
        cpu_before = cpu_seconds(system.pid) if system.pid else 0.0
        async with anyio.create_task_group() as tg:
            tg.start_soon(
                _run_informer_until,
                seen.informer(client, "burst"),
                lambda: len(seen.running) >= jobs,
                1800,
            )
            tg.start_soon(
                _run_informer_until, pods.informer(client), lambda: len(pods.bound) >= jobs, 1800
            )
            started = time.monotonic()
            if not backlog:
                await create_all(
                    client,
                    ((path, m) for m in manifests),
                    concurrency=settings.create_concurrency,
                    created=created,
                    then=(
                        system.after_create(client)
                        if isinstance(system, ClientLoopSystem)
                        else None
                    ),
                )
        cpu_used = (cpu_seconds(system.pid) - cpu_before) if system.pid else float("nan")
        rss = peak_rss_mib(system.pid) if system.pid else float("nan")
    waits = [seen.admitted[n] - created[n] for n in names if n in seen.admitted and n in created]
    last = max(seen.admitted.values()) if seen.admitted else float("nan")
    last_running = max(seen.running.values()) if seen.running else float("nan")
    if backlog and seen.admitted:
        started = min(seen.admitted.values())  # from the first admission: the system's pace
    # How fast the API server took the creations (in the burst, while the queue admits: no
    # queue can admit faster than jobs appear) and how far the last admission trailed the last
    # creation.
    create_span = max(created.values()) - min(created.values()) if len(created) > 1 else 0.0
    return {
        "nodes": nodes,
        "jobs": jobs,
        "created_per_s": len(created) / create_span if create_span else float("nan"),
        "last_admitted_after_last_created_s": (
            last - max(created.values()) if created else float("nan")
        ),
        "admitted": len(seen.admitted),
        "all_admitted_s": last - started,
        "admissions_per_s": len(seen.admitted) / (last - started),
        # Until the Job controller has created every admitted job's pods (compare with the
        # ceiling's guarded_all_running_s: the same, right after a bare patch loop).
        "all_running_s": last_running - started,
        "running_per_s": len(seen.running) / (last_running - started),
        "wait_p50_s": percentile(waits, 0.5),
        "wait_p99_s": percentile(waits, 0.99),
        "controller_cpu_s": cpu_used,
        "controller_peak_rss_mib": rss,
        # Until every job's pod is bound to a node (pinning adds a pod PATCH before that).
        "all_bound_s": (max(pods.bound_at.values()) - started) if pods.bound_at else float("nan"),
        "bound_per_s": (
            len(pods.bound_at) / (max(pods.bound_at.values()) - started)
            if pods.bound_at
            else float("nan")
        ),
        **placement_figures(getattr(system, "kq", None), pods.bound, "burst"),
        "admitted_twice": sum(1 for v in seen.transitions.values() if v > 1),
        "conflicts": (
            len(system.conflicts) if isinstance(system, ClientLoopSystem) else float("nan")
        ),
    }


def _filler_pod(name: str, node: str, gpus: int) -> dict[str, Any]:
    """A pod no queue manages, bound straight to ``node``, running for the whole scenario."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": {RUN_FOR: "100000s"}},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": PAUSE,
                    "resources": {
                        "requests": {"cpu": "1", GPU: str(gpus)},
                        "limits": {GPU: str(gpus)},
                    },
                }
            ],
        },
    }


async def fragmentation(
    cluster: LocalCluster, system: System, settings: Settings, minutes: float
) -> dict[str, Any]:
    kubectl = Kubectl(cluster.binaries.kubectl, cluster.kubeconfig)
    rng = random.Random(settings.seed)
    nodes = 64
    async with _client(cluster, settings) as client:
        names = [f"frag-{i:02d}" for i in range(nodes)]
        await _nodes(
            cluster, client, [NodeSpec(n, cpu="64", memory="512Gi", gpus=8) for n in names]
        )
        await _namespace(client, "filler")
        await _namespace(client, "frag")
        # Pods no queue manages, bound straight to each node: 5-7 GPUs used, 1-3 free.
        filler: list[tuple[str, dict[str, Any]]] = []
        for i, node in enumerate(names):
            used = rng.choice([5, 6, 6, 7, 7]) if i % 8 else 0  # every 8th node stays empty
            if used:
                pod = _filler_pod(f"fill-{i:02d}", node, used)
                filler.append(("/api/v1/namespaces/filler/pods", pod))
        await create_all(client, filler)
        capacity = nodes * 8
        free = capacity - sum(
            int(p["spec"]["containers"][0]["resources"]["requests"][GPU]) for _, p in filler
        )
        await system.start(cluster, kubectl)
        # The queue's quota: the cluster's capacity (a quota system has no other figure).
        labels = await system.queue(
            kubectl,
            "frag",
            str(nodes * 64),
            f"{nodes * 512}Gi",
            capacity,
            "frag",
            no_borrowing=False,
        )
        jobs: list[tuple[str, dict[str, Any]]] = []
        for i in range(int(400 * settings.scale) or 40):
            p = rng.random()
            if p < 0.35:
                gpus, count = 1, 1
            elif p < 0.6:
                gpus, count = 2, 1
            elif p < 0.75:
                gpus, count = 4, 1
            elif p < 0.85:
                gpus, count = 8, 1
            else:
                gpus, count = 2, 4  # a gang: 4 pods x 2 GPUs, all or nothing
            run_for = f"{rng.randint(20, 60)}s"
            jobs.append(
                (
                    "/apis/batch/v1/namespaces/frag/jobs",
                    _job(
                        f"f-{i:04d}", gpus=gpus, pods=count, cpu="1", run_for=run_for, labels=labels
                    ),
                )
            )
        seen = Admissions()
        pods = PodWatch(unschedulable_after=10.0)
        samples: list[float] = []
        started = time.monotonic()
        deadline = started + minutes * 60

        async def sample() -> None:
            while time.monotonic() < deadline:
                await anyio.sleep(2)
                pods.check_stuck()
                used = sum(pods.gpus_by_node.values())
                samples.append(used / capacity)

        async with anyio.create_task_group() as tg:
            await tg.start(seen.informer(client, "frag").run)
            await tg.start(pods.informer(client).run)
            tg.start_soon(sample)
            await create_all(client, jobs)
            await anyio.sleep(max(0.0, deadline - time.monotonic()))
            tg.cancel_scope.cancel()
    elapsed = time.monotonic() - started
    return {
        "nodes": nodes,
        "gpus": capacity,
        "free_gpus_at_start": free,
        "jobs": len(jobs),
        "minutes": minutes,
        "admitted": len(seen.admitted),
        "finished": len(seen.finished),
        "jobs_finished_per_min": len(seen.finished) / (elapsed / 60),
        "gpu_utilisation_mean": sum(samples) / len(samples) if samples else float("nan"),
        "gpu_utilisation_series": [round(s, 3) for s in samples],
        "admitted_pods_unschedulable_over_10s": len(pods.stuck),
        "unschedulable_pods": sorted(pods.stuck),
        "unschedulable_pinned_to": {k: pods.pending_on.get(k, "") for k in sorted(pods.stuck)},
        "unschedulable_bound_on": {k: pods.bound.get(k, "") for k in sorted(pods.stuck)},
        **placement_figures(getattr(system, "kq", None), pods.bound, "frag"),
    }


RACK = "example.com/rack"
POOL = "example.com/pool"  # every node; Kueue's TAS flavor must name a node label
REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"  # kube-queue reads it too
# (pods, GPUs per pod): every gang is 8 or 16 GPUs and fits in one rack's two empty nodes.
GANG_SHAPES = ((2, 8), (4, 4), (8, 2), (16, 1), (2, 4), (4, 2))


async def topology(
    cluster: LocalCluster, system: System, settings: Settings, minutes: float
) -> dict[str, Any]:
    """Gangs that require one rack (issue 31): 4 racks x 4 nodes x 8 GPUs; in each rack one or
    two nodes partly used by pods no queue manages (2-6 GPUs each: scattered holes that add up
    to more than a gang needs, but only the rack's empty nodes can take a whole gang); gangs of
    2-16 pods (8 or 16 GPUs) with ``kueue.x-k8s.io/podset-required-topology: example.com/rack``
    on the pod template, the same manifest for both systems (kube-queue reads Kueue's
    annotation as its own). Figures: gangs whose pods were all bound in one rack (must be 100%),
    admitted pods left unschedulable > 10 s, GPU utilisation while work remained, the time to
    finish everything, and the wait per gang shape."""
    kubectl = Kubectl(cluster.binaries.kubectl, cluster.kubeconfig)
    rng = random.Random(settings.seed)
    racks, per_rack = 4, 4
    specs = [
        NodeSpec(
            f"r{r}-n{i}",
            cpu="64",
            memory="512Gi",
            gpus=8,
            labels={RACK: f"rack-{r}", POOL: "gpu"},
        )
        for r in range(racks)
        for i in range(per_rack)
    ]
    rack_of = {s.name: s.labels[RACK] for s in specs}
    async with _client(cluster, settings) as client:
        await _nodes(cluster, client, specs)
        await _namespace(client, "filler")
        await _namespace(client, "topo")
        filler: list[tuple[str, dict[str, Any]]] = []
        for r in range(racks):
            nodes = [f"r{r}-n{i}" for i in range(per_rack)]
            rng.shuffle(nodes)
            for node in nodes[: rng.choice([1, 2])]:
                pod = _filler_pod(f"fill-{node}", node, rng.randint(2, 6))
                filler.append(("/api/v1/namespaces/filler/pods", pod))
        await create_all(client, filler)
        capacity = len(specs) * 8
        filled = sum(
            int(p["spec"]["containers"][0]["resources"]["requests"][GPU]) for _, p in filler
        )
        await system.start(cluster, kubectl)
        await system.topology([RACK], {POOL: "gpu"})
        labels = await system.queue(
            kubectl,
            "topo",
            str(len(specs) * 64),
            f"{len(specs) * 512}Gi",
            capacity,
            "topo",
            no_borrowing=False,
        )
        jobs: list[tuple[str, dict[str, Any]]] = []
        shape_of: dict[str, tuple[int, int]] = {}
        for i in range(max(12, int(400 * settings.scale))):
            pods_n, gpus = rng.choice(GANG_SHAPES)
            name = f"g-{i:03d}"
            manifest = _job(
                name,
                gpus=gpus,
                pods=pods_n,
                cpu="1",
                run_for=f"{rng.randint(20, 60)}s",
                labels=labels,
            )
            manifest["spec"]["template"]["metadata"]["annotations"][REQUIRED_TOPOLOGY] = RACK
            shape_of[name] = (pods_n, gpus)
            jobs.append(("/apis/batch/v1/namespaces/topo/jobs", manifest))
        seen = Admissions()
        pods = PodWatch(unschedulable_after=10.0)
        samples: list[float] = []
        created: dict[str, float] = {}
        started = time.monotonic()
        deadline = started + minutes * 60
        cpu_before = cpu_seconds(system.pid) if system.pid else 0.0

        async def sample() -> None:
            while len(seen.finished) < len(jobs) and time.monotonic() < deadline:
                await anyio.sleep(2)
                pods.check_stuck()
                samples.append(sum(pods.gpus_by_node.values()) / capacity)

        async with anyio.create_task_group() as tg:
            await tg.start(seen.informer(client, "topo").run)
            await tg.start(pods.informer(client).run)
            tg.start_soon(sample)
            await create_all(client, jobs, created=created)
            while len(seen.finished) < len(jobs) and time.monotonic() < deadline:  # noqa: ASYNC110
                await anyio.sleep(1)
            pods.check_stuck()
            tg.cancel_scope.cancel()
        cpu_used = (cpu_seconds(system.pid) - cpu_before) if system.pid else float("nan")
        rss = peak_rss_mib(system.pid) if system.pid else float("nan")
    racks_of: dict[str, set[str]] = {}
    bound_pods: Counter[str] = Counter()
    for key, node in pods.bound.items():
        ns, _, pod_name = key.partition("/")
        if ns == "topo":
            job = pod_name.rsplit("-", 1)[0]
            racks_of.setdefault(job, set()).add(rack_of.get(node, node))
            bound_pods[job] += 1
    whole = [j for j, (n, _) in shape_of.items() if bound_pods[j] >= n]
    in_one = sum(1 for j in whole if len(racks_of[j]) == 1)
    waits: dict[str, list[float]] = {}
    for name, (n, g) in shape_of.items():
        if name in seen.admitted and name in created:
            waits.setdefault(f"{n}x{g}", []).append(seen.admitted[name] - created[name])
    finished_at = max(seen.finished.values()) if seen.finished else float("nan")
    used = sum(samples) / len(samples) if samples else float("nan")
    return {
        "nodes": len(specs),
        "gpus": capacity,
        "gpus_used_by_unqueued_pods": filled,
        "gangs": len(jobs),
        "admitted": len(seen.admitted),
        "finished": len(seen.finished),
        "gangs_all_pods_bound": len(whole),
        "gangs_in_one_rack": in_one,
        "gangs_split_across_racks": len(whole) - in_one,
        "admitted_pods_unschedulable_over_10s": len(pods.stuck),
        "all_finished_s": finished_at - started,
        # Of all GPUs, and of those the unqueued pods left (the most the queue could use).
        "gpu_utilisation_mean": used,
        "queue_gpu_utilisation_mean": (used * capacity - filled) / (capacity - filled),
        **{
            f"wait_mean_s_{shape}": sum(v) / len(v)
            for shape, v in sorted(waits.items(), key=lambda kv: -int(kv[0].split("x")[0]))
        },
        "admitted_twice": sum(1 for v in seen.transitions.values() if v > 1),
        "controller_cpu_s": cpu_used,
        "controller_peak_rss_mib": rss,
        "unschedulable_pods": sorted(pods.stuck),
        "unschedulable_pinned_to": {k: pods.pending_on.get(k, "") for k in sorted(pods.stuck)},
        "unschedulable_bound_on": {k: pods.bound.get(k, "") for k in sorted(pods.stuck)},
        "split_gangs": sorted(j for j in whole if len(racks_of[j]) > 1),
        **placement_figures(getattr(system, "kq", None), pods.bound, "topo"),
    }


async def baseline(cluster: LocalCluster, system: System, settings: Settings) -> dict[str, Any]:
    """Kueue's test/performance/scheduler "baseline" mix, scaled: per queue 350 small (1 CPU,
    200 ms, one every 100 ms, priority 50), 100 medium (5 CPU, 500 ms, every 500 ms, 100), 50
    large (20 CPU, 1,000 ms, every 1,200 ms, 200); 30 queues of 20 CPU each, no borrowing; nodes
    sized so that the cluster holds exactly the queues' quota."""
    kubectl = Kubectl(cluster.binaries.kubectl, cluster.kubeconfig)
    queues = 30
    classes = [
        ("small", 1, 0.2, 0.1, 350, 50),
        ("medium", 5, 0.5, 0.5, 100, 100),
        ("large", 20, 1.0, 1.2, 50, 200),
    ]
    async with _client(cluster, settings) as client:
        await _nodes(
            cluster,
            client,
            [NodeSpec(f"cpu-{i:02d}", cpu="20", memory="200Gi", pods=110) for i in range(queues)],
        )
        for _, _, _, _, _, prio in classes:
            await kubectl.apply(
                {
                    "apiVersion": "scheduling.k8s.io/v1",
                    "kind": "PriorityClass",
                    "metadata": {"name": f"p{prio}"},
                    "value": prio,
                }
            )
        await system.start(cluster, kubectl)
        labels = []
        for q in range(queues):
            ns = f"q{q:02d}"
            await _namespace(client, ns)
            labels.append(await system.queue(kubectl, f"cq-{q:02d}", "20", "200Gi", 0, ns))
        seen = Admissions()
        created: dict[str, float] = {}
        kind_of: dict[str, str] = {}
        total = 0

        async def arrivals(q: int, cls: tuple[str, int, float, float, int, int]) -> None:
            name, cpu, runtime, every, count, prio = cls
            ns = f"q{q:02d}"
            for i in range(max(1, int(count * settings.scale))):
                job_name = f"{name}-{i:04d}"
                kind_of[f"{ns}/{job_name}"] = name
                manifest = _job(
                    job_name,
                    cpu=str(cpu),
                    memory="1Gi",
                    run_for=f"{runtime}s",
                    labels=labels[q],
                    priority_class=f"p{prio}",
                )
                manifest["metadata"]["namespace"] = ns
                stamp = await create_all(
                    client, [(f"/apis/batch/v1/namespaces/{ns}/jobs", manifest)]
                )
                created[f"{ns}/{job_name}"] = stamp[job_name]
                await anyio.sleep(every)

        for _, _, _, _, count, _ in classes:
            total += queues * max(1, int(count * settings.scale))
        usage: list[float] = []
        pods = PodWatch()
        started = time.monotonic()
        async with anyio.create_task_group() as tg:
            await tg.start(_NamespacedAdmissions(seen).informer(client).run)
            await tg.start(pods.informer(client).run)

            async def sample() -> None:
                while True:
                    await anyio.sleep(1)
                    usage.append(sum(pods.cpu_by_node.values()) / (queues * 20))
                    pods.check_stuck()

            tg.start_soon(sample)
            async with anyio.create_task_group() as feeders:
                for q in range(queues):
                    for cls in classes:
                        feeders.start_soon(arrivals, q, cls)
            while len(seen.finished) < total and time.monotonic() - started < 3600:  # noqa: ASYNC110
                await anyio.sleep(0.5)
            tg.cancel_scope.cancel()
        wall = time.monotonic() - started
    per_class: dict[str, list[float]] = {}
    for key, t in seen.admitted.items():
        if key in created:
            per_class.setdefault(kind_of[key], []).append(t - created[key])
    return {
        "queues": queues,
        "scale": settings.scale,
        "jobs": total,
        "finished": len(seen.finished),
        "wall_s": wall,
        "usage_mean": sum(usage) / len(usage) if usage else float("nan"),
        **{f"avg_wait_{c}_s": sum(v) / len(v) for c, v in per_class.items() if v},
        # Admitted by quota is not placed: a 20-CPU pod needs one empty node.
        "admitted_pods_unschedulable_over_10s": len(pods.stuck),
    }


class _NamespacedAdmissions:
    """Admissions across namespaces, keyed namespace/name."""

    def __init__(self, seen: Admissions) -> None:
        self.seen = seen

    def upsert(self, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        renamed = {**obj, "metadata": {**meta, "name": f"{meta['namespace']}/{meta['name']}"}}
        self.seen._observe(renamed)

    def delete(self, key: str) -> None:
        pass

    def synced(self) -> None:
        pass

    def informer(self, client: KubeClient) -> Any:
        from kubequeue.kube.informer import Informer, dict_codec

        return Informer(
            client, "bench-jobs", "/apis/batch/v1/jobs", dict_codec(), self, watch_timeout=600
        )


# ---------------------------------------------------------------------------- driver
@dataclass
class Outcome:
    scenario: str
    system: str
    result: dict[str, Any] = field(default_factory=dict)


async def run_scenario(
    scenario: str, system_name: str, settings: Settings, **sizes: Any
) -> Outcome:
    """One scenario on a fresh local cluster."""
    with LocalCluster() as cluster:
        if scenario == "ceiling":
            result = await ceiling(cluster, settings, sizes["jobs"])
            return Outcome(scenario, "client loop", result)
        system = make_system(system_name, settings)
        try:
            if scenario in ("burst", "backlog"):
                result = await burst(
                    cluster,
                    system,
                    settings,
                    sizes["nodes"],
                    sizes["jobs"],
                    backlog=scenario == "backlog",
                )
            elif scenario == "fragmentation":
                result = await fragmentation(cluster, system, settings, sizes["minutes"])
            elif scenario == "baseline":
                result = await baseline(cluster, system, settings)
            elif scenario == "topology":
                result = await topology(cluster, system, settings, sizes["minutes"])
            else:
                raise ValueError(f"unknown scenario {scenario!r}")
        finally:
            await system.stop()
        return Outcome(scenario, system_name, result)


def dumps(outcomes: Sequence[Outcome]) -> str:
    return json.dumps([o.__dict__ for o in outcomes], indent=2)
