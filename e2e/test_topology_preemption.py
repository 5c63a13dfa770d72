"""Preemption for a gang that requires one rack, on the real control plane: the victims free
room in ONE rack (docs/topology.md, "Preemption and node holds place the gang the same way"),
never the cheapest jobs scattered over racks, and the gang's pods bind in that rack.

Three racks of 2 x 8-GPU nodes; every node runs one low-priority 6-GPU job (2 GPUs free per
node: 12 free in all, none of it usable by an 8-GPU pod). A 2 x 8-GPU gang requiring one rack
needs both nodes of one rack emptied. The priorities are shaped so that a topology-blind
choice differs: the two cheapest jobs sit in racks r0 and r1 (emptying them frees two whole
nodes, enough for an unconstrained 2 x 8 gang, in two racks). Cheapest first *within one rack*
is r1 (its jobs cost 10 + 20; r0's 10 + 30, r2's 30 + 30): the victims must be exactly r1's two
jobs, and the four others must keep running, their pods untouched."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from e2e.cluster.nodes import NodeSpec
from e2e.controller_fixtures import StartController
from e2e.invariants import gpu_overcommit_watch
from e2e.jobs import events_for, is_suspended, job
from e2e.pinning import pinning
from e2e.support import ClusterHandle, FakeNodes, Kubectl, wait_until

pytestmark = pytest.mark.e2e

RACK = "example.com/rack"
GPU = "nvidia.com/gpu"
PREEMPTED_BY = "kube-queue.io/preempted-by"
JOB_NAME = "batch.kubernetes.io/job-name"
RACKS = ("r0", "r1", "r2")
# Priority of each node's low-priority job. The two cheapest (r0-0, r1-0) are what a
# topology-blind preemption would take; the cheapest pair inside one rack is r1's.
PRIORITY = {"r0-0": 10, "r1-0": 10, "r1-1": 20, "r0-1": 30, "r2-0": 30, "r2-1": 30}
HIGH = 100000


@pytest.fixture
async def priority_classes(kubectl: Kubectl, namespace: str) -> AsyncIterator[dict[int, str]]:
    """PriorityClass name per value (cluster-scoped: named after the test's namespace)."""
    names = {value: f"p{value}-{namespace}"[:63] for value in {*PRIORITY.values(), HIGH}}
    for value, name in names.items():
        await kubectl.apply(
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": name},
                "value": value,
            }
        )
    yield names
    for name in names.values():
        await kubectl("delete", "priorityclass", name, "--ignore-not-found")


async def _pods(kubectl: Kubectl, namespace: str) -> dict[str, list[dict[str, Any]]]:
    """Non-terminal pods of the namespace, by job name."""
    found = (await kubectl.json("get", "pods", "-n", namespace))["items"]
    out: dict[str, list[dict[str, Any]]] = {}
    for pod in found:
        if pod["status"].get("phase") in ("Succeeded", "Failed"):
            continue
        if pod["metadata"].get("deletionTimestamp"):
            continue
        owner = (pod["metadata"].get("labels") or {}).get(JOB_NAME, "")
        out.setdefault(owner, []).append(pod)
    return out


def _bound(pods: list[dict[str, Any]]) -> dict[str, str]:
    """Pod name -> node, bound pods only."""
    return {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods if p["spec"].get("nodeName")}


