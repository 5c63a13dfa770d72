"""A kind enabled before its CRD exists: Jobs are still admitted, one clear error is logged, and
once the CRD is installed (from the operator's pinned module) the kind is queued and admitted.

Uses SparkApplication with its CRDs only (no operator): the checks are kube-queue's own, the
admission patch (annotation and spec.suspend) and the capacity it holds for an admitted app."""

from __future__ import annotations

import time

import pytest

from e2e.cluster.nodes import NodeSpec
from e2e.controller_fixtures import StartController
from e2e.jobs import get_job, is_suspended, job
from e2e.operators.manifests import (
    SUSPEND_ANNOTATION,
    admission_probe,
    admitted_at,
    first_event,
    get,
    spark_application,
    spec_suspended,
)
from e2e.operators.runner import Operators
from e2e.support import FakeNodes, Kubectl, wait_until

pytestmark = pytest.mark.e2e

# The informer polls a missing resource every 10 s; allow for that, one cycle and slack.
CRD_PICKUP_S = 25.0


async def test_kind_whose_crd_appears_later_is_picked_up_and_jobs_never_wait_for_it(
    kubectl: Kubectl, namespace: str, fake_nodes: FakeNodes, kube_queue: StartController,
    operators: Operators,
) -> None:
    await operators.stop("spark")
    await operators.delete_crds("spark")
    await fake_nodes.create(NodeSpec("gpu", cpu="32", memory="256Gi", gpus=4))
    kq = await kube_queue("--kinds=job,sparkapplication")
    await kubectl.apply(job("plain", gpus=1), "-n", namespace)

    async def job_admitted() -> bool:
        return not is_suspended(await get_job(kubectl, namespace, "plain"))

    await wait_until("the Job admitted although the SparkApplication CRD is missing",
                     job_admitted)
    missing = [e for e in kq.log_events("informer.resource_missing")
               if "sparkapplications" in e.get("path", "")]
    assert len(missing) == 1, missing
    assert "install its CRD" in missing[0]["why"]

    await operators.install_crds("spark")
    installed = time.monotonic()
    # Driver (1 core, 2g + 384m overhead) + 2 executors with 1 GPU each: fits beside the Job.
    await kubectl.apply(spark_application("pi", executors=2, executor_gpus=1), "-n", namespace)

    await wait_until("SparkApplication admitted after its CRD appeared",
                     admission_probe(kubectl, "sparkapplication", namespace, "pi",
                                     spec_suspended), CRD_PICKUP_S)
    took = time.monotonic() - installed
    app = await get(kubectl, "sparkapplication", namespace, "pi")
    assert app["metadata"]["annotations"][SUSPEND_ANNOTATION] == "false"
    assert admitted_at(app)
    assert await first_event(kubectl, namespace, "pi", "Admitted")

    # Capacity accounting without an operator: the admitted app's 2 GPUs stay held (no pod of
    # it exists yet), the Job holds 1, so a 2-GPU app must wait while a 1-GPU app fits.
    await kubectl.apply(spark_application("too-many", executors=2, executor_gpus=1),
                        "-n", namespace)
    await kubectl.apply(spark_application("one-more", executors=1, executor_gpus=1),
                        "-n", namespace)

    await wait_until("the 1-GPU app admitted into the last free GPU",
                     admission_probe(kubectl, "sparkapplication", namespace, "one-more",
                                     spec_suspended))
    queued = await wait_until("the 2-GPU app Queued",
                              lambda: first_event(kubectl, namespace, "too-many", "Queued"))
    assert "nvidia.com/gpu" in queued["message"], queued
    too_many = await get(kubectl, "sparkapplication", namespace, "too-many")
    assert too_many["spec"]["suspend"] is True and admitted_at(too_many) is None
    print(f"SparkApplication admitted {took:.1f}s after its CRD was installed")
