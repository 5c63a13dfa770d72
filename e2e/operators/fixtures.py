"""The ``operators`` fixture (imported by conftest.py): real job operators, started lazily.

``await operators.start("ray")`` builds the operator if its cached binary is missing (minutes,
once per machine), applies its CRDs from the pinned module, starts it against the session's
cluster and waits until it is ready; later calls (any test) return the same running process.
``await operators.install_crds("spark")`` installs CRDs only. Names: ray, training (TFJob,
PyTorchJob), mpi, argo, spark. Operators run until the session ends. A test that used one fails
at teardown if it died meanwhile, and a failing test shows the tails of their logs.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator

import pytest

from e2e.operators.runner import Operators
from e2e.support import ClusterHandle, Kubectl


def _terminal_log(config: pytest.Config) -> Callable[[str], None]:
    """Build progress straight to the terminal: a cold operator build takes minutes, and pytest
    would hold captured output back until the test ends."""
    capture = config.pluginmanager.getplugin("capturemanager")

    def log(message: str) -> None:
        with capture.global_and_fixture_disabled():
            print(message, flush=True)

    return log


@pytest.fixture(scope="session")
def _operator_session(
    cluster: ClusterHandle, kubectl: Kubectl, request: pytest.FixtureRequest
) -> Iterator[Operators]:
    ops = Operators(kubectl, cluster.kubeconfig, cluster.logs_dir / "operators",
                    log=_terminal_log(request.config))
    try:
        yield ops
    finally:
        ops.stop_all()


@pytest.fixture
async def operators(_operator_session: Operators) -> AsyncIterator[Operators]:
    yield _operator_session
    for running in _operator_session.running.values():
        # Captured output: pytest shows it only when the test fails.
        print(f"\n----- operator {running.name} {running.version} log "
              f"({running.process.log_path}) -----\n{running.tail(80)}")
    _operator_session.ensure_running()
