"""An independent watcher for e2e tests: samples the API server's own view (never the
controller's state) and records every moment a node holds more GPUs than it has.

``async with gpu_overcommit_watch(kubectl, nodes) as seen:`` samples bound, non-terminal pods
every ``interval_s`` while the block runs; ``seen.violations`` lists what it found (a node over
its allocatable ``nvidia.com/gpu``, with the pods on it), ``seen.samples`` how often it looked.
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
    for node, gpus in used.items():
        seen.peak[node] = max(seen.peak.get(node, 0), gpus)
        if gpus > allocatable[node]:
            seen.violations.append(f"{node}: {gpus} > {allocatable[node]} GPUs ({who[node]})")
    seen.samples += 1


@contextlib.asynccontextmanager
async def gpu_overcommit_watch(
    kubectl: Kubectl, nodes: Sequence[str], interval_s: float = 0.5
) -> AsyncIterator[Watch]:
    seen = Watch()
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
