"""Seeded fault scenarios: a burst of short GPU jobs flows through the real controller while one
kind of fault hits it, and the independent checker (checker.py) judges every run.

Every run: a fresh namespace, four fresh 8-GPU KWOK nodes, ``jobs`` suspended Jobs of mixed
shapes (0/1/2/4 GPUs, some 2-pod gangs, 2-6 s of runtime: several waves through 32 GPUs),
created in a few seconds. The run ends when every job has finished (or been deleted by the
test), or at ``bound_s`` (then the checker reports who was not admitted). Faults are drawn
from ``random.Random(seed)``, so a seed replays the same fault schedule (the timing of the
system around it is real, hence not replayed exactly).

Controllers run under the chart's RBAC as separate processes, with a short lease
(``--lease-duration 6 --renew-deadline 4 --retry-period 1``) so failovers fit in a test.
"""

from __future__ import annotations

import contextlib
import datetime
import itertools
import json
import random
import statistics
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import yaml

from e2e.chaos.checker import Checker, admin_tls
from e2e.chaos.proxy import FaultProxy, Mode
from e2e.cluster.nodes import NodeSpec
from e2e.cluster.runner import LocalCluster
from e2e.controller import ControllerIdentity, KubeQueue
from e2e.jobs import job
from e2e.support import FakeNodes, Kubectl, new_test_id

FAULTS = (
    "none",
    "controller-kill",
    "apiserver-restart",
    "watch-410",
    "network",
    "leader-kill",
    "leader-cutoff",
    "churn",
)
BACKGROUND = "propagationPolicy=Background"
LEASE_FLAGS = ("--lease-duration=6", "--renew-deadline=4", "--retry-period=1")
NODES = 4
GPUS_PER_NODE = 8


@dataclass
class RunResult:
    fault: str
    seed: int
    jobs: int
    wall_s: float = 0.0
    finished: int = 0
    violations: list[str] = field(default_factory=list)
    recovery_s: list[float] = field(default_factory=list)
    """Per fault injected: from the fault's end (or the kill) to the next admission."""
    faults: int = 0
    notes: dict[str, Any] = field(default_factory=dict)


class AdminApi:
    """Raw admin requests for the test's own writes (creating, editing, deleting jobs)."""

    def __init__(self, kubeconfig: Path) -> None:
        self.server, tls = admin_tls(kubeconfig)
        self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=tls, limit=16))

    async def close(self) -> None:
        await self._session.close()

    async def call(self, method: str, path: str, body: Any = None,
                   content_type: str = "application/json") -> dict[str, Any]:
        for attempt in range(30):  # the API server may be down for a moment: that is the test
            try:
                async with self._session.request(
                    method, self.server + path,
                    data=json.dumps(body) if body is not None else None,
                    headers={"Content-Type": content_type},
                    timeout=aiohttp.ClientTimeout(total=20),
                ) as resp:
                    if resp.status in (404, 409) and method in ("DELETE", "PATCH"):
                        return {}
                    if resp.status >= 500 or resp.status == 429:
                        raise aiohttp.ClientError(f"{resp.status}")
                    resp.raise_for_status()
                    answer: dict[str, Any] = await resp.json()
                    return answer
            except (aiohttp.ClientError, TimeoutError, OSError):
                if attempt == 29:
                    raise
                await anyio.sleep(0.5)
        raise AssertionError("unreachable")

    async def merge(self, path: str, body: Any) -> dict[str, Any]:
        return await self.call("PATCH", path, body, "application/merge-patch+json")

    async def post_all(self, path: str, manifests: list[dict[str, Any]],
                       concurrency: int) -> None:
        """POST every manifest to ``path``, ``concurrency`` at a time."""
        limiter = anyio.Semaphore(concurrency)

        async def one(manifest: dict[str, Any]) -> None:
            async with limiter:
                await self.call("POST", path, manifest)

        async with anyio.create_task_group() as tg:
            for manifest in manifests:
                tg.start_soon(one, manifest)


