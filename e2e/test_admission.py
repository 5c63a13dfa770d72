"""kube-queue against a real API server: what it does to batch/v1 Jobs, end to end."""

from __future__ import annotations

import asyncio

import pytest

from e2e.cluster.nodes import NodeSpec
from e2e.controller_fixtures import StartController
from e2e.jobs import (
    admitted_at,
    completed,
    events_for,
    get_job,
    is_suspended,
    job,
    pods_by_node,
    suspended_states,
)
from e2e.support import FakeNodes, Kubectl, wait_until

pytestmark = pytest.mark.e2e


async def test_three_two_gpu_jobs_on_four_gpus_admit_two_then_the_third(
    kubectl: Kubectl, namespace: str, fake_nodes: FakeNodes, kube_queue: StartController
) -> None:
    await fake_nodes.create(NodeSpec("gpu", cpu="16", memory="64Gi", gpus=4))
    await kube_queue()
    # train-a finishes after 8 s; train-b runs for ten minutes.
    await kubectl.apply(job("train-a", gpus=2, run_for="8s"), "-n", namespace)
    await kubectl.apply(job("train-b", gpus=2), "-n", namespace)
    await kubectl.apply(job("train-c", gpus=2), "-n", namespace)

    async def two_admitted() -> dict[str, bool] | None:
        states = await suspended_states(kubectl, namespace)
        return states if list(states.values()).count(False) == 2 else None

    states = await wait_until("two of three Jobs admitted", two_admitted)
    assert states == {"train-a": False, "train-b": False, "train-c": True}
    # kubectl shows the third as suspended, and it stays so while the GPUs are taken.
    table = await kubectl("get", "job", "train-c", "-n", namespace)
    assert "Suspended" in table, table
    await asyncio.sleep(3)
    assert is_suspended(await get_job(kubectl, namespace, "train-c"))
    queued = [e for e in await events_for(kubectl, namespace, "train-c") if e["reason"] == "Queued"]
    assert queued, "a Queued event on the waiting job"
    assert "needs 2 nvidia.com/gpu" in queued[0]["message"], queued

    async def a_done_c_admitted() -> bool:
        a = await get_job(kubectl, namespace, "train-a")
        c = await get_job(kubectl, namespace, "train-c")
        return completed(a) and not is_suspended(c)

    await wait_until("train-a completes, then train-c is admitted", a_done_c_admitted, 60)
    # Never more than the node's 4 GPUs in use: b and c run, a is done.
    assert len(await pods_by_node(kubectl, namespace)) == 2
    admitted = [e for e in await events_for(kubectl, namespace, "train-c")
                if e["reason"] == "Admitted"]
    assert admitted, "an Admitted event on the job"


async def test_fit_is_per_node_not_cluster_total(
    kubectl: Kubectl, namespace: str, fake_nodes: FakeNodes, kube_queue: StartController
) -> None:
    nodes = await fake_nodes.create(NodeSpec("a", gpus=2), NodeSpec("b", gpus=2))
    await kube_queue()
    await kubectl.apply(job("one-by-four", gpus=4), "-n", namespace)
    await kubectl.apply(job("two-by-two", gpus=2, pods=2), "-n", namespace)

    async def pair_running() -> dict[str, str] | None:
        placed = await pods_by_node(kubectl, namespace)
        return placed if len(placed) == 2 else None

    placed = await wait_until("the 2x2 job's pods bound", pair_running)
    assert sorted(placed.values()) == sorted(nodes), "one pod on each 2-GPU node"
    big = await get_job(kubectl, namespace, "one-by-four")
    assert is_suspended(big)
    assert admitted_at(big) is None

    async def never_fits_event() -> list[dict[str, str]] | None:
        events = await events_for(kubectl, namespace, "one-by-four")
        found = [e for e in events if e["reason"] == "NeverFits"]
        return found or None

    [warning] = await wait_until("a NeverFits warning on the 1x4 job", never_fits_event)
    assert warning["type"] == "Warning"
    assert "needs 4 nvidia.com/gpu on one node" in warning["message"]
    assert "most any eligible node has is 2" in warning["message"]


