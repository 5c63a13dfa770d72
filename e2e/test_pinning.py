"""Pinning (capacity/pins.py): pods of admitted jobs are created gated by the webhook and bound
exactly where kube-queue's plan held room for them, checked against the API server's own view of
the pods (never the controller's state)."""

from __future__ import annotations

import asyncio
import datetime
import json
from typing import Any

import pytest

from e2e.cluster.nodes import NodeSpec
from e2e.controller import SYSTEM_NAMESPACE
from e2e.controller_fixtures import StartController
from e2e.invariants import gpu_overcommit_watch
from e2e.jobs import get_job, is_suspended, job
from e2e.pinning import pinning
from e2e.support import ClusterHandle, FakeNodes, Kubectl, wait_until

pytestmark = pytest.mark.e2e

GATE = "kube-queue.io/placement"
HOSTNAME = "kubernetes.io/hostname"


async def pods(kubectl: Kubectl, namespace: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = (await kubectl.json("get", "pods", "-n", namespace))["items"]
    return found


def gates(pod: dict[str, Any]) -> list[str]:
    return [g["name"] for g in pod["spec"].get("schedulingGates") or []]


def pinned_to(pod: dict[str, Any]) -> str | None:
    value = (pod["spec"].get("nodeSelector") or {}).get(HOSTNAME)
    return str(value) if value is not None else None


async def all_bound(kubectl: Kubectl, namespace: str, count: int) -> bool:
    found = await pods(kubectl, namespace)
    return len(found) == count and all(p["spec"].get("nodeName") for p in found)


async def test_pinned_pods_bind_where_planned_and_keep_a_node_whole(
    kubectl: Kubectl, cluster: ClusterHandle, namespace: str, fake_nodes: FakeNodes,
    kube_queue: StartController,
) -> None:
    """Two 8-GPU nodes; a 2 x 4-GPU job, then a 1 x 8-GPU job. kube-queue's plan packs the
    pair onto one node and gives the other to the big pod, and admits both at once. A default
    scheduler (LeastAllocated) would spread the pair and leave the big pod no node; the local
    cluster's scheduler packs GPUs as the plan does, so here what is checked is the mechanism:
    every pod binds exactly on the node its nodeSelector was given (with --no-pin-placement
    this fails: no pod has one), the pair shares one node, and no pod waits."""
    async with pinning(kubectl, cluster, namespace, kube_queue):
        nodes = await fake_nodes.create(NodeSpec("gpu-a", gpus=8), NodeSpec("gpu-b", gpus=8))
        async with gpu_overcommit_watch(kubectl, nodes, unschedulable_grace_s=3.0) as seen:
            await kubectl.apply(job("pair", gpus=4, pods=2), "-n", namespace)
            await kubectl.apply(job("whole", gpus=8), "-n", namespace)
            await wait_until(
                "all three pods bound", lambda: all_bound(kubectl, namespace, 3), timeout_s=60
            )
            await asyncio.sleep(1.0)
        assert not seen.violations, seen.violations
        found = await pods(kubectl, namespace)
        for pod in found:
            assert not gates(pod), f"{pod['metadata']['name']} still gated"
            assert pinned_to(pod) == pod["spec"]["nodeName"], "bound off its pin"
        pair_nodes = {
            p["spec"]["nodeName"] for p in found if p["metadata"]["name"].startswith("pair-")
        }
        [whole_node] = [
            p["spec"]["nodeName"] for p in found if p["metadata"]["name"].startswith("whole-")
        ]
        assert len(pair_nodes) == 1 and whole_node not in pair_nodes


async def test_a_pod_created_while_no_webhook_answers_runs_unpinned(
    kubectl: Kubectl, cluster: ClusterHandle, namespace: str, fake_nodes: FakeNodes,
    kube_queue: StartController,
) -> None:
    """failurePolicy Ignore: with the controller down, a pod is created as without pinning."""
    async with pinning(kubectl, cluster, namespace, kube_queue) as kq:
        await fake_nodes.create(NodeSpec("gpu", gpus=8))
        await kubectl.apply(job("queued", gpus=2), "-n", namespace)
        await wait_until("queued bound", lambda: all_bound(kubectl, namespace, 1))
        [pinned] = await pods(kubectl, namespace)
        assert pinned_to(pinned) == pinned["spec"]["nodeName"]
        kq.kill()
        # Not through kube-queue (a user's own, unsuspended Job): created while nobody answers.
        await kubectl.apply(job("bypass", gpus=2, suspend=False), "-n", namespace)
        await wait_until("bypass bound", lambda: all_bound(kubectl, namespace, 2))
        [bypass] = [p for p in await pods(kubectl, namespace)
                    if p["metadata"]["name"].startswith("bypass-")]
        assert not gates(bypass) and pinned_to(bypass) is None


async def test_pods_gated_while_no_one_leads_are_pinned_by_the_next_leader(
    kubectl: Kubectl, cluster: ClusterHandle, namespace: str, fake_nodes: FakeNodes,
    kube_queue: StartController,
) -> None:
    """The state a leader killed between gate and ungate leaves: an admitted job (its
    admitted-at written) whose pods the webhook gated, and no leader. A Lease held by a
    replica that is gone keeps this controller standing by (it serves the webhook, it does not
    pin); once the Lease is free it leads, re-derives the job's hold from the objects and pins
    the pods to it. No pod stays gated."""
    now = "2026-01-01T00:00:00.000000Z"
    lease = {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "kube-queue", "namespace": SYSTEM_NAMESPACE},
        "spec": {"holderIdentity": "a-replica-that-died", "leaseDurationSeconds": 3600,
                 "acquireTime": now, "renewTime": now},
    }
    await kubectl("delete", "lease", "kube-queue", "-n", SYSTEM_NAMESPACE, "--ignore-not-found")
    await kubectl("create", "-f", "-", stdin=json.dumps(lease))
    try:
        async with pinning(kubectl, cluster, namespace, kube_queue) as kq:
            assert not await kq.is_leader()
            nodes = await fake_nodes.create(NodeSpec("gpu-a", gpus=8), NodeSpec("gpu-b", gpus=8))
            admitted = job("admitted", gpus=4, pods=2, suspend=False)
            # Admitted just now (long ago, it would be requeued for not starting in time).
            stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            admitted["metadata"]["annotations"] = {"kube-queue.io/admitted-at": stamp}
            await kubectl.apply(admitted, "-n", namespace)

            async def gated() -> bool:
                found = await pods(kubectl, namespace)
                return len(found) == 2 and all(gates(p) == [GATE] for p in found)

            await wait_until("both pods created gated", gated)
            await asyncio.sleep(2.0)
            assert await gated(), "no leader: nobody ungates"
            await kubectl("delete", "lease", "kube-queue", "-n", SYSTEM_NAMESPACE)
            async with gpu_overcommit_watch(kubectl, nodes, unschedulable_grace_s=3.0) as seen:
                await wait_until("pinned and bound by the new leader",
                                 lambda: all_bound(kubectl, namespace, 2), timeout_s=60)
            assert not seen.violations, seen.violations
            for pod in await pods(kubectl, namespace):
                assert not gates(pod) and pinned_to(pod) == pod["spec"]["nodeName"]
            assert not is_suspended(await get_job(kubectl, namespace, "admitted"))
    finally:
        await kubectl("delete", "lease", "kube-queue", "-n", SYSTEM_NAMESPACE,
                      "--ignore-not-found")
