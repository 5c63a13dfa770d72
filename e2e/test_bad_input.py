"""Hostile but valid jobs through the real API server (issue 13): what the API server accepts,
kube-queue must judge. Each gets a verdict a user can read (a Warning Event naming the cause),
nothing is admitted that cannot run, nothing crashes or stalls, and an ordinary job created
after them is still admitted."""

from __future__ import annotations

import json
from typing import Any

import pytest

from e2e.cluster.nodes import NodeSpec
from e2e.controller_fixtures import StartController
from e2e.jobs import admitted_at, get_job, is_suspended, job
from e2e.operators.manifests import first_event
from e2e.support import FakeNodes, Kubectl, wait_until

pytestmark = pytest.mark.e2e

# The API server caps all annotations of an object together at 256 KiB; the rest of the
# ~1 MiB goes into the pod template (the Job's own size limit is etcd's request limit).
ANNOTATIONS_BYTES = 250 * 1024
TEMPLATE_BYTES = 750 * 1024


def _with_resource(manifest: dict[str, Any], name: str, amount: str) -> dict[str, Any]:
    container = manifest["spec"]["template"]["spec"]["containers"][0]
    container["resources"]["requests"][name] = amount
    container["resources"]["limits"][name] = amount  # extended resources: limit == request
    return manifest


def _huge(name: str) -> dict[str, Any]:
    manifest = job(name, cpu="1")
    manifest["metadata"]["annotations"] = {
        f"example.com/blob-{i}": "x" * (ANNOTATIONS_BYTES // 10 - 64) for i in range(10)
    }
    container = manifest["spec"]["template"]["spec"]["containers"][0]
    container["env"] = [{"name": "BLOB", "value": "y" * TEMPLATE_BYTES}]
    return manifest


async def test_hostile_but_valid_jobs_get_a_verdict_and_the_queue_moves_on(
    kubectl: Kubectl, namespace: str, fake_nodes: FakeNodes, kube_queue: StartController
) -> None:
    await fake_nodes.create(NodeSpec("gpu", cpu="32", memory="256Gi", gpus=8))
    kq = await kube_queue()
    # A resource no node offers at all, and a gang of 100,000 pods (parallelism is an int32:
    # the API server takes it).
    await kubectl.apply(_with_resource(job("fpga"), "example.com/fpga", "1"), "-n", namespace)
    await kubectl.apply(job("horde", pods=100_000, cpu="100m", memory="64Mi"), "-n", namespace)
    # An object of about 1 MiB (annotations at the API server's 256 KiB cap): it fits, so it
    # must be admitted like any other (its watch events are bigger than aiohttp's default
    # read buffer).
    # (created, not applied: client-side apply would copy it into an annotation, over the cap)
    await kubectl("create", "-f", "-", "-n", namespace, stdin=json.dumps(_huge("huge")))
    # Created last: the queue must still be moving.
    await kubectl.apply(job("ordinary", gpus=1), "-n", namespace)

    async def admitted(name: str) -> bool:
        return not is_suspended(await get_job(kubectl, namespace, name))

    await wait_until("the ~1 MiB job admitted", lambda: admitted("huge"), 60)
    await wait_until("the ordinary job admitted", lambda: admitted("ordinary"), 60)

    # Each held back with a Warning naming its cause.
    for name, cause in (
        ("fpga", "no eligible node offers example.com/fpga at all"),
        ("horde", "needs 100000 pods"),
    ):
        warning = await wait_until(
            f"a NeverFits warning on {name}",
            lambda name=name: first_event(kubectl, namespace, name, "NeverFits"),
            60,
        )
        assert warning["type"] == "Warning"
        assert cause in warning["message"], warning["message"]
    for name in ("fpga", "horde"):
        held = await get_job(kubectl, namespace, name)
        assert is_suspended(held) and admitted_at(held) is None, f"{name} was admitted"
    assert kq.process.running(), "the controller is still up"
