"""RayJob with the real KubeRay ray-operator: queued while the GPUs are taken (KubeRay creates
nothing), admitted when they free up (KubeRay creates the RayCluster, its pods get bound), demand
checked per node."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from e2e.cluster.nodes import NodeSpec
from e2e.controller_fixtures import StartController
from e2e.jobs import get_job, is_suspended, job
from e2e.operators.manifests import (
    admitted_at,
    bound,
    events,
    first_event,
    get,
    pod_gpus,
    pods,
    rayjob,
)
from e2e.operators.runner import Operators
from e2e.queues import Queues
from e2e.support import FakeNodes, Kubectl, wait_until

pytestmark = pytest.mark.e2e

KINDS = "--kinds=job,rayjob"
RAY_PODS = "ray.io/is-ray-node=yes"


async def _rayjob(kubectl: Kubectl, namespace: str, name: str) -> dict[str, Any]:
    return await get(kubectl, "rayjob", namespace, name)


async def _admitted(kubectl: Kubectl, namespace: str, name: str) -> bool:
    """Un-suspended by kube-queue. Not ``suspend is False``: KubeRay writes the whole RayJob
    back when it adds its finalizer, and a Go bool with omitempty drops ``suspend: false``, so
    an admitted RayJob may carry no ``suspend`` at all (seen once in make test)."""
    obj = await _rayjob(kubectl, namespace, name)
    return obj["spec"].get("suspend") is not True and admitted_at(obj) is not None


async def test_rayjob_waits_while_full_and_kuberay_starts_it_only_after_admission(
    kubectl: Kubectl, namespace: str, fake_nodes: FakeNodes, kube_queue: StartController,
    operators: Operators,
) -> None:
    await operators.start("ray")
    [node] = await fake_nodes.create(NodeSpec("gpu", cpu="32", memory="256Gi", gpus=4))
    await kube_queue(KINDS)
    await kubectl.apply(job("blocker", gpus=4, run_for="20s"), "-n", namespace)

    async def blocker_running() -> bool:
        return not is_suspended(await get_job(kubectl, namespace, "blocker"))

    await wait_until("blocker admitted", blocker_running)
    await kubectl.apply(rayjob("llm-train", workers=2, worker_gpus=2), "-n", namespace)

    queued = await wait_until(
        "a Queued event on the RayJob",
        lambda: first_event(kubectl, namespace, "llm-train", "Queued"),
    )
    assert "nvidia.com/gpu" in queued["message"], queued

    async def kuberay_suspended() -> bool:
        found = await _rayjob(kubectl, namespace, "llm-train")
        return found.get("status", {}).get("jobDeploymentStatus") == "Suspended"

    # KubeRay has seen the RayJob (its status says so) and, suspended, starts nothing.
    await wait_until("KubeRay reports the RayJob Suspended", kuberay_suspended)
    blocker = await get_job(kubectl, namespace, "blocker")
    assert not blocker.get("status", {}).get("succeeded"), "the check must run while it is full"
    assert (await kubectl.json("get", "rayclusters", "-n", namespace))["items"] == []
    assert await pods(kubectl, namespace, RAY_PODS) == []
    assert admitted_at(await _rayjob(kubectl, namespace, "llm-train")) is None

    # The blocker finishes after 20 s; then the RayJob is admitted and KubeRay creates it all.
    await wait_until("RayJob admitted", lambda: _admitted(kubectl, namespace, "llm-train"), 90)
    assert admitted_at(await _rayjob(kubectl, namespace, "llm-train"))

    async def ray_pods_bound() -> list[dict[str, Any]] | None:
        found = bound(await pods(kubectl, namespace, RAY_PODS))
        return found if len(found) == 3 else None

    placed = await wait_until("head + 2 GPU workers bound", ray_pods_bound, 90)
    assert {p["spec"]["nodeName"] for p in placed} == {node}
    assert sorted(pod_gpus(p) for p in placed) == [0, 2, 2]
    [admitted] = await events(kubectl, namespace, "llm-train", "Admitted")
    assert admitted["type"] == "Normal"

    async def submitter_created() -> bool:
        # Once the RayCluster is ready KubeRay runs `ray job submit` in a Job of the same name.
        found = await kubectl.json("get", "jobs", "-n", namespace, "-l",
                                   "ray.io/originated-from-crd=RayJob")
        return bool(found["items"])

    await wait_until("KubeRay's submitter Job created", submitter_created, 90)


async def test_rayjob_demand_is_placed_per_node_head_workers_and_submitter(
    kubectl: Kubectl, namespace: str, fake_nodes: FakeNodes, kube_queue: StartController,
    operators: Operators,
) -> None:
    await operators.start("ray")
    # 8 GPUs in total, but a 4-GPU worker fits only on the 6-GPU node: 2 workers cannot run.
    await fake_nodes.create(NodeSpec("big", gpus=6), NodeSpec("small", gpus=2))
    await kube_queue(KINDS)
    await kubectl.apply(rayjob("two-by-four", workers=2, worker_gpus=4), "-n", namespace)

    warning = await wait_until(
        "NeverFits warning", lambda: first_event(kubectl, namespace, "two-by-four", "NeverFits"))
    assert warning["type"] == "Warning"
    # Per node: 8 GPUs exist, but only one of the two 4-GPU workers can be placed.
    assert "gpu-workers" in warning["message"], warning
    assert "nvidia.com/gpu=4" in warning["message"] and "only 1" in warning["message"], warning
    await asyncio.sleep(3)
    rj = await _rayjob(kubectl, namespace, "two-by-four")
    assert rj["spec"]["suspend"] is True and admitted_at(rj) is None
    assert await pods(kubectl, namespace, RAY_PODS) == []

    # A second node that holds one 4-GPU worker makes it fit: admitted, pods land per node.
    [extra] = await fake_nodes.create(NodeSpec("extra", gpus=4))
    await wait_until("admitted once it fits", lambda: _admitted(kubectl, namespace,
                                                               "two-by-four"), 60)

    async def workers_bound() -> list[dict[str, Any]] | None:
        found = [p for p in bound(await pods(kubectl, namespace, RAY_PODS)) if pod_gpus(p)]
        return found if len(found) == 2 else None

    workers = await wait_until("both 4-GPU workers bound", workers_bound, 90)
    nodes = sorted(p["spec"]["nodeName"] for p in workers)
    assert extra in nodes and len(set(nodes)) == 2, nodes


async def test_capacity_held_for_a_rayjob_is_released_once_its_pods_run(
    kubectl: Kubectl, namespace: str, fake_nodes: FakeNodes, kube_queue: StartController,
    operators: Operators,
) -> None:
    """The reservation made at admission must shrink as KubeRay's pods bind; otherwise the
    RayJob counts twice (pods + hold) and blocks GPUs nobody uses."""
    await operators.start("ray")
    await fake_nodes.create(NodeSpec("gpu", gpus=8))
    kq = await kube_queue(KINDS)
    await kubectl.apply(rayjob("half", workers=2, worker_gpus=2), "-n", namespace)

    async def ray_pods_bound() -> bool:
        return len(bound(await pods(kubectl, namespace, RAY_PODS))) == 3

    await wait_until("RayJob admitted and its pods bound", ray_pods_bound, 90)
    # 4 of 8 GPUs are in use by the Ray workers; a 2-GPU Job fits beside them.
    await kubectl.apply(job("fits-beside", gpus=2), "-n", namespace)

    async def admitted(name: str) -> bool:
        return not is_suspended(await get_job(kubectl, namespace, name))

    try:
        await wait_until("the 2-GPU Job admitted beside the running RayJob",
                         lambda: admitted("fits-beside"), 30)
    except TimeoutError:
        snapshot = await kq.queue()
        pytest.fail(f"the Job waits although 4 GPUs are free; queue: {snapshot}")
    # Restart: the new controller lists Pods before RayJobs, so the Ray pods arrive before the
    # RayJob's alias (status.rayClusterName) is known. Regression: it then held every Ray pod a
    # second time and the next 2 GPUs looked taken.
    kq.kill()
    after = await kube_queue(KINDS, name="after-restart")
    await kubectl.apply(job("after-restart", gpus=2), "-n", namespace)
    await kubectl.apply(job("no-room", gpus=1), "-n", namespace)
    try:
        await wait_until("the last 2 free GPUs admitted after the restart",
                         lambda: admitted("after-restart"), 30)
    except TimeoutError:
        snapshot = await after.queue()
        pytest.fail(f"the RayJob holds its running pods twice after a restart: {snapshot}")
    await asyncio.sleep(3)
    assert is_suspended(await get_job(kubectl, namespace, "no-room")), "8 of 8 GPUs are in use"
    assert after.log_events("reservation.overcommitted") == []


async def test_a_rayjob_and_a_batch_job_share_their_queue_s_quota(
    kubectl: Kubectl, namespace: str, fake_nodes: FakeNodes, kube_queue: StartController,
    operators: Operators, queues: Queues,
) -> None:
    """Quota counts every kind's demand with the same arithmetic: a RayJob's head, workers and
    submitter, and a batch Job's pods, in one queue."""
    await operators.start("ray")
    await fake_nodes.create(NodeSpec("gpu", gpus=16))
    await queues.create("shared", quota={"max": {"nvidia.com/gpu": 6}})
    await kube_queue(KINDS)
    ray = rayjob("ray-4", workers=2, worker_gpus=2)
    ray["metadata"]["labels"] = queues.label("shared")
    await kubectl.apply(ray, "-n", namespace)
    await wait_until("RayJob admitted", lambda: _admitted(kubectl, namespace, "ray-4"), 60)
    await kubectl.apply(job("job-4", gpus=4, labels=queues.label("shared")), "-n", namespace)

    async def quota_event() -> dict[str, Any] | None:
        found = [e for e in await events(kubectl, namespace, "job-4", "Queued")
                 if "waiting for quota" in e["message"]]
        return found[0] if found else None

    event = await wait_until("the Job waits for the queue's quota", quota_event)
    assert f"queue {queues.name('shared')} is at its max nvidia.com/gpu" in event["message"]
    assert is_suspended(await get_job(kubectl, namespace, "job-4")), "12 GPUs are free"
    await kubectl("delete", "rayjob", "ray-4", "-n", namespace, "--wait=false")

    async def job_admitted() -> bool:
        return not is_suspended(await get_job(kubectl, namespace, "job-4"))

    await wait_until("the Job admitted once the RayJob is gone", job_admitted, 60)


