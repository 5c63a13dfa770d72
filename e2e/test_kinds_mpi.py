"""MPIJob (v2beta1) with the real mpi-operator: while queued the operator prepares the job but
keeps its launcher Job suspended and creates no worker pods (and kube-queue leaves that child Job
alone); after admission the workers and the launcher run, each on a node that holds it."""

from __future__ import annotations

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
    mpijob,
    pod_gpus,
    pods,
    runpolicy_suspended,
)
from e2e.operators.runner import Operators
from e2e.support import FakeNodes, Kubectl, wait_until

pytestmark = pytest.mark.e2e

JOB_NAME = "training.kubeflow.org/job-name"


async def test_mpijob_waits_while_full_then_workers_and_launcher_run(
    kubectl: Kubectl, namespace: str, fake_nodes: FakeNodes, kube_queue: StartController,
    operators: Operators,
) -> None:
    await operators.start("mpi")
    nodes = await fake_nodes.create(NodeSpec("a", gpus=4), NodeSpec("b", gpus=4))
    await kube_queue("--kinds=job,mpijob")
    # 3 of each node's 4 GPUs taken: an MPIJob with two 2-GPU workers must wait.
    await kubectl.apply(job("blocker", gpus=3, pods=2, run_for="20s"), "-n", namespace)

    async def blocker_bound() -> bool:
        return len(bound(await pods(kubectl, namespace, "job-name=blocker"))) == 2

    await wait_until("blocker pods bound", blocker_bound, 60)
    await kubectl.apply(mpijob("pi", workers=2, worker_gpus=2), "-n", namespace)
    queued = await wait_until("Queued event", lambda: first_event(kubectl, namespace, "pi",
                                                                   "Queued"))
    assert "nvidia.com/gpu" in queued["message"], queued

    async def launcher_job() -> dict[str, Any]:
        return await get_job(kubectl, namespace, "pi-launcher")  # mpi-operator's naming

    # mpi-operator creates the launcher as a suspended batch Job owned by the MPIJob ...
    launcher = await wait_until("mpi-operator creates the (suspended) launcher Job",
                                launcher_job)
    assert launcher["spec"]["suspend"] is True
    owner = next(r for r in launcher["metadata"]["ownerReferences"] if r.get("controller"))
    assert owner["kind"] == "MPIJob"
    # ... which kube-queue must not admit on its own (it belongs to the MPIJob), while the
    # blocker still runs; and no worker pod exists.
    assert not (await get_job(kubectl, namespace, "blocker")).get("status", {}).get("succeeded")
    launcher = await get_job(kubectl, namespace, launcher["metadata"]["name"])
    assert is_suspended(launcher) and admitted_at(launcher) is None
    assert await pods(kubectl, namespace, f"{JOB_NAME}=pi") == []

    await wait_until("MPIJob admitted once the blocker is done",
                     admission_probe(kubectl, "mpijob", namespace, "pi", runpolicy_suspended), 90)

    async def all_bound() -> list[dict[str, Any]] | None:
        found = bound(await pods(kubectl, namespace, f"{JOB_NAME}=pi"))
        return found if len(found) == 3 else None

    placed = await wait_until("launcher + 2 workers bound", all_bound, 60)
    roles = sorted(p["metadata"]["labels"].get("training.kubeflow.org/job-role", "")
                   for p in placed)
    assert roles == ["launcher", "worker", "worker"], roles
    workers = [p for p in placed if pod_gpus(p) == 2]
    assert {p["spec"]["nodeName"] for p in workers} <= set(nodes)
    launcher = await get_job(kubectl, namespace, launcher["metadata"]["name"])
    assert not is_suspended(launcher), "the operator resumed its launcher Job"
    assert admitted_at(launcher) is None, "kube-queue never touched the child Job"