async def test_preemption_for_a_gang_requiring_a_rack_frees_one_rack_not_the_cheapest_jobs(
    kubectl: Kubectl,
    cluster: ClusterHandle,
    namespace: str,
    fake_nodes: FakeNodes,
    kube_queue: StartController,
    priority_classes: dict[int, str],
) -> None:
    async with pinning(kubectl, cluster, namespace, kube_queue, "--preemption=lower-priority"):
        specs = [
            NodeSpec(f"{rack}-{i}", gpus=8, labels={RACK: rack}) for rack in RACKS for i in range(2)
        ]
        nodes = await fake_nodes.create(*specs)
        node_of = dict(zip((s.name for s in specs), nodes, strict=True))
        rack_of = {node_of[s.name]: s.labels[RACK] for s in specs}
        low = {f"low-{spec}": spec for spec in PRIORITY}  # job name -> spec name of its node
        async with gpu_overcommit_watch(kubectl, nodes, unschedulable_grace_s=3.0) as seen:
            for name, spec in low.items():
                await kubectl.apply(
                    job(
                        name,
                        gpus=6,
                        priority_class=priority_classes[PRIORITY[spec]],
                        node_selector={"kubernetes.io/hostname": node_of[spec]},
                    ),
                    "-n",
                    namespace,
                )

            async def low_running() -> dict[str, dict[str, str]] | None:
                pods = await _pods(kubectl, namespace)
                placed = {name: _bound(pods.get(name, [])) for name in low}
                return placed if all(len(p) == 1 for p in placed.values()) else None

            before = await wait_until("every low-priority job runs", low_running, 60)
            for name, spec in low.items():
                assert list(before[name].values()) == [node_of[spec]], before

            gang = job("gang", gpus=8, pods=2, priority_class=priority_classes[HIGH])
            gang["metadata"]["annotations"] = {"kube-queue.io/topology-required": RACK}
            await kubectl.apply(gang, "-n", namespace)

            async def gang_bound() -> dict[str, str] | None:
                placed = _bound((await _pods(kubectl, namespace)).get("gang", []))
                return placed if len(placed) == 2 else None

            gang_nodes = await wait_until("the gang's two pods bound", gang_bound, 90)
            await asyncio.sleep(2.0)  # nothing more is preempted once it runs
        assert not seen.violations, seen.violations

        jobs = {
            j["metadata"]["name"]: j
            for j in (await kubectl.json("get", "jobs", "-n", namespace))["items"]
        }
        assert not is_suspended(jobs["gang"])
        victims = sorted(
            n for n, j in jobs.items() if (j["metadata"].get("annotations") or {}).get(PREEMPTED_BY)
        )
        victim_racks = {rack_of[node_of[low[v]]] for v in victims}
        # Topology-blind, the two cheapest would go: low-r0-0 and low-r1-0, in two racks.
        assert len(victim_racks) == 1, f"victims scattered over racks {victim_racks}: {victims}"
        assert victims == ["low-r1-0", "low-r1-1"], (
            f"exactly the two jobs of the cheapest rack (r1): {victims}"
        )
        for v in victims:
            annotations = jobs[v]["metadata"]["annotations"]
            assert annotations[PREEMPTED_BY] == f"Job/{namespace}/gang", annotations
            assert annotations["kube-queue.io/stopped"].startswith("Preempted "), annotations
            assert is_suspended(jobs[v]), f"{v} waits again (its node is the gang's now)"
            assert any(
                e["reason"] == "Preempted" for e in await events_for(kubectl, namespace, v)
            ), v
        # The gang is on the two nodes of r1, pinned there.
        assert sorted(gang_nodes.values()) == sorted([node_of["r1-0"], node_of["r1-1"]]), gang_nodes
        pods = await _pods(kubectl, namespace)
        for pod in pods["gang"]:
            assert pod["spec"]["nodeSelector"]["kubernetes.io/hostname"] == pod["spec"]["nodeName"]
        [admitted] = [
            e for e in await events_for(kubectl, namespace, "gang") if e["reason"] == "Admitted"
        ]
        assert f"in {RACK}=r1 on" in admitted["message"], admitted["message"]
        # Every other job kept running, never preempted: the same pod on the same node.
        for name in sorted(set(low) - set(victims)):
            assert not is_suspended(jobs[name]), name
            assert _bound(pods.get(name, [])) == before[name], (name, before[name], pods.get(name))
            assert not any(
                e["reason"] == "Preempted" for e in await events_for(kubectl, namespace, name)
            ), name
