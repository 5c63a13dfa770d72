"""Fixtures for tests against a real Kubernetes control plane.

Which cluster (decided once per session):

* default: a LocalCluster (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, KWOK;
  see e2e/cluster and docs/local-cluster.md), started for the session and stopped after it.
  Binaries are built on first use (minutes on a small machine) and cached.
* ``E2E_KUBECONFIG=<file>`` (alias ``KUBECONFIG_E2E``): an existing cluster, current context of
  that file, e.g. one started with ``python -m e2e.cluster up`` (which runs KWOK already).
* ``E2E_CLUSTER=kind``: the current context of ``$KUBECONFIG`` / ``~/.kube/config``, which must be
  a ``kind-*`` context (a guard against running tests on a real cluster). Make one with
  ``kind create cluster`` (a single control-plane node is best: its NoSchedule taint keeps it
  out of the tests' capacity).

Fake nodes need a KWOK controller with e2e/cluster/stages. A LocalCluster and a cluster from
``up`` run one; for kind the session starts ours against it (KWOK is just an API client). Override
with ``E2E_START_KWOK=1|0``; two KWOK controllers on one cluster would fight over the same nodes.

Tests must not run in parallel against one cluster (no pytest-xdist): ``fake_nodes`` relies on
being the only test touching fake nodes.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Generator, Iterator
from pathlib import Path

import pytest

from e2e.cluster.build import ensure_binaries
from e2e.cluster.ports import PortReservation
from e2e.cluster.processes import Process
from e2e.cluster.runner import RUNS_DIR, LocalCluster, claim_work_dir, start_kwok
from e2e.support import ClusterHandle, FakeNodes, Kubectl, KubectlError, new_test_id, wait_until
from kubequeue.kube.client import KubeClient, connect

CLUSTER_KEY = pytest.StashKey[ClusterHandle]()


def _existing_cluster() -> tuple[Path, str | None, bool] | None:
    """(kubeconfig, context, start KWOK?) of an existing cluster named by the environment, or
    None for a LocalCluster."""
    start_kwok = os.environ.get("E2E_START_KWOK")
    explicit = os.environ.get("E2E_KUBECONFIG") or os.environ.get("KUBECONFIG_E2E")
    if explicit:
        return Path(explicit), None, start_kwok == "1"
    if os.environ.get("E2E_CLUSTER", "local") != "kind":
        return None
    import yaml  # only needed for this path

    kubeconfig = Path(
        os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or Path.home() / ".kube/config"
    )
    context = (yaml.safe_load(kubeconfig.read_text()) or {}).get("current-context", "")
    if not context.startswith("kind-"):
        raise pytest.UsageError(
            f"E2E_CLUSTER=kind but the current context of {kubeconfig} is {context!r}, "
            "not a kind-* context"
        )
    return kubeconfig, context, start_kwok != "0"


def _terminal_log(config: pytest.Config) -> Callable[[str], None]:
    """Build progress and cluster start-up go straight to the terminal: a cold build takes
    minutes, and pytest would otherwise hold the output back until the session ends."""
    capture = config.pluginmanager.getplugin("capturemanager")

    def log(message: str) -> None:
        with capture.global_and_fixture_disabled():
            print(message, flush=True)

    return log


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest) -> Iterator[ClusterHandle]:
    """The cluster for this session; a LocalCluster unless the environment names another.

    Started from the main thread (see e2e/cluster/processes.py on why that matters).
    """
    log = _terminal_log(request.config)
    binaries = ensure_binaries(log)
    existing = _existing_cluster()
    if existing is None:
        with LocalCluster(binaries=binaries, log=log) as local:
            handle = ClusterHandle(
                kubeconfig=local.kubeconfig,
                context=None,
                kubectl=Kubectl(binaries.kubectl, local.kubeconfig),
                logs_dir=local.logs_dir,
                local=local,
            )
            request.config.stash[CLUSTER_KEY] = handle
            yield handle
        return
    kubeconfig, context, run_kwok = existing
    work_dir = RUNS_DIR / f"external-{os.getpid()}"
    claim_work_dir(work_dir)
    handle = ClusterHandle(
        kubeconfig=kubeconfig,
        context=context,
        kubectl=Kubectl(binaries.kubectl, kubeconfig, context),
        logs_dir=work_dir / "logs",
        local=None,
    )
    request.config.stash[CLUSTER_KEY] = handle
    kwok: Process | None = None
    ports = PortReservation()
    try:
        if run_kwok:
            kwok = start_kwok(binaries.kwok, kubeconfig, work_dir, ports.take())
        yield handle
    finally:
        if kwok is not None:
            kwok.stop()
        ports.release()


@pytest.fixture(autouse=True)
def _components_alive(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a test at teardown if a local component died during it, with that component's log
    tail: otherwise the test would fail later with a baffling timeout."""
    yield
    handle = request.config.stash.get(CLUSTER_KEY, None)
    if handle is not None and handle.local is not None and "cluster" in request.fixturenames:
        handle.local.ensure_running()