async def test_other_capacity_users_are_respected_and_never_touched(
    kubectl: Kubectl, namespace: str, fake_nodes: FakeNodes, kube_queue: StartController
) -> None:
    await fake_nodes.create(NodeSpec("gpu", gpus=4))
    # Someone else's running Job holds 3 GPUs before kube-queue starts.
    await kubectl.apply(job("theirs", gpus=3, suspend=False), "-n", namespace)
    await wait_until("their pod bound", lambda: _bound_count(kubectl, namespace, 1))
    before = await get_job(kubectl, namespace, "theirs")
    await kube_queue()
    await kubectl.apply(job("ours", gpus=2), "-n", namespace)
    await asyncio.sleep(4)
    assert is_suspended(await get_job(kubectl, namespace, "ours"))
    after = await get_job(kubectl, namespace, "theirs")
    assert admitted_at(after) is None
    assert after["spec"] == before["spec"]
    assert after["metadata"].get("annotations") == before["metadata"].get("annotations")

    await kubectl("delete", "job", "theirs", "-n", namespace, "--wait=false")

    async def ours_admitted() -> bool:
        return not is_suspended(await get_job(kubectl, namespace, "ours"))

    await wait_until("ours admitted once their GPUs are freed", ours_admitted, 60)


async def test_a_job_that_could_take_an_unbound_pods_node_waits_until_that_pod_is_bound(
    kubectl: Kubectl, namespace: str, fake_nodes: FakeNodes, kube_queue: StartController
) -> None:
    """The binding guard: 'big' (8 GPUs) can only go on the whole node; 'small' (1 GPU) is
    planned on the other node's last free GPU, but the scheduler could bind small's pod first,
    on the whole node (it fits there too), and big's pod would have no node. So small waits
    until big's pod is bound, and no pod is ever Pending for want of room. (Without the guard,
    the default, both are admitted in the same cycle and this test fails.)"""
    whole, tight = await fake_nodes.create(NodeSpec("whole", gpus=8), NodeSpec("tight", gpus=8))
    theirs = job("theirs", gpus=7, suspend=False, node_selector={"kubernetes.io/hostname": tight})
    await kubectl.apply(theirs, "-n", namespace)
    await wait_until("their pod bound", lambda: _bound_count(kubectl, namespace, 1))
    # Both queued before kube-queue starts, so its first cycle judges them together.
    await kubectl.apply(job("big", gpus=8), "-n", namespace)
    await kubectl.apply(job("small", gpus=1), "-n", namespace)
    await kube_queue("--binding-wait=10")

    async def both_bound() -> dict[str, str] | None:
        placed = await pods_by_node(kubectl, namespace)
        return placed if len(placed) == 3 else None

    placed = await wait_until("big's and small's pods bound", both_bound, 60)
    nodes = {name.rsplit("-", 1)[0]: node for name, node in placed.items()}
    assert nodes == {"theirs": tight, "big": whole, "small": tight}, placed
    waited = [
        e for e in await events_for(kubectl, namespace, "small")
        if e["reason"] == "Queued" and "not bound to nodes yet" in e["message"]
    ]
    assert waited, "small waited for big's pod to be bound"
    # The scheduler never found a pod here without room (it records each such attempt).
    failed = await kubectl.json(
        "get", "events", "-n", namespace, "--field-selector", "reason=FailedScheduling"
    )
    assert failed["items"] == [], [e["message"] for e in failed["items"]]


async def _bound_count(kubectl: Kubectl, namespace: str, count: int) -> bool:
    return len(await pods_by_node(kubectl, namespace)) >= count


async def test_sigkill_after_admission_never_double_admits_or_overcommits(
    kubectl: Kubectl, namespace: str, fake_nodes: FakeNodes, kube_queue: StartController
) -> None:
    await fake_nodes.create(NodeSpec("gpu", gpus=4))
    # A quota of zero pods: the Job controller cannot create first's pods, so after admission
    # only kube-queue's annotation says the 4 GPUs are taken - the hardest case for a restart.
    await kubectl.apply({"apiVersion": "v1", "kind": "ResourceQuota",
                         "metadata": {"name": "no-pods"}, "spec": {"hard": {"pods": "0"}}},
                        "-n", namespace)
    first = await kube_queue(name="before-crash")
    await kubectl.apply(job("first", gpus=4), "-n", namespace)

    async def first_admitted() -> str | None:
        return admitted_at(await get_job(kubectl, namespace, "first"))

    stamp = await wait_until("first admitted", first_admitted)
    first.kill()
    await kubectl.apply(job("second", gpus=4), "-n", namespace)
    await kubectl.apply(job("third", gpus=1), "-n", namespace)

    restarted = await kube_queue(name="after-crash")
    await wait_until("the restarted controller leads", restarted.is_leader, 30)
    await asyncio.sleep(4)
    states = await suspended_states(kubectl, namespace)
    assert states == {"first": False, "second": True, "third": True}
    assert admitted_at(await get_job(kubectl, namespace, "first")) == stamp, "admitted once"
    snapshot = await restarted.queue()
    assert snapshot["holding_capacity"] == 1, snapshot
    assert {j["name"] for j in snapshot["jobs"]} == {"second", "third"}

    # Once first is gone, its hold is released and the others fit.
    await kubectl("delete", "job", "first", "-n", namespace)

    async def second_admitted() -> bool:
        return not is_suspended(await get_job(kubectl, namespace, "second"))

    await wait_until("second admitted after first is deleted", second_admitted, 30)
    assert is_suspended(await get_job(kubectl, namespace, "third")), "4 GPUs: second takes all"


