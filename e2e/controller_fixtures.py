"""Fixtures that run the kube-queue controller (imported by conftest.py).

``kube_queue`` starts controllers for one test: each watches only the test's namespace (so jobs
left in namespaces of earlier tests, still being deleted, cannot interfere) and takes its own
Lease. On teardown they are stopped; if the test failed, their logs are attached to the report.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from e2e.cluster.build import ensure_binaries
from e2e.controller import ControllerIdentity, KubeQueue, install_identity
from e2e.support import ClusterHandle, Kubectl

StartController = Callable[..., Awaitable[KubeQueue]]


# Every job-kind toggle of the chart. The chart's ClusterRole is additive (each toggle adds the
# rules of its kind only), so one identity with all of them serves every test; which kinds a
# controller actually watches is still decided by its --kinds.
ALL_EXTENSIONS = ("argo", "mpi", "ray", "spark", "tf", "pytorch")


@pytest.fixture(scope="session")
async def controller_identity(cluster: ClusterHandle, kubectl: Kubectl) -> ControllerIdentity:
    """The Helm chart's ServiceAccount and RBAC with every job-kind extension enabled, applied
    once; a kubeconfig acting as it."""
    return await install_identity(
        ensure_binaries().helm,
        kubectl,
        cluster.logs_dir / "kube-queue",
        *(f"extension.{name}.enable=true" for name in ALL_EXTENSIONS),
    )


@pytest.fixture
async def kube_queue(
    controller_identity: ControllerIdentity,
    cluster: ClusterHandle,
    namespace: str,
) -> AsyncIterator[StartController]:
    """``await kube_queue()`` starts a controller for this test's namespace and waits until
    it is ready; extra CLI flags may be passed: ``await kube_queue("--strict-fifo")``.

    All controllers use the chart's Lease name (its RBAC allows only that one); tests run one at
    a time and every controller is stopped in an orderly way (releasing the Lease) at teardown.
    """
    started: list[KubeQueue] = []

    async def start(*extra: str, name: str | None = None) -> KubeQueue:
        label = name or f"kube-queue-{len(started)}"
        kq = KubeQueue(controller_identity, cluster.logs_dir / "kube-queue" / namespace, label,
                       f"--namespaces={namespace}", *extra)
        started.append(kq)
        return await kq.start()

    yield start
    for kq in started:
        await kq.stop()
        # Captured output: pytest shows it only when the test fails.
        print(f"\n----- {kq.name} log ({kq.process.log_path}) -----\n{kq.process.tail(200)}")