async def test_a_preempted_rayjob_stops_and_kuberay_starts_it_again_after_readmission(
    kubectl: Kubectl, namespace: str, fake_nodes: FakeNodes, kube_queue: StartController,
    operators: Operators,
) -> None:
    await operators.start("ray")
    await fake_nodes.create(NodeSpec("gpu", gpus=8))
    high = f"high-{namespace}"[:63]
    await kubectl.apply({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                         "metadata": {"name": high}, "value": 100000})
    try:
        await kube_queue(KINDS, "--preemption=lower-priority")
        await kubectl.apply(rayjob("low-ray", workers=2, worker_gpus=4), "-n", namespace)

        async def ray_pods(count: int) -> bool:
            return len(bound(await pods(kubectl, namespace, RAY_PODS))) == count

        await wait_until("the RayJob's head and workers run", lambda: ray_pods(3), 90)
        await kubectl.apply(job("urgent", gpus=8, run_for="15s", priority_class=high),
                            "-n", namespace)

        async def preempted() -> dict[str, Any] | None:
            found = await _rayjob(kubectl, namespace, "low-ray")
            marked = (found["metadata"].get("annotations") or {}).get(
                "kube-queue.io/preempted-by")
            return found if marked and found["spec"].get("suspend") is True else None

        found = await wait_until("the RayJob suspended by kube-queue", preempted, 60)
        assert found["metadata"]["annotations"]["kube-queue.io/preempted-by"] == (
            f"Job/{namespace}/urgent")
        await wait_until("KubeRay removes the Ray pods", lambda: ray_pods(0), 90)
        await wait_until("urgent admitted", lambda: _job_admitted(kubectl, namespace, "urgent"),
                         60)
        # urgent runs 15 s; then the RayJob is admitted again and KubeRay starts it again.
        await wait_until("the RayJob admitted again",
                         lambda: _admitted(kubectl, namespace, "low-ray"), 90)
        await wait_until("KubeRay runs the RayJob's pods again", lambda: ray_pods(3), 120)
    finally:
        await kubectl("delete", "priorityclass", high, "--ignore-not-found")


async def _job_admitted(kubectl: Kubectl, namespace: str, name: str) -> bool:
    return not is_suspended(await get_job(kubectl, namespace, name))