async def test_unknown_priority_class_warns_and_waits_until_it_exists(
    kubectl: Kubectl, namespace: str, fake_nodes: FakeNodes, kube_queue: StartController
) -> None:
    await fake_nodes.create(NodeSpec("gpu", gpus=4))
    kq = await kube_queue()
    pc = f"urgent-{namespace}"[:63]
    await kubectl.apply(job("typo", gpus=1, priority_class=pc), "-n", namespace)

    async def warned() -> list[dict[str, str]] | None:
        found = [e for e in await events_for(kubectl, namespace, "typo")
                 if e["reason"] == "UnknownPriorityClass"]
        return found or None

    [event] = await wait_until("UnknownPriorityClass warning", warned)
    assert event["type"] == "Warning"
    assert pc in event["message"]
    assert is_suspended(await get_job(kubectl, namespace, "typo"))
    assert kq.process.running()

    await kubectl.apply({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                         "metadata": {"name": pc}, "value": 1000})
    try:
        async def admitted() -> bool:
            return not is_suspended(await get_job(kubectl, namespace, "typo"))

        await wait_until("admitted once the PriorityClass exists", admitted)
    finally:
        await kubectl("delete", "priorityclass", pc, "--ignore-not-found")


async def test_priority_orders_admission(
    kubectl: Kubectl, namespace: str, fake_nodes: FakeNodes, kube_queue: StartController
) -> None:
    await fake_nodes.create(NodeSpec("gpu", gpus=2))
    pc = f"high-{namespace}"[:63]
    await kubectl.apply({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                         "metadata": {"name": pc}, "value": 100000})
    try:
        # Queue first, start the controller after: the order must come from priority alone.
        await kubectl.apply(job("early-low", gpus=2), "-n", namespace)
        await asyncio.sleep(1.1)
        await kubectl.apply(job("late-high", gpus=2, priority_class=pc), "-n", namespace)
        await kube_queue()

        async def one_admitted() -> dict[str, bool] | None:
            states = await suspended_states(kubectl, namespace)
            return states if False in states.values() else None

        states = await wait_until("one admitted", one_admitted)
        assert states == {"early-low": True, "late-high": False}
    finally:
        await kubectl("delete", "priorityclass", pc, "--ignore-not-found")


async def test_only_the_leader_admits_and_a_standby_takes_over(
    kubectl: Kubectl, namespace: str, fake_nodes: FakeNodes, kube_queue: StartController
) -> None:
    await fake_nodes.create(NodeSpec("gpu", gpus=8))
    a = await kube_queue(name="replica-a")
    await wait_until("replica-a leads", a.is_leader)
    b = await kube_queue(name="replica-b")
    await kubectl.apply(job("j1", gpus=1), "-n", namespace)
    await wait_until("j1 admitted", lambda: _admitted(kubectl, namespace, "j1"))
    assert not await b.is_leader()
    assert a.log_events("job.admitted")
    assert not b.log_events("job.admitted")

    await a.stop()  # orderly: releases the Lease, so b takes over at once
    await wait_until("replica-b leads", b.is_leader, 20)
    await kubectl.apply(job("j2", gpus=1), "-n", namespace)
    await wait_until("j2 admitted by b", lambda: _admitted(kubectl, namespace, "j2"))
    assert [e["job"] for e in b.log_events("job.admitted")] == [f"{namespace}/j2"]


async def _admitted(kubectl: Kubectl, namespace: str, name: str) -> bool:
    return not is_suspended(await get_job(kubectl, namespace, name))
