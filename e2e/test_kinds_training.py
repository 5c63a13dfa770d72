"""TFJob and PyTorchJob with the real Kubeflow training-operator: queued while the GPUs are taken
(the operator marks them Suspended and creates no pods), admitted when they free up (the operator
creates the replicas' pods, they get bound), demand per replica and per node, bad input."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from e2e.cluster.nodes import NodeSpec
from e2e.controller_fixtures import StartController
from e2e.jobs import get_job, is_suspended, job
from e2e.operators.manifests import (
    admission_probe,
    admitted_at,
    bound,
    first_event,
    get,
    pod_gpus,
    pods,
    pytorchjob,
    runpolicy_suspended,
    tfjob,
)
from e2e.operators.runner import Operators
from e2e.support import FakeNodes, Kubectl, wait_until

pytestmark = pytest.mark.e2e

JOB_NAME = "training.kubeflow.org/job-name"


def _condition(obj: dict[str, Any], kind: str) -> str | None:
    for c in obj.get("status", {}).get("conditions") or []:
        if c["type"] == kind:
            return str(c["status"])
    return None


async def _blocker_running(kubectl: Kubectl, namespace: str) -> bool:
    return not is_suspended(await get_job(kubectl, namespace, "blocker"))


async def test_tfjob_waits_while_full_and_the_operator_starts_it_only_after_admission(
    kubectl: Kubectl, namespace: str, fake_nodes: FakeNodes, kube_queue: StartController,
    operators: Operators,
) -> None:
    await operators.start("training")
    [node] = await fake_nodes.create(NodeSpec("gpu", cpu="32", memory="256Gi", gpus=4))
    await kube_queue("--kinds=job,tfjob")
    await kubectl.apply(job("blocker", gpus=4, run_for="20s"), "-n", namespace)
    await wait_until("blocker admitted", lambda: _blocker_running(kubectl, namespace))
    await kubectl.apply(tfjob("mnist", workers=2, worker_gpus=2, ps=1), "-n", namespace)

    queued = await wait_until("Queued event on the TFJob",
                              lambda: first_event(kubectl, namespace, "mnist", "Queued"))
    assert "nvidia.com/gpu" in queued["message"], queued

    async def operator_marked_suspended() -> bool:
        return _condition(await get(kubectl, "tfjob", namespace, "mnist"), "Suspended") == "True"

    # The training-operator reconciled it (kubectl describe shows Suspended) and made no pods.
    await wait_until("the operator sets the Suspended condition", operator_marked_suspended)
    assert not (await get_job(kubectl, namespace, "blocker")).get("status", {}).get("succeeded")
    assert await pods(kubectl, namespace, f"{JOB_NAME}=mnist") == []
    described = await kubectl("describe", "tfjob", "mnist", "-n", namespace)
    assert "Suspended" in described

    await wait_until("TFJob admitted after the blocker finished",
                     admission_probe(kubectl, "tfjob", namespace, "mnist", runpolicy_suspended),
                     90)
    assert admitted_at(await get(kubectl, "tfjob", namespace, "mnist"))

    async def replicas_bound() -> list[dict[str, Any]] | None:
        found = bound(await pods(kubectl, namespace, f"{JOB_NAME}=mnist"))
        return found if len(found) == 3 else None

    placed = await wait_until("PS + 2 GPU workers created and bound", replicas_bound, 60)
    assert {p["spec"]["nodeName"] for p in placed} == {node}
    assert sorted(pod_gpus(p) for p in placed) == [0, 2, 2]

    async def running() -> bool:
        return _condition(await get(kubectl, "tfjob", namespace, "mnist"), "Running") == "True"

    await wait_until("the operator reports the TFJob Running", running, 60)


async def test_tfjob_with_a_negative_gpu_request_gets_invalid_job_and_never_starts(
    kubectl: Kubectl, namespace: str, fake_nodes: FakeNodes, kube_queue: StartController,
    operators: Operators,
) -> None:
    await operators.start("training")
    await fake_nodes.create(NodeSpec("gpu", gpus=8))
    await kube_queue("--kinds=job,tfjob")
    # "-1" matches the CRD's quantity pattern, so the API server accepts the TFJob.
    await kubectl.apply(tfjob("typo", workers=1, worker_gpus="-1", ps=0), "-n", namespace)
    warning = await wait_until("InvalidJob warning",
                               lambda: first_event(kubectl, namespace, "typo", "InvalidJob"))
    assert warning["type"] == "Warning"
    assert "negative" in warning["message"] and "nvidia.com/gpu" in warning["message"], warning
    assert "tfReplicaSpecs.Worker" in warning["message"], warning
    await asyncio.sleep(3)
    found = await get(kubectl, "tfjob", namespace, "typo")
    assert runpolicy_suspended(found) and admitted_at(found) is None
    assert await pods(kubectl, namespace) == []
    # A valid job behind it is not blocked.
    await kubectl.apply(tfjob("fine", workers=1, worker_gpus=1, ps=0), "-n", namespace)

    await wait_until("the valid TFJob admitted",
                     admission_probe(kubectl, "tfjob", namespace, "fine", runpolicy_suspended))


async def test_pytorchjob_master_and_worker_must_each_fit_on_a_node(
    kubectl: Kubectl, namespace: str, fake_nodes: FakeNodes, kube_queue: StartController,
    operators: Operators,
) -> None:
    await operators.start("training")
    nodes = await fake_nodes.create(NodeSpec("a", gpus=4), NodeSpec("b", gpus=4))
    await kube_queue("--kinds=job,pytorchjob")
    # 2 GPUs taken on each node: 4 free in total, but no node has the 4 one replica needs.
    # (One blocker per node, pinned: a 2-pod blocker could have both pods packed on one node by
    # the scheduler, MostAllocated here, leaving the other node whole.)
    for i, node in enumerate(nodes):
        blocker = job(f"blocker-{i}", gpus=2, run_for="20s",
                      node_selector={"kubernetes.io/hostname": node})
        await kubectl.apply(blocker, "-n", namespace)

    async def blockers_bound() -> bool:
        counts = [len(bound(await pods(kubectl, namespace, f"job-name=blocker-{i}")))
                  for i in range(len(nodes))]
        return counts == [1] * len(nodes)

    await wait_until("blocker pods bound", blockers_bound)
    await kubectl.apply(pytorchjob("ddp", workers=1, gpus=4), "-n", namespace)
    queued = await wait_until("Queued", lambda: first_event(kubectl, namespace, "ddp", "Queued"))
    assert "4 nvidia.com/gpu" in queued["message"], queued
    assert await pods(kubectl, namespace, f"{JOB_NAME}=ddp") == []

    await wait_until("PyTorchJob admitted once the blockers are done",
                     admission_probe(kubectl, "pytorchjob", namespace, "ddp", runpolicy_suspended),
                     90)

    async def both_bound() -> list[dict[str, Any]] | None:
        found = bound(await pods(kubectl, namespace, f"{JOB_NAME}=ddp"))
        return found if len(found) == 2 else None

    placed = await wait_until("Master and Worker bound", both_bound, 60)
    assert sorted(p["spec"]["nodeName"] for p in placed) == sorted(nodes)
    roles = sorted(p["metadata"]["labels"].get("training.kubeflow.org/replica-type", "")
                   for p in placed)
    assert roles == ["master", "worker"], roles


async def test_elastic_pytorchjob_waits_for_room_for_every_worker_the_operator_starts(
    kubectl: Kubectl, namespace: str, fake_nodes: FakeNodes, kube_queue: StartController,
    operators: Operators,
) -> None:
    """training-operator starts Worker.replicas pods of an elastic job (minReplicas is only the
    autoscaler's floor), so admitting it for minReplicas would leave workers Pending."""
    await operators.start("training")
    [node] = await fake_nodes.create(NodeSpec("gpu", cpu="64", memory="512Gi", gpus=8))
    await kube_queue("--kinds=job,pytorchjob")
    await kubectl.apply(job("blocker", gpus=4, run_for="15s"), "-n", namespace)
    await wait_until("blocker admitted", lambda: _blocker_running(kubectl, namespace))
    elastic = pytorchjob("elastic", workers=4, gpus=2)
    elastic["spec"]["pytorchReplicaSpecs"].pop("Master")
    elastic["spec"]["elasticPolicy"] = {"minReplicas": 2, "maxReplicas": 4, "rdzvBackend": "c10d"}
    await kubectl.apply(elastic, "-n", namespace)
    # 4 GPUs free would hold minReplicas (2 x 2 GPUs) but not the 4 workers it starts.
    queued = await wait_until("Queued", lambda: first_event(kubectl, namespace, "elastic",
                                                             "Queued"))
    assert "nvidia.com/gpu" in queued["message"], queued
    assert await pods(kubectl, namespace, f"{JOB_NAME}=elastic") == []

    await wait_until("elastic PyTorchJob admitted once all 8 GPUs are free",
                     admission_probe(kubectl, "pytorchjob", namespace, "elastic",
                                     runpolicy_suspended), 90)

    async def workers_bound() -> list[dict[str, Any]] | None:
        found = await pods(kubectl, namespace, f"{JOB_NAME}=elastic")
        return found if len(found) == 4 and len(bound(found)) == 4 else None

    placed = await wait_until("all 4 workers the operator starts are bound", workers_bound, 60)
    assert {p["spec"]["nodeName"] for p in placed} == {node}
