"""The capacity kube-queue holds for an admitted job is released as the real operator's pods
bind: kube-queue must recognise each operator's pods as the job's (labels, owners), or the job
counts twice (bound pods + hold) and blocks GPUs nobody uses. (RayJob: test_kinds_ray.py.)"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from e2e.cluster.nodes import NodeSpec
from e2e.controller_fixtures import StartController
from e2e.jobs import get_job, is_suspended, job
from e2e.operators.manifests import bound, mpijob, pod_gpus, pods, pytorchjob, tfjob, workflow
from e2e.operators.runner import Operators
from e2e.support import FakeNodes, Kubectl, wait_until

pytestmark = pytest.mark.e2e


@dataclass(frozen=True)
class Case:
    kind: str  # --kinds name
    operator: str
    manifest: Callable[[], dict[str, Any]]
    selector: str  # the job's pods
    pods: int


CASES = [
    Case("tfjob", "training", lambda: tfjob("job4", workers=2, worker_gpus=2, ps=1),
         "training.kubeflow.org/job-name=job4", 3),
    Case("pytorchjob", "training", lambda: pytorchjob("job4", workers=1, gpus=2),
         "training.kubeflow.org/job-name=job4", 2),
    Case("mpijob", "mpi", lambda: mpijob("job4", workers=2, worker_gpus=2),
         "training.kubeflow.org/job-name=job4", 3),
    Case("workflow", "argo",
         lambda: workflow("job4", gpus=4, min_resources="cpu: 4\nmemory: 16Gi\nnvidia.com/gpu: 4"),
         "workflows.argoproj.io/workflow=job4", 1),
]


@pytest.mark.parametrize("case", CASES, ids=[c.kind for c in CASES])
async def test_hold_is_released_once_the_operators_pods_are_bound(
    case: Case, kubectl: Kubectl, namespace: str, fake_nodes: FakeNodes,
    kube_queue: StartController, operators: Operators,
) -> None:
    await operators.start(case.operator)
    await fake_nodes.create(NodeSpec("gpu", cpu="64", memory="512Gi", gpus=8))
    kq = await kube_queue(f"--kinds=job,{case.kind}")
    await kubectl.apply(case.manifest(), "-n", namespace)

    async def all_bound() -> list[dict[str, Any]] | None:
        found = bound(await pods(kubectl, namespace, case.selector))
        return found if len(found) == case.pods else None

    placed = await wait_until(f"the {case.kind}'s {case.pods} pods bound", all_bound, 90)
    assert sum(pod_gpus(p) for p in placed) == 4
    # Its 4 GPUs are in use by its pods; the other 4 are free for a 4-GPU Job.
    await kubectl.apply(job("beside", gpus=4), "-n", namespace)

    async def beside_admitted() -> bool:
        return not is_suspended(await get_job(kubectl, namespace, "beside"))

    try:
        await wait_until("a 4-GPU Job admitted beside it", beside_admitted, 30)
    except TimeoutError:
        pytest.fail(f"the Job waits although 4 GPUs are free: {await kq.queue()}")
