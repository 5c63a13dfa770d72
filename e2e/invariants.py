"""An independent watcher for e2e tests: samples the API server's own view (never the
controller's state) and records every moment a node holds more GPUs than it has, and every pod
that stays unschedulable.

``async with gpu_overcommit_watch(kubectl, nodes) as seen:`` samples non-terminal pods every
``interval_s`` while the block runs; ``seen.violations`` lists what it found, ``seen.samples``
how often it looked:

- a node over its allocatable ``nvidia.com/gpu`` (with the pods on it). kube-scheduler never
  binds past allocatable, so this alone would pass whatever kube-queue admits; hence also
- a pod that stays ``PodScheduled=False/Unschedulable`` longer than ``unschedulable_grace_s``:
  what an admission no node can hold looks like (the pod waits for room that is not there).
  Tests that create pods meant never to be scheduled do not use this watcher.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

from e2e.cluster.nodes import GPU_RESOURCE
from e2e.support import Kubectl, KubectlError


@dataclass
class Watch:
    samples: int = 0
    violations: list[str] = field(default_factory=list)
    peak: dict[str, int] = field(default_factory=dict)
    unschedulable_since: dict[str, float] = field(default_factory=dict)
    grace_s: float = 10.0


async def _sample(kubectl: Kubectl, nodes: Sequence[str], seen: Watch) -> None:
    pods = (await kubectl.json("get", "pods", "-A", "--field-selector",
                               "status.phase!=Succeeded,status.phase!=Failed"))["items"]
    allocatable = {
        n["metadata"]["name"]: int(n["status"]["allocatable"].get(GPU_RESOURCE, "0"))
        for n in (await kubectl.json("get", "nodes"))["items"]
        if n["metadata"]["name"] in nodes
    }
    used: dict[str, int] = {}
    who: dict[str, list[str]] = {}
    for pod in pods:
        node = pod["spec"].get("nodeName")
        if node not in allocatable:
            continue
        gpus = sum(int(c.get("resources", {}).get("requests", {}).get(GPU_RESOURCE, "0"))
                   for c in pod["spec"]["containers"])
        used[node] = used.get(node, 0) + gpus
        who.setdefault(node, []).append(f"{pod['metadata']['namespace']}/"
                                        f"{pod['metadata']['name']}={gpus}")
    now = asyncio.get_running_loop().time()
    stuck = {}
    for pod in pods:
        name = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        if not pod["spec"].get("nodeName") and any(
            c.get("type") == "PodScheduled" and c.get("status") == "False"
            and c.get("reason") == "Unschedulable"
            for c in (pod.get("status") or {}).get("conditions") or []
        ):
            stuck[name] = since = seen.unschedulable_since.get(name, now)
            if now - since > seen.grace_s:
                text = f"pod {name} unschedulable for more than {seen.grace_s:g}s"
                if text not in seen.violations:
                    seen.violations.append(text)
    seen.unschedulable_since = stuck
    for node, gpus in used.items():
        seen.peak[node] = max(seen.peak.get(node, 0), gpus)
        if gpus > allocatable[node]:
            seen.violations.append(f"{node}: {gpus} > {allocatable[node]} GPUs ({who[node]})")
    seen.samples += 1


@contextlib.asynccontextmanager
async def gpu_overcommit_watch(
    kubectl: Kubectl, nodes: Sequence[str], interval_s: float = 0.5,
    unschedulable_grace_s: float = 10.0,
) -> AsyncIterator[Watch]:
    seen = Watch(grace_s=unschedulable_grace_s)
    stopping: list[bool] = []  # a flag as well as the cancel: see GpuSampler.stop

    async def run() -> None:
        while not stopping:
            with contextlib.suppress(KubectlError):
                await _sample(kubectl, nodes, seen)
            await asyncio.sleep(interval_s)

    task = asyncio.create_task(run())
    try:
        yield seen
    finally:
        stopping.append(True)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
