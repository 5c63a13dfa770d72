"""Jobs, RayJobs (real KubeRay) and PyTorchJobs (real training-operator) competing for the same
GPU nodes: admitted in priority, then creation order, and never over-committed."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

import pytest

from e2e.cluster.nodes import NodeSpec
from e2e.controller_fixtures import StartController
from e2e.jobs import job
from e2e.operators.manifests import (
    GpuSampler,
    admission_probe,
    pytorchjob,
    rayjob,
    runpolicy_suspended,
    spec_suspended,
)
from e2e.operators.runner import Operators
from e2e.support import FakeNodes, Kubectl, wait_until

pytestmark = pytest.mark.e2e

RUN_FOR = "12s"
RAY_DEADLINE_S = 15  # KubeRay fails the RayJob (and deletes its cluster) after this


def _plan(high: str) -> list[tuple[str, str, dict[str, Any]]]:
    """(resource, name, manifest) in creation order. Every job needs 2 pods x 2 GPUs, so
    whenever any of them fits the head of the queue fits too: the admission order is exactly
    the queue order (priority, then creation time)."""
    def two_by_two_job(name: str, priority: str | None = None) -> dict[str, Any]:
        return job(name, gpus=2, pods=2, cpu="4", memory="16Gi", run_for=RUN_FOR,
                   priority_class=priority)

    return [
        ("job", "a-job", two_by_two_job("a-job")),
        ("rayjob", "b-ray", rayjob("b-ray", workers=2, worker_gpus=2,
                                   active_deadline_s=RAY_DEADLINE_S)),
        ("pytorchjob", "c-torch", pytorchjob("c-torch", workers=1, gpus=2, run_for=RUN_FOR)),
        ("job", "d-job-high", two_by_two_job("d-job-high", high)),
        ("pytorchjob", "e-torch-high", pytorchjob("e-torch-high", workers=1, gpus=2,
                                                  run_for=RUN_FOR, priority_class=high)),
        ("rayjob", "f-ray-high", rayjob("f-ray-high", workers=2, worker_gpus=2,
                                        priority_class=high, active_deadline_s=RAY_DEADLINE_S)),
        ("job", "g-job", two_by_two_job("g-job")),
    ]


WAVE_GAP_S = 1.0


def _epoch(timestamp: str) -> float:
    return datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


EXPECTED_ORDER = ["d-job-high", "e-torch-high", "f-ray-high", "a-job", "b-ray", "c-torch",
                  "g-job"]


async def test_jobs_rayjobs_and_pytorchjobs_share_gpu_nodes_in_queue_order_without_overcommit(
    kubectl: Kubectl, namespace: str, fake_nodes: FakeNodes, kube_queue: StartController,
    operators: Operators,
) -> None:
    await operators.start("ray")
    await operators.start("training")
    nodes = await fake_nodes.create(NodeSpec("gpu-a", gpus=4), NodeSpec("gpu-b", gpus=4))
    high = f"mixed-high-{namespace}"[:63]
    await kubectl.apply({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                         "metadata": {"name": high}, "value": 100000})
    sampler = GpuSampler(kubectl, frozenset(nodes))
    try:
        # All queued before the controller starts; creation timestamps have 1 s resolution.
        for _, _, manifest in _plan(high):
            await kubectl.apply(manifest, "-n", namespace)
            await asyncio.sleep(1.1)
        sampler.start()
        kq = await kube_queue("--kinds=job,rayjob,pytorchjob")

        probes = [
            admission_probe(kubectl, resource, namespace, name,
                            runpolicy_suspended if resource == "pytorchjob" else spec_suspended)
            for resource, name, _ in _plan(high)
        ]

        async def all_admitted() -> bool:
            return all([await probe() is not None for probe in probes])

        await wait_until("all seven jobs admitted", all_admitted, 300, interval_s=1)
        await sampler.sample()
    finally:
        await sampler.stop()
        await kubectl("delete", "priorityclass", high, "--ignore-not-found")

    # Jobs admitted in one admission cycle are patched concurrently, so their "admitted" lines
    # may come in any order; cycles are seconds apart here (each waits for GPUs to free up).
    admitted = sorted((_epoch(e["timestamp"]), e["job"].split("/", 1)[1])
                      for e in kq.log_events("job.admitted"))
    waves: list[list[str]] = []
    last = -1e9
    for at, name in admitted:
        if at - last > WAVE_GAP_S:
            waves.append([])
        waves[-1].append(name)
        last = at
    order = [name for wave in waves for name in sorted(wave, key=EXPECTED_ORDER.index)]
    assert order == EXPECTED_ORDER, waves
    assert sampler.samples > 20, sampler.samples
    assert not sampler.overcommits, sampler.overcommits
    # The nodes were really shared: at some moment a node ran jobs worth all of its 4 GPUs.
    assert set(sampler.peak) <= set(nodes), sampler.peak
    assert max(sampler.peak.values(), default=0) == 4, sampler.peak