def workload(rng: random.Random, count: int, prefix: str,
             runtime_s: tuple[float, float] = (2, 6), long_share: float = 0.25
             ) -> list[dict[str, Any]]:
    """Mixed shapes: 0/1/2/4 GPUs, some 2-pod gangs. Mostly ``runtime_s`` runs, and a
    ``long_share`` of 18-24 s runs, longer than the checker's 15 s grace, so that an
    over-admitted pod would stay Pending long enough to be caught."""
    out = []
    for i in range(count):
        p = rng.random()
        gpus = 0 if p < 0.2 else 1 if p < 0.6 else 2 if p < 0.85 else 4
        pods = 2 if gpus and rng.random() < 0.15 else 1
        runtime = rng.uniform(18, 24) if rng.random() < long_share else rng.uniform(*runtime_s)
        out.append(job(f"{prefix}-{i:04d}", gpus=gpus, pods=pods, cpu=rng.choice(["500m", "1"]),
                       memory="1Gi", run_for=f"{runtime:.1f}s"))
    return out


def _kubeconfig_via(identity: ControllerIdentity, port: int, path: Path) -> ControllerIdentity:
    """A copy of the identity's kubeconfig that talks to the API server through a proxy."""
    config = yaml.safe_load(identity.kubeconfig.read_text())
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{port}"
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return ControllerIdentity(path)


def _log_time(kq: KubeQueue, event: str) -> list[float]:
    return [
        datetime.datetime.fromisoformat(e["timestamp"].replace("Z", "+00:00")).timestamp()
        for e in kq.log_events(event)
    ]


