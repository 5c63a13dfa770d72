"""Topology-aware admission on the real control plane: a gang asking for one rack lands in one
rack (pinned, so the scheduler binds it exactly there), although scattered free GPUs elsewhere
add up to more; checked against the API server's own view of the pods."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from e2e.cluster.nodes import NodeSpec
from e2e.controller_fixtures import StartController
from e2e.invariants import gpu_overcommit_watch
from e2e.jobs import events_for, get_job, is_suspended, job
from e2e.pinning import pinning
from e2e.support import ClusterHandle, FakeNodes, Kubectl, wait_until

pytestmark = pytest.mark.e2e

RACK = "example.com/rack"
GPU = "nvidia.com/gpu"


async def _filler(kubectl: Kubectl, namespace: str, node: str, gpus: int) -> None:
    """A pod nobody queued, bound straight to ``node``: a hole-maker."""
    resources = {"requests": {"cpu": "1", GPU: str(gpus)}, "limits": {GPU: str(gpus)}}
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"fill-{node}", "namespace": namespace,
                     "annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": "100000s"}},
        "spec": {"nodeName": node, "restartPolicy": "Never",
                 "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                                 "resources": resources}]},
    }
    await kubectl("create", "-f", "-", stdin=json.dumps(pod))


async def _pods(kubectl: Kubectl, namespace: str, prefix: str) -> list[dict[str, Any]]:
    found = (await kubectl.json("get", "pods", "-n", namespace))["items"]
    return [p for p in found if p["metadata"]["name"].startswith(prefix)]


async def _all_bound(kubectl: Kubectl, namespace: str, prefix: str, count: int) -> None:
    """Wait until the gang's ``count`` pods exist and are all bound to nodes."""

    async def bound() -> bool:
        pods = await _pods(kubectl, namespace, prefix)
        return len(pods) == count and all(p["spec"].get("nodeName") for p in pods)

    await wait_until(f"the {prefix.rstrip('-')} gang bound", bound, timeout_s=60)


async def test_a_gang_requiring_a_rack_lands_in_one_rack_not_in_scattered_room(
    kubectl: Kubectl, cluster: ClusterHandle, namespace: str, fake_nodes: FakeNodes,
    kube_queue: StartController,
) -> None:
    """Racks r0 and r1 of 3 x 8-GPU nodes. r0: two nodes with 5 GPUs used and one whole (19
    GPUs free); r1: one node with 4 used, two whole (20 free). A 2 x 8 gang needing one rack
    fits only in r1, on its two whole nodes; a 3 x 8 gang fits in neither (39 GPUs free in
    total, but never 24 in one rack) and waits, saying why."""
    async with pinning(kubectl, cluster, namespace, kube_queue) as kq:
        specs = [NodeSpec(f"{rack}-{i}", gpus=8, labels={RACK: rack})
                 for rack in ("r0", "r1") for i in range(3)]
        nodes = await fake_nodes.create(*specs)
        by_spec = dict(zip((s.name for s in specs), nodes, strict=True))
        for spec, used in (("r0-0", 5), ("r0-1", 5), ("r1-0", 4)):
            await _filler(kubectl, namespace, by_spec[spec], used)
        asks = {"kube-queue.io/topology-required": RACK}
        gang = job("gang", gpus=8, pods=2)
        gang["metadata"]["annotations"] = asks
        too_big = job("too-big", gpus=8, pods=3)
        too_big["metadata"]["annotations"] = asks
        async with gpu_overcommit_watch(kubectl, nodes, unschedulable_grace_s=3.0) as seen:
            await kubectl.apply(gang, "-n", namespace)
            await _all_bound(kubectl, namespace, "gang-", 2)
            await kubectl.apply(too_big, "-n", namespace)

            async def told() -> bool:
                return any(e["reason"] == "Queued" for e in
                           await events_for(kubectl, namespace, "too-big"))

            await wait_until("too-big told why it waits", told)
            await asyncio.sleep(1.0)
        assert not seen.violations, seen.violations
        pods = await _pods(kubectl, namespace, "gang-")
        assert {p["spec"]["nodeName"] for p in pods} == {by_spec["r1-1"], by_spec["r1-2"]}
        for pod in pods:
            assert pod["spec"]["nodeSelector"]["kubernetes.io/hostname"] == pod["spec"]["nodeName"]
        [admitted] = [e for e in await events_for(kubectl, namespace, "gang")
                      if e["reason"] == "Admitted"]
        assert f"in {RACK}=r1 on" in admitted["message"], admitted["message"]
        # The domain is recorded on the job by the admission write, and shown by
        # `kube-queue status --admitted` with the nodes the gang runs on.
        placed = (await get_job(kubectl, namespace, "gang"))["metadata"]["annotations"]
        assert placed["kube-queue.io/topology-domain"] == f"{RACK}=r1", placed
        [row] = [r for r in await kq.view("/debug/status?admitted=true") if r["name"] == "gang"]
        assert row["domain"] == f"{RACK}=r1"
        assert row["nodes"] == sorted([by_spec["r1-1"], by_spec["r1-2"]]), row
        assert is_suspended(await get_job(kubectl, namespace, "too-big"))
        [queued] = [e for e in await events_for(kubectl, namespace, "too-big")
                    if e["reason"] == "Queued"]
        assert f"in one {RACK}" in queued["message"], queued["message"]
        assert "the best domain" in queued["message"]


async def test_a_preferred_gang_no_rack_holds_spreads_over_the_fewest_racks(
    kubectl: Kubectl, cluster: ClusterHandle, namespace: str, fake_nodes: FakeNodes,
    kube_queue: StartController,
) -> None:
    """Racks pa (two whole 8-GPU nodes), pb and pc (one node each, 4 GPUs used). A gang of 5 x
    4 GPUs that prefers one rack fits in none: it goes over two racks (pa's 4 pods and one
    more), not three, as the plain fit would (the 4-GPU holes of pb and pc first)."""
    async with pinning(kubectl, cluster, namespace, kube_queue):
        specs = [NodeSpec("pa-0", gpus=8, labels={RACK: "pa"}),
                 NodeSpec("pa-1", gpus=8, labels={RACK: "pa"}),
                 NodeSpec("pb-0", gpus=8, labels={RACK: "pb"}),
                 NodeSpec("pc-0", gpus=8, labels={RACK: "pc"})]
        nodes = await fake_nodes.create(*specs)
        by_spec = dict(zip((s.name for s in specs), nodes, strict=True))
        rack_of = {by_spec[s.name]: s.labels[RACK] for s in specs}
        for spec in ("pb-0", "pc-0"):
            await _filler(kubectl, namespace, by_spec[spec], 4)
        spread = job("spread", gpus=4, pods=5)
        spread["metadata"]["annotations"] = {"kube-queue.io/topology-preferred": RACK}
        async with gpu_overcommit_watch(kubectl, nodes, unschedulable_grace_s=3.0) as seen:
            await kubectl.apply(spread, "-n", namespace)
            await _all_bound(kubectl, namespace, "spread-", 5)
        assert not seen.violations, seen.violations
        pods = await _pods(kubectl, namespace, "spread-")
        on = [p["spec"]["nodeName"] for p in pods]
        assert {rack_of[n] for n in on} in ({"pa", "pb"}, {"pa", "pc"}), on
        assert on.count(by_spec["pa-0"]) == 2 and on.count(by_spec["pa-1"]) == 2, on
        annotations = (await get_job(kubectl, namespace, "spread"))["metadata"]["annotations"]
        assert "kube-queue.io/topology-domain" not in annotations  # spread: no one domain
