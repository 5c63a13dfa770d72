"""The local cluster is real: the scheduler binds by extended resources, KWOK runs pods to
completion, the Job controller finishes Jobs and leaves suspended Jobs alone."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from e2e.cluster.nodes import GPU_RESOURCE, NodeSpec
from e2e.support import FakeNodes, Kubectl, wait_until

pytestmark = pytest.mark.e2e

RUN_FOR = "3s"  # how long KWOK keeps the pod Running; long enough to observe that phase


def gpu_job(name: str, *, suspend: bool, gpus: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "suspend": suspend,
            "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": RUN_FOR}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {
                                "requests": {"cpu": "1", "memory": "1Gi", GPU_RESOURCE: str(gpus)},
                                "limits": {GPU_RESOURCE: str(gpus)},
                            },
                        }
                    ],
                },
            },
        },
    }


async def job_pods(kubectl: Kubectl, namespace: str, job: str) -> list[dict[str, Any]]:
    found = await kubectl.json("get", "pods", "-n", namespace, "-l", f"job-name={job}")
    pods: list[dict[str, Any]] = found["items"]
    return pods


def has_condition(obj: dict[str, Any], kind: str) -> bool:
    return any(
        c["type"] == kind and c["status"] == "True"
        for c in obj.get("status", {}).get("conditions", [])
    )


async def test_gpu_job_is_scheduled_run_and_completed(
    kubectl: Kubectl, namespace: str, fake_nodes: FakeNodes
) -> None:
    [node] = await fake_nodes.create(NodeSpec("gpu", cpu="8", memory="32Gi", gpus=4))
    allocatable = await kubectl(
        "get", "node", node, "-o", "jsonpath={.status.allocatable.nvidia\\.com/gpu}"
    )
    assert allocatable == "4"

    await kubectl.apply(gpu_job("train", suspend=False), "-n", namespace)

    async def running_pod() -> dict[str, Any] | None:
        pods = await job_pods(kubectl, namespace, "train")
        return pods[0] if pods and pods[0]["status"].get("phase") == "Running" else None

    pod = await wait_until("the Job's pod Running", running_pod)
    assert pod["spec"]["nodeName"] == node
    assert has_condition(pod, "PodScheduled")

    async def succeeded_pod() -> dict[str, Any] | None:
        pods = await job_pods(kubectl, namespace, "train")
        return pods[0] if pods and pods[0]["status"].get("phase") == "Succeeded" else None

    done = await wait_until("the pod Succeeded", succeeded_pod)
    assert done["metadata"]["name"] == pod["metadata"]["name"]  # the same pod, not a retry
    [container] = done["status"]["containerStatuses"]
    assert container["state"]["terminated"]["reason"] == "Completed"

    async def job_complete() -> dict[str, Any] | None:
        job: dict[str, Any] = await kubectl.json("get", "job", "train", "-n", namespace)
        return job if has_condition(job, "Complete") else None

    job = await wait_until("the Job Complete", job_complete)
    assert job["status"]["succeeded"] == 1
    assert "failed" not in job["status"]


async def test_suspended_job_stays_suspended_without_pods(
    kubectl: Kubectl, namespace: str, fake_nodes: FakeNodes
) -> None:
    # Capacity to spare, so nothing but the suspension keeps the pod from being created.
    await fake_nodes.create(NodeSpec("gpu", gpus=8))
    await kubectl.apply(gpu_job("held", suspend=True), "-n", namespace)

    async def suspended_condition() -> bool:
        job = await kubectl.json("get", "job", "held", "-n", namespace)
        return has_condition(job, "Suspended")

    await wait_until("the Job's Suspended condition", suspended_condition)
    for _ in range(5):
        assert await job_pods(kubectl, namespace, "held") == []
        await asyncio.sleep(1)

    job = await kubectl.json("get", "job", "held", "-n", namespace)
    assert job["spec"]["suspend"] is True
    assert job["status"].get("active", 0) == 0
    assert "startTime" not in job["status"]

    # kubectl 1.36 prints e.g.
    #   NAME   STATUS      COMPLETIONS   DURATION   AGE
    #   held   Suspended   0/1                      6s
    # DURATION stays blank: a Job that never started has no duration.
    header, row = (await kubectl("get", "job", "held", "-n", namespace)).splitlines()
    assert header.split() == ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"]
    name, status, completions, age = row.split()
    assert (name, status, completions) == ("held", "Suspended", "0/1")
    assert age.endswith("s")
    assert row[header.index("DURATION") : header.index("AGE")].strip() == ""
