"""The scale soak: thousands of queued jobs on hundreds of KWOK nodes, drained by a steady stream of
completions over several minutes, with the independent checker watching throughout and the
controller's memory sampled from /proc. The claim under test: memory follows the *queue*, so
after the queue drains it stops growing (no leak per admitted or finished job), and the event
stream stays bounded (one Queued event per job, not one per cycle).

Not part of ``make test`` (minutes of wall time and most of a 2-core machine): ``make chaos``
runs it after the fault campaign, ``python -m e2e.chaos --scale`` alone.
"""

from __future__ import annotations

import random
import statistics
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from e2e.chaos.checker import Checker
from e2e.chaos.scenarios import AdminApi
from e2e.cluster.nodes import NodeSpec
from e2e.cluster.runner import LocalCluster
from e2e.controller import ControllerIdentity, KubeQueue
from e2e.jobs import job
from e2e.support import TEST_LABEL, Kubectl

COMPONENT = "kube-queue"


@dataclass
class Sample:
    t: float
    queued: int
    running: int
    finished: int
    rss_mib: float
    events: int


@dataclass
class ScaleResult:
    nodes: int
    jobs: int
    seed: int
    samples: list[Sample] = field(default_factory=list)
    drained_at: float | None = None
    violations: list[str] = field(default_factory=list)
    notes: dict[str, Any] = field(default_factory=dict)

    def report(self) -> str:
        """A Markdown summary and the sampled series, for docs/reliability.md."""
        peak = max((s.rss_mib for s in self.samples), default=float("nan"))
        after = [s for s in self.samples if self.drained_at is not None and s.t >= self.drained_at]
        lines = [
            f"scale soak: {self.nodes} nodes x 8 GPUs, {self.jobs} jobs, seed {self.seed}",
            f"- violations: {len(self.violations)}"
            + "".join(f"\n  - {v}" for v in self.violations[:20]),
            f"- controller RSS: peak {peak:.0f} MiB"
            + (f"; at drain {after[0].rss_mib:.0f} MiB, {after[-1].t - after[0].t:.0f} s later "
               f"{after[-1].rss_mib:.0f} MiB" if after else "; the queue never drained"),
        ]
        lines += [f"- {k}: {v}" for k, v in self.notes.items()]
        lines += ["", "| t (s) | queued | running | finished | RSS (MiB) | Events/s |",
                  "|---:|---:|---:|---:|---:|---:|"]
        previous: Sample | None = None
        for s in self.samples:
            rate = ((s.events - previous.events) / (s.t - previous.t)
                    if previous and s.t > previous.t else 0.0)
            lines.append(f"| {s.t:.0f} | {s.queued} | {s.running} | {s.finished} | "
                         f"{s.rss_mib:.0f} | {rate:.1f} |")
            previous = s
        return "\n".join(lines)


def _rss_mib(pid: int | None) -> float:
    if pid is None:
        return float("nan")
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


async def _create_nodes(api: AdminApi, specs: list[dict[str, Any]], label: str) -> None:
    await api.post_all("/api/v1/nodes", specs, 16)
    # Usable once KWOK reports Ready and the node lifecycle controller lifted the not-ready
    # taint the API server adds on create.
    with anyio.fail_after(300):
        while True:
            page = await api.call("GET", f"/api/v1/nodes?labelSelector={label}")
            usable = sum(
                1 for n in page.get("items") or []
                if any(c.get("type") == "Ready" and c.get("status") == "True"
                       for c in (n.get("status") or {}).get("conditions") or [])
                and not any(t.get("key", "").startswith("node.kubernetes.io/")
                            for t in (n.get("spec") or {}).get("taints") or [])
            )
            if usable >= len(specs):
                return
            await anyio.sleep(2)