class Campaign:
    """Runs fault scenarios on one LocalCluster (each run in its own namespace and nodes)."""

    def __init__(self, cluster: LocalCluster, kubectl: Kubectl, identity: ControllerIdentity,
                 log_dir: Path, bound_s: float = 240.0) -> None:
        self.cluster = cluster
        self.kubectl = kubectl
        self.identity = identity
        self.log_dir = log_dir
        self.bound_s = bound_s

    async def run(self, fault: str, seed: int, jobs: int) -> RunResult:
        if fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}; known: {', '.join(FAULTS)}")
        rng = random.Random(f"{fault}/{seed}")
        run_id = f"{fault}-{seed}-{uuid.uuid4().hex[:4]}"
        ns = f"chaos-{run_id}"
        result = RunResult(fault, seed, jobs)
        api = AdminApi(self.cluster.kubeconfig)
        nodes = FakeNodes(self.kubectl, new_test_id())
        controllers: list[KubeQueue] = []
        try:
            await self.kubectl("create", "namespace", ns)
            await nodes.create(*(NodeSpec(f"chaos{i}", gpus=GPUS_PER_NODE, cpu="32")
                                 for i in range(NODES)))
            checker = Checker(self.cluster.kubeconfig, ns, clock=time.time)
            manifests = workload(rng, jobs, "j")
            async with checker.running():
                started = time.time()
                await self._scenario(fault, rng, ns, api, nodes, checker, manifests,
                                     controllers, result)
                result.wall_s = time.time() - started
                blocked = result.notes.get("blocked", set())
                result.violations += checker.final(lambda name: name not in blocked,
                                                   self.bound_s)
                result.finished = sum(1 for j in checker.jobs.values() if j.finished)
                result.notes["checker_relists"] = checker.found.relists
                result.notes["checker_events"] = checker.found.events
                stops = [stop.partition(" ")[0] for j in checker.jobs.values() for stop in j.stops]
                if stops:  # kube-queue's own suspensions (unplaceable requeues), by why
                    result.notes["kube_queue_stops"] = dict(sorted(Counter(stops).items()))
            result.notes.pop("blocked", None)
        finally:
            for kq in controllers:
                await kq.stop()
            await api.close()
            await self.kubectl("delete", "namespace", ns, "--wait=false")
            await nodes.delete(*nodes.names)
        return result

    # ---------------------------------------------------------------------------- helpers
    def _controller(self, name: str, ns: str, identity: ControllerIdentity | None = None
                    ) -> KubeQueue:
        return KubeQueue(identity or self.identity, self.log_dir / ns, name,
                         f"--namespaces={ns}", *LEASE_FLAGS)

    async def _until_done(self, checker: Checker, names: list[str], blocked: set[str]) -> None:
        deadline = time.time() + self.bound_s
        while time.time() < deadline:
            pending = [
                n for n in names
                if n not in blocked and not (checker.jobs.get(n) and (
                    checker.jobs[n].finished or checker.jobs[n].deleted))
            ]
            if not pending:
                return
            await anyio.sleep(0.5)

    @staticmethod
    def _next_admission(checker: Checker, after: float) -> float | None:
        later = [t for t in checker.admission_times if t >= after]
        return min(later) - after if later else None

    async def _scenario(self, fault: str, rng: random.Random, ns: str, api: AdminApi,
                        nodes: FakeNodes, checker: Checker, manifests: list[dict[str, Any]],
                        controllers: list[KubeQueue], result: RunResult) -> None:
        names = [m["metadata"]["name"] for m in manifests]
        blocked: set[str] = set()
        result.notes["blocked"] = blocked
        heals: list[float] = []
        done = anyio.Event()

        injectors: dict[str, Callable[[], Awaitable[None]]] = {}
        proxies: list[FaultProxy] = []
        if fault in ("network", "leader-cutoff"):
            for _ in range(2 if fault == "leader-cutoff" else 1):
                proxies.append(FaultProxy(int(self.cluster.server.rsplit(":", 1)[1])))

        async with contextlib.AsyncExitStack() as stack:
            for proxy in proxies:
                await stack.enter_async_context(proxy.serving())
            if fault in ("leader-kill", "leader-cutoff"):
                for i, name in enumerate(("kq-a", "kq-b")):
                    identity = (_kubeconfig_via(self.identity, proxies[i].port,
                                                self.log_dir / f"{ns}-{name}.kubeconfig")
                                if proxies else None)
                    controllers.append(self._controller(name, ns, identity))
            elif fault == "network":
                identity = _kubeconfig_via(self.identity, proxies[0].port,
                                           self.log_dir / f"{ns}.kubeconfig")
                controllers.append(self._controller("kq", ns, identity))
            else:
                controllers.append(self._controller("kq", ns))
            (self.log_dir / ns).mkdir(parents=True, exist_ok=True)
            for kq in controllers:
                await kq.start()

            async def controller_kill() -> None:
                # A kill at a random moment of leadership (mostly mid-burst, a few during
                # start-up): a restarted replica has a new identity, so it waits out the dead
                # one's lease first; killing it again before it ever leads would test nothing.
                kq = controllers[0]
                while not done.is_set():
                    await anyio.sleep(rng.uniform(0.5, 4))
                    if done.is_set():
                        return
                    kq.kill()
                    result.faults += 1
                    await anyio.sleep(rng.uniform(0, 1))
                    await kq.start(timeout_s=60)
                    heals.append(time.time())
                    if rng.random() < 0.8:
                        with anyio.fail_after(60):
                            while not done.is_set() and not await kq.is_leader():  # noqa: ASYNC110 - a poll
                                await anyio.sleep(0.2)

            async def apiserver_restart(compact: bool = False) -> None:
                relists_before = await _metric(controllers[0], "kube_queue_relists_total")
                for _ in range(2):
                    await anyio.sleep(rng.uniform(3, 8))
                    if done.is_set():
                        break
                    if compact:
                        result.notes["compacted_to"] = await anyio.to_thread.run_sync(
                            self.cluster.etcd_compact)
                    self.cluster.restart("kube-apiserver")
                    result.faults += 1
                    with anyio.fail_after(90):
                        while not await anyio.to_thread.run_sync(  # noqa: ASYNC110
                                self.cluster.healthy, "kube-apiserver"):
                            await anyio.sleep(0.2)
                    heals.append(time.time())
                await anyio.sleep(5)
                result.notes["controller_relists"] = (
                    await _metric(controllers[0], "kube_queue_relists_total") - relists_before)

            async def network() -> None:
                proxy = proxies[0]
                modes: dict[str, int] = {}
                while not done.is_set():
                    await anyio.sleep(rng.uniform(2, 5))
                    if done.is_set():
                        return
                    mode: Mode = rng.choice(["delay", "reset", "drop"])
                    modes[mode] = modes.get(mode, 0) + 1
                    result.notes["modes"] = dict(sorted(modes.items()))
                    result.faults += 1
                    if mode == "delay":
                        proxy.delay_s = rng.uniform(0.2, 1.5)
                    proxy.set(mode)
                    await anyio.sleep(0 if mode == "reset" else rng.uniform(2, 8))
                    proxy.set("pass")
                    heals.append(time.time())

            async def leader_faults(cut: bool) -> None:
                failovers: list[float] = []
                for _ in range(2):
                    await anyio.sleep(rng.uniform(3, 6))
                    if done.is_set():
                        break
                    leader = await _leader(controllers)
                    if leader is None:
                        continue
                    other = controllers[1 - controllers.index(leader)]
                    at = time.time()
                    result.faults += 1
                    if cut:
                        proxies[controllers.index(leader)].set("drop")
                    else:
                        leader.kill()
                    with anyio.fail_after(60):
                        while not await other.is_leader():  # noqa: ASYNC110 - a poll
                            await anyio.sleep(0.2)
                    failovers.append(time.time() - at)
                    heals.append(at)  # recovery for a failover: from the fault itself
                    await anyio.sleep(rng.uniform(2, 4))
                    if cut:
                        proxies[controllers.index(leader)].set("pass")
                    else:
                        await leader.start(timeout_s=60)
                result.notes["failover_s"] = [round(f, 2) for f in failovers]
                if cut:
                    gaps, overlaps = _handover_gaps(controllers)
                    result.notes["handover_gaps_s"] = gaps
                    result.violations += overlaps

            async def churn() -> None:
                pc = f"chaos-pc-{ns}"[:63]
                await api.call("POST", "/apis/scheduling.k8s.io/v1/priorityclasses", {
                    "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                    "metadata": {"name": pc}, "value": 10})
                actions: dict[str, int] = {}
                extra = 0
                pc_deleted = False
                jobs_path = f"/apis/batch/v1/namespaces/{ns}/jobs"
                while not done.is_set():
                    await anyio.sleep(rng.uniform(0.3, 1.5))
                    seen = dict(checker.jobs)
                    queued = [n for n, j in seen.items()
                              if j.suspended and not j.deleted and not j.finished]
                    running = [n for n, j in seen.items()
                               if not j.suspended and not j.deleted and not j.finished]
                    action = rng.choice(["delete-queued", "delete-running", "parallelism",
                                         "resuspend", "cordon", "add-node", "delete-node",
                                         "priority-class"])
                    if action == "delete-queued" and queued:
                        victim = rng.choice(queued)
                        checker.user_deleted(victim)
                        await api.call("DELETE", f"{jobs_path}/{victim}?{BACKGROUND}")
                    elif action == "delete-running" and running:
                        victim = rng.choice(running)
                        checker.user_deleted(victim)
                        await api.call("DELETE", f"{jobs_path}/{victim}?{BACKGROUND}")
                    elif action == "parallelism" and queued:
                        target = rng.choice(queued)
                        await api.merge(f"{jobs_path}/{target}",
                                        {"spec": {"parallelism": rng.choice([1, 2])}})
                    elif action == "resuspend" and running:
                        target = rng.choice(running)
                        checker.user_suspended(target)
                        await api.merge(f"{jobs_path}/{target}", {"spec": {"suspend": True}})
                    elif action == "cordon" and nodes.names:
                        node = rng.choice(nodes.names)
                        await api.merge(f"/api/v1/nodes/{node}", {"spec": {"unschedulable": True}})
                        await anyio.sleep(rng.uniform(1, 3))
                        await api.merge(f"/api/v1/nodes/{node}",
                                        {"spec": {"unschedulable": False}})
                    elif action == "add-node" and extra < 2:
                        extra += 1
                        await nodes.create(NodeSpec(f"chaosx{extra}", gpus=GPUS_PER_NODE))
                    elif action == "delete-node" and len(nodes.names) > NODES - 1:
                        # A node with no pod of ours bound to it (holds may be on it): the
                        # capacity left still fits every job.
                        busy = {p.node for p in checker.pods.values() if not p.terminal}
                        idle = [n for n in nodes.names if n not in busy]
                        if not idle:
                            continue
                        await nodes.delete(rng.choice(idle))
                    elif action == "priority-class" and not pc_deleted and queued:
                        # Some queued jobs are recreated using the class, then it goes away.
                        users = rng.sample(queued, min(3, len(queued)))
                        for name in users:
                            checker.user_deleted(name)
                            await api.call("DELETE",
                                           f"{jobs_path}/{name}?{BACKGROUND}")
                            manifest = job(f"{name}-pc", gpus=1, priority_class=pc,
                                           run_for="3s")
                            await api.call("POST", jobs_path, manifest)
                            blocked.add(f"{name}-pc")  # may never get pods: the class is gone
                        await anyio.sleep(rng.uniform(0, 2))
                        await api.call("DELETE", f"/apis/scheduling.k8s.io/v1/priorityclasses/{pc}")
                        pc_deleted = True
                    else:
                        continue
                    actions[action] = actions.get(action, 0) + 1
                    result.faults += 1
                result.notes["actions"] = dict(sorted(actions.items()))

            injectors = {
                "none": _idle,
                "controller-kill": controller_kill,
                "apiserver-restart": apiserver_restart,
                "watch-410": lambda: apiserver_restart(compact=True),
                "network": network,
                "leader-kill": lambda: leader_faults(cut=False),
                "leader-cutoff": lambda: leader_faults(cut=True),
                "churn": churn,
            }

            async with anyio.create_task_group() as tg:
                tg.start_soon(_run_then_set, injectors[fault], anyio.Event())
                await api.post_all(f"/apis/batch/v1/namespaces/{ns}/jobs", manifests, 8)
                await self._until_done(checker, names, blocked)
                done.set()  # the injector finishes its current step (restarting what it killed)
            for heal in heals:
                gap = self._next_admission(checker, heal)
                if gap is not None:
                    result.recovery_s.append(gap)
            for proxy in proxies:
                proxy.set("pass")


async def _idle() -> None:
    return


async def _run_then_set(fn: Callable[[], Awaitable[None]], event: anyio.Event) -> None:
    await fn()
    event.set()


async def _metric(kq: KubeQueue, name: str) -> float:
    total = 0.0
    try:
        text = await kq.metrics()
    except OSError:
        return 0.0
    for line in text.splitlines():
        if line.startswith(name) and not line.startswith("#"):
            total += float(line.rsplit(" ", 1)[1])
    return total


async def _leader(controllers: list[KubeQueue]) -> KubeQueue | None:
    for kq in controllers:
        try:
            if kq.process.running() and await kq.is_leader():
                return kq
        except OSError:
            continue
    return None


def _leadership(controllers: list[KubeQueue]) -> list[tuple[float, float, str]]:
    """(start, end, replica) of every leadership term, from the replicas' own logs: a term ends
    at ``leader.lost`` (the replica stopped admitting) or is still open."""
    terms = []
    for kq in controllers:
        starts = _log_time(kq, "leader.acquired")
        ends = _log_time(kq, "leader.lost")
        for start in starts:
            end = min((e for e in ends if e >= start), default=float("inf"))
            terms.append((start, end, kq.name))
    return sorted(terms)


def _handover_gaps(controllers: list[KubeQueue]) -> tuple[list[float], list[str]]:
    """Seconds between one leader stopping and the next starting (must be positive: a leader
    cut off from the API server stops admitting before anyone else can start), and any overlap
    of two replicas' terms as a violation."""
    terms = _leadership(controllers)
    gaps, overlaps = [], []
    for (_s1, e1, a), (s2, _e2, b) in itertools.pairwise(terms):
        if a == b:
            continue
        gaps.append(round(s2 - e1, 2))
        if s2 < e1:
            overlaps.append(f"{b} started leading at {s2:.2f} while {a} led until {e1:.2f}")
    return gaps, overlaps


def summarise(results: list[RunResult]) -> str:
    """The Markdown table of docs/reliability.md: one row per fault."""
    by: dict[str, list[RunResult]] = {}
    for r in results:
        by.setdefault(r.fault, []).append(r)
    lines = [
        "| fault | runs | seeds | jobs per run | faults injected | violations | "
        "recovery p50 / p99 (s) | wall p50 (s) | notes |",
        "|---|---:|---|---:|---:|---:|---|---:|---|",
    ]
    for fault, runs in by.items():
        rec = sorted(x for r in runs for x in r.recovery_s)
        p50 = f"{statistics.median(rec):.2f}" if rec else "-"
        p99 = f"{rec[min(len(rec) - 1, int(0.99 * len(rec)))]:.2f}" if rec else "-"
        notes = "; ".join(
            f"{k}={v}" for r in runs[:1] for k, v in r.notes.items()
            if k not in ("checker_events",)
        )
        lines.append(
            f"| {fault} | {len(runs)} | {','.join(str(r.seed) for r in runs)} | "
            f"{runs[0].jobs} | {sum(r.faults for r in runs)} | "
            f"{sum(len(r.violations) for r in runs)} | {p50} / {p99} | "
            f"{statistics.median(r.wall_s for r in runs):.0f} | {notes} |"
        )
    return "\n".join(lines)
