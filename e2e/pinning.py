"""A controller that pins: it serves the webhook, and the chart's pod-gate webhooks point at it
for one test's namespace (e2e/test_pinning.py, e2e/test_topology.py)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator

from e2e.cluster.build import ensure_binaries
from e2e.controller import KubeQueue, free_port, render_chart
from e2e.controller_fixtures import StartController
from e2e.support import ClusterHandle, Kubectl
from e2e.webhook import pod_gate_configuration, write_serving_cert

__all__ = ["pinning"]


@contextlib.asynccontextmanager
async def pinning(
    kubectl: Kubectl, cluster: ClusterHandle, namespace: str, kube_queue: StartController,
    *extra: str,
) -> AsyncIterator[KubeQueue]:
    """A controller serving the webhook, and the chart's pod-gate webhook pointed at it for
    this namespace."""
    cert_dir = cluster.logs_dir / "webhook" / namespace
    ca = await asyncio.to_thread(write_serving_cert, cert_dir)
    port = free_port()
    kq = await kube_queue(
        f"--webhook-port={port}", "--webhook-host=127.0.0.1", f"--webhook-cert-dir={cert_dir}",
        *extra,
    )
    name = f"kube-queue-pin-{namespace}"[:63]
    rendered = await render_chart(ensure_binaries().helm)
    config = pod_gate_configuration(rendered, name, port, ca, namespace)
    await kubectl("apply", "-f", "-", stdin=json.dumps(config))
    try:
        yield kq
    finally:
        await kubectl("delete", "mutatingwebhookconfiguration", name, "--ignore-not-found")