async def soak(cluster: LocalCluster, kubectl: Kubectl, identity: ControllerIdentity,
               log_dir: Path, nodes: int = 500, jobs: int = 5000, seed: int = 1,
               runtime_s: tuple[float, float] = (60, 120), hold_s: float = 90,
               bound_s: float = 1800, sample_s: float = 5) -> ScaleResult:
    result = ScaleResult(nodes, jobs, seed)
    rng = random.Random(f"scale/{seed}")
    run_id = uuid.uuid4().hex[:6]
    ns = f"scale-{run_id}"
    label = f"{TEST_LABEL}={ns}"
    api = AdminApi(cluster.kubeconfig)
    kq = KubeQueue(identity, log_dir / ns, "kq", f"--namespaces={ns}")
    node_names: list[str] = []
    try:
        await kubectl("create", "namespace", ns)
        specs = [NodeSpec(f"s{i:04d}-{run_id}", gpus=8, cpu="64", memory="512Gi")
                 .manifest(extra_labels={TEST_LABEL: ns}) for i in range(nodes)]
        node_names = [m["metadata"]["name"] for m in specs]
        started = time.monotonic()
        await _create_nodes(api, specs, label)
        result.notes["nodes_ready_s"] = round(time.monotonic() - started, 1)
        (log_dir / ns).mkdir(parents=True, exist_ok=True)
        await kq.start(timeout_s=120)
        manifests = soak_jobs(rng, jobs, runtime_s)
        checker = Checker(cluster.kubeconfig, ns)
        async with checker.running():
            t0 = time.monotonic()
            async with anyio.create_task_group() as tg:
                tg.start_soon(_sample, checker, kq, result, t0, sample_s, tg.cancel_scope)
                created = time.monotonic()
                await api.post_all(f"/apis/batch/v1/namespaces/{ns}/jobs", manifests, 16)
                result.notes["jobs_created_s"] = round(time.monotonic() - created, 1)
                deadline = time.monotonic() + bound_s
                while time.monotonic() < deadline:
                    if all(j.finished for j in checker.jobs.values()) and \
                            len(checker.jobs) >= jobs:
                        break
                    await anyio.sleep(1)
                result.drained_at = time.monotonic() - t0
                await anyio.sleep(hold_s)  # nothing queued, nothing running: memory must hold
                tg.cancel_scope.cancel()
            result.violations = checker.final(lambda _name: True, bound_s)
            result.notes["checker_watch_events"] = checker.found.events
            admitted = sorted(checker.admission_times)
            if len(admitted) > 1:
                result.notes["admissions_per_s_while_queued"] = round(
                    len(admitted) / (admitted[-1] - admitted[0]), 1)
            finished = [s.rss_mib for s in result.samples
                        if result.drained_at is not None and s.t >= result.drained_at]
            if len(finished) > 2:
                result.notes["rss_after_drain_mib"] = (
                    f"min {min(finished):.0f} / median {statistics.median(finished):.0f} / "
                    f"max {max(finished):.0f}")
    finally:
        await kq.stop()
        await api.close()
        await kubectl("delete", "namespace", ns, "--wait=false")
        if node_names:
            await kubectl("delete", "nodes", "-l", label, "--wait=false")
    return result


def soak_jobs(rng: random.Random, count: int, runtime_s: tuple[float, float]
              ) -> list[dict[str, Any]]:
    """GPU jobs only (1/2/4/8 GPUs, 2.6 on average, a tenth of them 2-pod gangs): 5,000 of them
    ask for about three times what 500 8-GPU nodes hold, so most of them wait in the queue
    and it drains wave after wave as runs end."""
    out = []
    for i in range(count):
        gpus = rng.choices([1, 2, 4, 8], weights=[40, 30, 20, 10])[0]
        pods = 2 if gpus <= 4 and rng.random() < 0.1 else 1
        out.append(job(f"s-{i:05d}", gpus=gpus, pods=pods, cpu="1", memory="2Gi",
                       run_for=f"{rng.uniform(*runtime_s):.0f}s"))
    return out


async def _sample(checker: Checker, kq: KubeQueue, result: ScaleResult, t0: float,
                  every_s: float, scope: anyio.CancelScope) -> None:
    while not scope.cancel_called:
        jobs = list(checker.jobs.values())
        result.samples.append(Sample(
            t=time.monotonic() - t0,
            queued=sum(1 for j in jobs if j.suspended and not j.finished and not j.deleted),
            running=sum(1 for j in jobs if not j.suspended and not j.finished),
            finished=sum(1 for j in jobs if j.finished),
            rss_mib=_rss_mib(kq.process.pid),
            events=checker.events_from.get(COMPONENT, 0),
        ))
        await anyio.sleep(every_s)
