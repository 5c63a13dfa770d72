"""Admitted jobs whose pods never start, against the real scheduler: a pod affinity kube-queue
does not model keeps the pod Unschedulable, so the job is suspended again after the pods-ready
timeout, its GPUs go to the next job, it is requeued with a backoff, and after the limit it
stays suspended with GaveUp."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

import pytest

from e2e.cluster.nodes import NodeSpec
from e2e.controller_fixtures import StartController
from e2e.jobs import events_for, get_job, is_suspended, job, pods_by_node
from e2e.support import FakeNodes, Kubectl, wait_until

pytestmark = pytest.mark.e2e


def never_schedulable(name: str, gpus: int) -> dict[str, Any]:
    manifest = job(name, gpus=gpus)
    manifest["spec"]["template"]["spec"]["affinity"] = {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [{
                "labelSelector": {"matchLabels": {"app": "does-not-exist"}},
                "topologyKey": "kubernetes.io/hostname",
            }]
        }
    }
    return manifest


async def first_event(
    kubectl: Kubectl, namespace: str, name: str, reason: str
) -> dict[str, str] | None:
    """The job's first Event with this reason, if there is one yet."""
    found = [e for e in await events_for(kubectl, namespace, name) if e["reason"] == reason]
    return found[0] if found else None


def _seconds(stamp: str) -> float:
    return datetime.datetime.fromisoformat(stamp).timestamp()


async def admitted(kubectl: Kubectl, namespace: str, name: str) -> bool:
    return not is_suspended(await get_job(kubectl, namespace, name))


async def test_a_job_whose_pods_never_start_is_requeued_with_backoff_then_given_up(
    kubectl: Kubectl, namespace: str, fake_nodes: FakeNodes, kube_queue: StartController,
) -> None:
    await fake_nodes.create(NodeSpec("gpu", gpus=8))
    # The backoff (10 s) outlasts the next job (3 s): stuck's second admission waits for the
    # backoff, not for room.
    await kube_queue("--pods-ready-timeout=4", "--requeue-backoff=10", "--requeue-limit=2")
    await kubectl.apply(never_schedulable("stuck", gpus=4), "-n", namespace)

    await wait_until("stuck admitted", lambda: admitted(kubectl, namespace, "stuck"))
    await kubectl.apply(job("next", gpus=8, run_for="3s"), "-n", namespace)

    event = await wait_until(
        "a Requeued event", lambda: first_event(kubectl, namespace, "stuck", "Requeued"), 30
    )
    assert event["type"] == "Warning"
    assert "Unschedulable" in event["message"] and "attempt 1 of 2" in event["message"], event
    stuck = await get_job(kubectl, namespace, "stuck")
    assert is_suspended(stuck)
    assert stuck["metadata"]["annotations"]["kube-queue.io/requeues"] == "1"
    assert stuck["metadata"]["annotations"]["kube-queue.io/stopped"].startswith("Requeued ")
    requeued_at = _seconds(stuck["metadata"]["annotations"]["kube-queue.io/requeued-at"])
    # Its GPUs went to the next job; after that one finishes, stuck gets its second chance,
    # fails again, and kube-queue gives up.
    await wait_until(
        "next admitted once stuck is requeued", lambda: admitted(kubectl, namespace, "next"), 30
    )

    warning = await wait_until(
        "a GaveUp warning after the second failure",
        lambda: first_event(kubectl, namespace, "stuck", "GaveUp"),
        60,
    )
    assert "Edit the job's spec (or re-create it)" in warning["message"], warning
    stuck = await get_job(kubectl, namespace, "stuck")
    assert is_suspended(stuck)
    assert stuck["metadata"]["annotations"]["kube-queue.io/requeues"] == "2"
    assert stuck["metadata"]["annotations"].get("kube-queue.io/gave-up")
    # Admitted twice (one Event, counted twice): the second time no sooner than the backoff.
    admissions = [e for e in await events_for(kubectl, namespace, "stuck")
                  if e["reason"] == "Admitted"]
    assert sum(e.get("count") or 1 for e in admissions) == 2, admissions
    again = max(_seconds(e["lastTimestamp"]) for e in admissions)
    assert again - requeued_at >= 9, f"re-admitted {again - requeued_at:.0f}s after requeue"


async def test_a_job_whose_planned_room_is_taken_is_requeued_at_once_and_starts_when_it_fits(
    kubectl: Kubectl, namespace: str, fake_nodes: FakeNodes, kube_queue: StartController,
) -> None:
    """The scheduler, not kube-queue, binds pods: another pod can take the room planned for an
    admitted job's pod before that pod exists. kube-queue then counts the room as owed, and
    once the scheduler says the pod is Unschedulable (and --unplaceable-timeout has passed)
    the job is suspended again at once: no attempt counted, no backoff. It starts again when
    all of it fits."""
    [whole] = await fake_nodes.create(NodeSpec("whole", gpus=8))
    # Pods cannot be created in the namespace yet, so big's pod does not exist when the
    # intruder (a pod no queue manages, bound to the node directly) takes one of its GPUs.
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "no-pods"},
             "spec": {"hard": {"pods": "0"}}}
    await kubectl.apply(quota, "-n", namespace)
    other = f"{namespace}-other"[:63]
    await kubectl("create", "namespace", other)
    try:
        await kube_queue("--unplaceable-timeout=2")
        await kubectl.apply(job("big", gpus=8, run_for="5s"), "-n", namespace)

        await wait_until("big admitted", lambda: admitted(kubectl, namespace, "big"))
        intruder = {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "intruder"},
            "spec": {"nodeName": whole, "containers": [{
                "name": "main", "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"nvidia.com/gpu": "1"},
                              "limits": {"nvidia.com/gpu": "1"}}}]},
        }
        await kubectl.apply(intruder, "-n", other)
        await kubectl("delete", "resourcequota", "no-pods", "-n", namespace)

        event = await wait_until(
            "big requeued for want of room",
            lambda: first_event(kubectl, namespace, "big", "Requeued"),
            60,
        )
        assert event["type"] == "Warning"
        assert "no node with room" in event["message"], event
        assert "Unschedulable" in event["message"], event
        big = await get_job(kubectl, namespace, "big")
        assert is_suspended(big)
        annotations = big["metadata"].get("annotations") or {}
        assert "kube-queue.io/requeues" not in annotations, "no attempt counted"
        assert "kube-queue.io/admitted-at" not in annotations
        assert annotations["kube-queue.io/stopped"].startswith("Unplaceable ")
        # While the intruder holds a GPU, 8 do not fit: big waits in its queue...
        await asyncio.sleep(3)
        assert is_suspended(await get_job(kubectl, namespace, "big"))
        # ...and starts as soon as they do, without a backoff.
        await kubectl("delete", "pod", "intruder", "-n", other, "--wait=false")
        await wait_until("big admitted again", lambda: admitted(kubectl, namespace, "big"), 30)

        async def bound() -> bool:
            return whole in (await pods_by_node(kubectl, namespace)).values()

        await wait_until("big's pod bound on the whole node", bound, 30)
    finally:
        await kubectl("delete", "namespace", other, "--wait=false")
