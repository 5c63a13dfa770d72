"""Admission latency and controller memory on the real local cluster (not a timed test).

    python -m bench.cluster_latency [--nodes 25] [--backlog 40]

Starts the local control plane with fake 8-GPU nodes, runs the controller (same process setup as
the e2e tests), then:
1. burst: submits 8 suspended 1-GPU Jobs per node (exactly filling the cluster) and measures, per
   job, the time from the create call returning to kube-queue's admission (a kubectl watch seeing
   suspend=false);
2. backlog: queues ``--backlog`` more, then frees one GPU at a time (force-deletes one running
   pod) and measures the time to the admission it enables, both from the delete call (this
   includes the Job controller's ~1 s pod-finalizer batching, which holds the pod until then)
   from the pod's DELETED watch event, and from the moment the Job controller marks the victim
   Job finished: kube-queue keeps holding a running Job's capacity when one of its pods vanishes
   (the Job may replace it) until the Job reports it is done, and the Job controller batches
   those status updates (~1 s), so the last figure is kube-queue's own reaction time;
and prints p50/p95/p99 plus the controller's peak RSS (VmHWM from /proc).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

from e2e.cluster.build import ensure_binaries
from e2e.cluster.nodes import NodeSpec
from e2e.cluster.runner import LocalCluster
from e2e.controller import KubeQueue, install_identity
from e2e.jobs import job
from e2e.support import Kubectl

NAMESPACE = "latency"


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _summary(name: str, values: list[float]) -> str:
    ms = [v * 1000 for v in values]
    return (
        f"{name:34} n={len(ms):4}  p50={_pct(ms, 0.5):7.1f} ms  p95={_pct(ms, 0.95):7.1f} ms"
        f"  p99={_pct(ms, 0.99):7.1f} ms  max={max(ms):7.1f} ms  mean={statistics.mean(ms):.1f}"
    )


class AdmissionWatch:
    """Follows Jobs (or Pods) with ``kubectl get --watch`` and records when each Job became
    unsuspended (or each Pod was deleted)."""

    def __init__(self, kubectl: Kubectl, resource: str = "jobs") -> None:
        self.kubectl = kubectl
        self.resource = resource
        self.admitted: dict[str, float] = {}
        self.finished: dict[str, float] = {}
        self._proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        self._proc = await asyncio.create_subprocess_exec(
            *self.kubectl.argv(
                "get",
                self.resource,
                "-n",
                NAMESPACE,
                "--watch",
                "-o",
                "json",
                "--output-watch-events",
            ),
            stdout=asyncio.subprocess.PIPE,
            limit=2**24,
        )
        asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        assert self._proc is not None
        assert self._proc.stdout is not None
        decoder = json.JSONDecoder()
        buffer = ""
        while chunk := await self._proc.stdout.read(65536):
            buffer += chunk.decode()
            while True:
                buffer = buffer.lstrip()
                try:
                    event, end = decoder.raw_decode(buffer)
                except ValueError:
                    break
                buffer = buffer[end:]
                obj = event.get("object", {})
                if self.resource == "pods":
                    job_name = obj.get("metadata", {}).get("labels", {}).get("job-name")
                    if job_name and event.get("type") == "DELETED":
                        self.admitted.setdefault(job_name, time.monotonic())
                    continue
                name = obj.get("metadata", {}).get("name")
                if name and obj.get("spec", {}).get("suspend") is False:
                    self.admitted.setdefault(name, time.monotonic())
                conditions = obj.get("status", {}).get("conditions") or []
                if name and any(
                    c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
                    for c in conditions
                ):
                    self.finished.setdefault(name, time.monotonic())

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.kill()

    async def wait_finished(self, name: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while name not in self.finished:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name} did not finish in {timeout}s")
            await asyncio.sleep(0.01)

    async def wait_for(self, names: set[str], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not names <= self.admitted.keys():
            if time.monotonic() > deadline:
                missing = sorted(names - self.admitted.keys())[:5]
                raise TimeoutError(f"not admitted in {timeout}s: {missing}...")
            await asyncio.sleep(0.01)


def _peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def _create(kubectl: Kubectl, manifest: dict[str, Any]) -> float:
    await kubectl("create", "-n", NAMESPACE, "-f", "-", stdin=json.dumps(manifest))
    return time.monotonic()


async def measure(cluster: LocalCluster, nodes: int, backlog: int) -> None:
    jobs = nodes * 8  # exactly fills the cluster
    binaries = cluster.binaries
    kubectl = Kubectl(binaries.kubectl, cluster.kubeconfig)
    identity = await install_identity(binaries.helm, kubectl, cluster.work_dir / "kq")
    kq = await KubeQueue(identity, cluster.logs_dir, "kube-queue", "--log-level=info").start()
    await kubectl("create", "namespace", NAMESPACE)
    watch = AdmissionWatch(kubectl)
    await watch.start()
    gone = AdmissionWatch(kubectl, "pods")
    await gone.start()
    try:
        # 1. burst: every job fits at once.
        created: dict[str, float] = {}
        sem = asyncio.Semaphore(8)

        async def submit(name: str, manifest: dict[str, Any]) -> None:
            async with sem:
                created[name] = await _create(kubectl, manifest)

        names = [f"burst-{i}" for i in range(jobs)]
        await asyncio.gather(
            *(submit(n, job(n, gpus=1, cpu="100m", memory="128Mi")) for n in names)
        )
        await watch.wait_for(set(names), 120)
        burst = [max(0.0, watch.admitted[n] - created[n]) for n in names]

        # 2. backlog: the cluster is full of burst jobs; queue more 1-GPU jobs, then free one
        # GPU at a time (force-delete one running pod) and time the next admission.
        waiting = [f"wait-{i:03d}" for i in range(backlog)]
        for name in waiting:
            await _create(kubectl, job(name, gpus=1, cpu="100m", memory="128Mi"))
        await asyncio.sleep(3)
        assert not set(waiting) & watch.admitted.keys(), "the cluster should be full"
        freed: list[float] = []
        after_pod_gone: list[float] = []
        after_job_done: list[float] = []
        for victim, name in zip(names, waiting, strict=False):
            await kubectl(
                "delete",
                "pod",
                "-n",
                NAMESPACE,
                "-l",
                f"job-name={victim}",
                "--grace-period=0",
                "--force",
            )
            t0 = time.monotonic()
            await watch.wait_for({name}, 60)
            await gone.wait_for({victim}, 60)
            freed.append(watch.admitted[name] - t0)
            after_pod_gone.append(max(0.0, watch.admitted[name] - gone.admitted[victim]))
            await watch.wait_finished(victim, 60)
            after_job_done.append(max(0.0, watch.admitted[name] - watch.finished[victim]))
        print()
        print(f"nodes={nodes} x 8 GPUs, burst jobs={jobs}, backlog={backlog}")
        print(_summary("burst: create -> admitted", burst))
        if freed:
            print(_summary("backlog: delete call -> next admitted", freed))
            print(_summary("backlog: pod DELETED -> next admitted", after_pod_gone))
            print(_summary("backlog: job Failed -> next admitted", after_job_done))
        print(f"controller peak RSS: {_peak_rss_mib(kq.process.pid or 0):.1f} MiB")
    finally:
        watch.stop()
        gone.stop()
        await kq.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=25, help="8-GPU nodes; 8 burst jobs each")
    parser.add_argument("--backlog", type=int, default=40)
    args = parser.parse_args()
    binaries = ensure_binaries()
    with LocalCluster(binaries=binaries) as cluster:
        cluster.create_nodes(
            [NodeSpec(f"gpu-{i}", cpu="64", memory="512Gi", gpus=8) for i in range(args.nodes)]
        )
        asyncio.run(measure(cluster, args.nodes, args.backlog))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
