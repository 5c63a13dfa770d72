"""The mutating webhook, called for real by the local apiserver."""

from __future__ import annotations

import asyncio
import json

import pytest

from e2e.cluster.build import ensure_binaries
from e2e.cluster.nodes import NodeSpec
from e2e.controller import free_port, render_chart
from e2e.controller_fixtures import StartController
from e2e.jobs import get_job, is_suspended, job
from e2e.support import ClusterHandle, FakeNodes, Kubectl, wait_until
from e2e.webhook import local_webhook_configuration, write_serving_cert

pytestmark = pytest.mark.e2e


async def test_auto_queue_creates_jobs_suspended_in_managed_namespaces(
    kubectl: Kubectl,
    cluster: ClusterHandle,
    namespace: str,
    fake_nodes: FakeNodes,
    kube_queue: StartController,
) -> None:
    cert_dir = cluster.logs_dir / "webhook" / namespace
    ca = await asyncio.to_thread(write_serving_cert, cert_dir)
    port = free_port()
    await kube_queue(
        f"--webhook-port={port}", "--webhook-host=127.0.0.1", f"--webhook-cert-dir={cert_dir}"
    )
    rendered = await render_chart(ensure_binaries().helm, "webhook.autoQueue.enabled=true")
    [config] = [m for m in rendered if m["kind"] == "MutatingWebhookConfiguration"]
    hook_name = f"kube-queue-e2e-{namespace}"[:63]
    local = local_webhook_configuration(config, hook_name, port, ca)
    # Only this test's namespace: other tests' namespaces must not depend on this webhook.
    for hook in local["webhooks"]:
        hook["namespaceSelector"] = {
            "matchLabels": {
                "kubernetes.io/metadata.name": namespace,
                "kube-queue.io/managed": "true",
            }
        }
    await kubectl("apply", "-f", "-", stdin=json.dumps(local))
    try:
        await kubectl("label", "namespace", namespace, "kube-queue.io/managed=true")
        # No node yet: the job must be held, although the user did not ask for it.
        unasked = job("unasked", gpus=1, suspend=False)

        async def created() -> bool:
            await kubectl.apply(unasked, "-n", namespace)  # retried until the webhook answers
            return True

        await wait_until("the Job created through the webhook", created)
        obj = await get_job(kubectl, namespace, "unasked")
        assert is_suspended(obj), "created suspended by the auto-queue webhook"
        opted_out = job("opted-out", gpus=1, suspend=False)
        opted_out["metadata"]["annotations"] = {"kube-queue.io/ignore": "true"}
        await kubectl.apply(opted_out, "-n", namespace)
        assert not is_suspended(await get_job(kubectl, namespace, "opted-out"))
        await asyncio.sleep(2)
        assert is_suspended(await get_job(kubectl, namespace, "unasked")), "no room yet"

        await fake_nodes.create(NodeSpec("gpu", gpus=4))

        async def admitted() -> bool:
            return not is_suspended(await get_job(kubectl, namespace, "unasked"))

        await wait_until("admitted once a node with a GPU exists", admitted)
    finally:
        await kubectl("delete", "mutatingwebhookconfiguration", hook_name, "--ignore-not-found")
