"""Kueue (the real v0.17 manager, e2e/kueue) runs beside kube-queue on the local cluster.

A smoke test of the runner the end-to-end benchmark uses, not of kube-queue: it proves that the
out-of-cluster Configuration, the certificates and the objects the helpers write are enough for
Kueue to admit batch Jobs by quota. Skipped unless ``E2E_KUEUE=1``: the first run builds Kueue
(5-10 minutes on two cores), which ``make test`` must never do.

Only the ``e2e`` marker: the project runs with ``--strict-markers`` and registers markers in
pyproject.toml, which this file must not need; the skip condition selects it instead.
"""

from __future__ import annotations

import asyncio
import os

import pytest

from e2e.cluster.nodes import NodeSpec
from e2e.jobs import job, suspended_states
from e2e.kueue.runner import QUEUE_NAME_LABEL, running_kueue
from e2e.support import ClusterHandle, FakeNodes, Kubectl, wait_until

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        os.environ.get("E2E_KUEUE") != "1",
        reason="Kueue runner test: set E2E_KUEUE=1 (its first run builds Kueue, 5-10 min)",
    ),
]

# After two Jobs are admitted, how long the third must stay suspended: Kueue's scheduler runs
# a cycle per queue event, so a wrong admission would show within a second or two.
STAYS_SUSPENDED_S = 10.0


async def test_kueue_admits_two_4_gpu_jobs_of_three_under_an_8_gpu_quota(
    cluster: ClusterHandle, kubectl: Kubectl, namespace: str, fake_nodes: FakeNodes
) -> None:
    await fake_nodes.create(NodeSpec("gpu", cpu="32", memory="256Gi", gpus=8))
    async with running_kueue(cluster, kubectl, qps=50, burst=100) as kueue:
        await kueue.cluster_queue("e2e-kueue-cq", {"cpu": 32, "memory": "256Gi",
                                                   "nvidia.com/gpu": 8})
        await kueue.local_queue(namespace, "team", "e2e-kueue-cq")
        labels = {QUEUE_NAME_LABEL: "team"}
        for name in ("train-a", "train-b", "train-c"):
            await kubectl.apply(job(name, gpus=4, labels=labels), "-n", namespace)

        async def two_admitted() -> dict[str, bool] | None:
            kueue.ensure_running()
            states = await suspended_states(kubectl, namespace)
            return states if list(states.values()).count(False) == 2 else None

        await wait_until("Kueue admits two of the three 4-GPU Jobs", two_admitted, 90)
        await asyncio.sleep(STAYS_SUSPENDED_S)
        states = await suspended_states(kubectl, namespace)
        assert len(states) == 3
        assert list(states.values()).count(False) == 2, states
        (waiting,) = [name for name, suspended in states.items() if suspended]

        workloads = await kubectl.json("get", "workloads.kueue.x-k8s.io", "-n", namespace)
        admitted = [
            w for w in workloads["items"]
            if any(c["type"] == "Admitted" and c["status"] == "True"
                   for c in (w.get("status") or {}).get("conditions") or [])
        ]
        assert len(admitted) == 2
        owners = {w["metadata"]["ownerReferences"][0]["name"] for w in admitted}
        assert waiting not in owners
        cq = await kubectl.json("get", "clusterqueues.kueue.x-k8s.io", "e2e-kueue-cq")
        assert cq["status"]["admittedWorkloads"] == 2
        assert cq["status"]["pendingWorkloads"] == 1
    # stop() removed what it made and released the /etc certificate directory.
    left = await kubectl("get", "clusterqueues.kueue.x-k8s.io", "--ignore-not-found",
                         "-o", "name") if await _crd_exists(kubectl) else ""
    assert "e2e-kueue-cq" not in left
    assert kueue.process.exit_code() is not None


async def _crd_exists(kubectl: Kubectl) -> bool:
    out = await kubectl("get", "crd", "clusterqueues.kueue.x-k8s.io", "--ignore-not-found",
                        "-o", "name")
    return bool(out.strip())
