"""SparkApplication with the real spark-operator and the real spark-submit (Spark 3.5.5 jars from
Maven Central): queued while the GPUs are taken (the operator keeps it SUSPENDED, submits
nothing), admitted when they free up (the operator resumes it, spark-submit creates the driver
pod, it is bound). Executors would be created by the driver's JVM, which fake pods do not run."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from e2e.cluster.nodes import NodeSpec
from e2e.controller_fixtures import StartController
from e2e.jobs import get_job, is_suspended, job
from e2e.operators.manifests import (
    SUSPEND_ANNOTATION,
    admission_probe,
    admitted_at,
    bound,
    first_event,
    get,
    pods,
    spark_application,
    spec_suspended,
)
from e2e.operators.runner import Operators
from e2e.operators.spark import missing_tools
from e2e.support import FakeNodes, Kubectl, wait_until

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(bool(missing_tools()),
                       reason=f"spark-submit needs {', '.join(missing_tools())} on PATH"),
]

KINDS = "--kinds=job,sparkapplication"
APP_LABEL = "sparkoperator.k8s.io/app-name"


def _state(app: dict[str, Any]) -> str:
    return str(app.get("status", {}).get("applicationState", {}).get("state", ""))


async def test_spark_application_waits_while_full_then_spark_submit_creates_the_driver(
    kubectl: Kubectl, namespace: str, fake_nodes: FakeNodes, kube_queue: StartController,
    operators: Operators,
) -> None:
    await operators.start("spark")
    [node] = await fake_nodes.create(NodeSpec("gpu", cpu="32", memory="256Gi", gpus=4))
    await kube_queue(KINDS)
    await kubectl.apply(job("blocker", gpus=3, run_for="20s"), "-n", namespace)

    async def blocker_running() -> bool:
        return not is_suspended(await get_job(kubectl, namespace, "blocker"))

    await wait_until("blocker admitted", blocker_running)
    await kubectl.apply(spark_application("pi", executors=2, executor_gpus=1), "-n", namespace)
    queued = await wait_until("Queued event",
                              lambda: first_event(kubectl, namespace, "pi", "Queued"))
    assert "nvidia.com/gpu" in queued["message"], queued

    async def operator_suspended() -> bool:
        return _state(await get(kubectl, "sparkapplication", namespace, "pi")) == "SUSPENDED"

    await wait_until("the spark-operator holds it SUSPENDED", operator_suspended)
    assert not (await get_job(kubectl, namespace, "blocker")).get("status", {}).get("succeeded")
    assert await pods(kubectl, namespace, f"{APP_LABEL}=pi") == []

    app = await wait_until(
        "SparkApplication admitted after the blocker",
        admission_probe(kubectl, "sparkapplication", namespace, "pi", spec_suspended), 90)
    assert app["metadata"]["annotations"][SUSPEND_ANNOTATION] == "false"
    assert admitted_at(app)

    async def driver_bound() -> list[dict[str, Any]] | None:
        found = bound(await pods(kubectl, namespace, f"{APP_LABEL}=pi,spark-role=driver"))
        return found or None

    # spark-submit is a JVM: give it time on a small machine.
    [driver] = await wait_until("spark-submit creates the driver pod, bound", driver_bound, 120)
    assert driver["spec"]["nodeName"] == node
    requests = driver["spec"]["containers"][0]["resources"]["requests"]
    # What kube-queue counted for the driver: 1 core, 2g + max(384m, 10%) overhead.
    assert requests["cpu"] == "1" and requests["memory"] == "2432Mi", requests

    async def submitted() -> bool:
        state = _state(await get(kubectl, "sparkapplication", namespace, "pi"))
        return state in ("SUBMITTED", "RUNNING")

    await wait_until("the operator reports it submitted/running", submitted, 60)


async def test_spark_application_with_unreadable_memory_gets_invalid_job(
    kubectl: Kubectl, namespace: str, fake_nodes: FakeNodes, kube_queue: StartController,
    operators: Operators,
) -> None:
    await operators.start("spark")
    await fake_nodes.create(NodeSpec("gpu", gpus=4))
    await kube_queue(KINDS)
    await kubectl.apply(spark_application("typo", executor_memory="8 gigs"), "-n", namespace)
    warning = await wait_until("InvalidJob warning",
                               lambda: first_event(kubectl, namespace, "typo", "InvalidJob"))
    assert warning["type"] == "Warning"
    assert "spec.executor.memory" in warning["message"] and "8 gigs" in warning["message"]
    await asyncio.sleep(3)
    app = await get(kubectl, "sparkapplication", namespace, "typo")
    assert app["spec"]["suspend"] is True and admitted_at(app) is None
    assert await pods(kubectl, namespace) == []