@pytest.fixture(scope="session")
def kubectl(cluster: ClusterHandle) -> Kubectl:
    """``await kubectl("get", "pods", "-n", ns)`` returns stdout (raises KubectlError on failure);
    ``await kubectl.json(...)`` parses ``-o json``; ``await kubectl.apply(manifest_dict, ...)``."""
    return cluster.kubectl


@pytest.fixture(scope="session")
async def api_client(cluster: ClusterHandle) -> AsyncIterator[KubeClient]:
    """kube-queue's own API client (kube/client.py) for the session's cluster, as its admin."""
    async with connect(str(cluster.kubeconfig), cluster.context) as client:
        yield client


@pytest.fixture
async def namespace(kubectl: Kubectl, request: pytest.FixtureRequest) -> AsyncIterator[str]:
    """A fresh namespace for one test, deleted (without waiting) after it.

    Returned only once its ``default`` ServiceAccount exists, since pods are rejected before.
    """
    slug = "".join(c if c.isalnum() else "-" for c in request.node.name.lower())[:40].strip("-")
    name = f"e2e-{slug}-{new_test_id()}"
    await kubectl("create", "namespace", name)

    async def has_default_sa() -> bool:
        await kubectl("get", "serviceaccount", "default", "-n", name)
        return True

    await wait_until(f"ServiceAccount default in {name}", has_default_sa)
    yield name
    try:
        await kubectl("delete", "namespace", name, "--wait=false")
    except KubectlError as error:
        pytest.fail(f"could not delete namespace {name}: {error}")


@pytest.fixture
async def fake_nodes(kubectl: Kubectl) -> AsyncIterator[FakeNodes]:
    """Create fake nodes for this test: ``names = await fake_nodes.create(NodeSpec(...), ...)``.

    Isolation guarantee: while the test runs, the only fake (KWOK) nodes in the cluster are the
    ones it creates. On setup every fake node (label ``type=kwok``) is deleted, whoever made it
    (an earlier test whose teardown failed, ``up --nodes``); on teardown the test's own nodes are
    deleted. So a test that sums node capacity sees exactly its nodes. Real nodes of an existing
    cluster are never touched. Each node is named ``<spec.name>-<test id>`` and labelled
    ``e2e.kube-queue.io/test=<test id>``; create() returns only once every node is Ready and free
    of the not-ready taint, i.e. the scheduler can place pods on it.
    """
    nodes = FakeNodes(kubectl, new_test_id())
    await nodes.delete_all_fake_nodes()
    yield nodes
    await nodes.delete(*nodes.names)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """On a failure, say where the component logs are."""
    report = yield
    handle = item.config.stash.get(CLUSTER_KEY, None)
    if report.failed and handle is not None:
        report.sections.append(("e2e cluster", f"component logs: {handle.logs_dir}"))
    return report


from e2e.controller_fixtures import controller_identity, kube_queue  # noqa: E402,F401
from e2e.operators.fixtures import _operator_session, operators  # noqa: E402,F401
from e2e.queues import queues  # noqa: E402,F401
