"""Realistic manifests of the operator kinds for the e2e tests, and readers for what the
operators and kube-queue did with them.

Every pod template carries the KWOK run-time annotation (e2e/cluster/stages): pods with
restartPolicy Never/OnFailure succeed after it; Ray pods (restartPolicy Always by KubeRay's
default) only "run" until deleted unless the annotation is set.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from e2e.cluster.nodes import GPU_RESOURCE
from e2e.jobs import RUN_FOR
from e2e.support import Kubectl

ADMITTED_AT = "kube-queue.io/admitted-at"
SUSPEND_ANNOTATION = "scheduling.x-k8s.io/suspend"
MIN_RESOURCES = "kube-queue/min-resources"


def resources(cpu: str = "1", memory: str = "2Gi", gpus: int | str = 0) -> dict[str, Any]:
    requests: dict[str, str] = {"cpu": cpu, "memory": memory}
    limits: dict[str, str] = {}
    if gpus:
        requests[GPU_RESOURCE] = limits[GPU_RESOURCE] = str(gpus)
    return {"requests": requests, "limits": limits}


def pod_template(
    image: str,
    *,
    container: str = "main",
    cpu: str = "1",
    memory: str = "2Gi",
    gpus: int | str = 0,
    run_for: str | None = "600s",
    restart_policy: str | None = None,
    priority_class: str | None = None,
    command: list[str] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": container, "image": image,
                        "resources": resources(cpu, memory, gpus)}],
    }
    if command:
        spec["containers"][0]["command"] = command
    if restart_policy:
        spec["restartPolicy"] = restart_policy
    if priority_class:
        spec["priorityClassName"] = priority_class
    metadata: dict[str, Any] = {}
    if run_for:
        metadata["annotations"] = {RUN_FOR: run_for}
    return {"metadata": metadata, "spec": spec}


# ---------------------------------------------------------------------- KubeRay
RAY_IMAGE = "rayproject/ray:2.46.0"


def rayjob(
    name: str,
    *,
    worker_gpus: int = 1,
    workers: int = 2,
    head_cpu: str = "2",
    worker_cpu: str = "4",
    run_for: str = "600s",
    suspend: bool = True,
    priority_class: str | None = None,
    active_deadline_s: int | None = None,
    group: str = "gpu-workers",
) -> dict[str, Any]:
    """A RayJob in K8sJobMode: a head, one worker group of ``workers`` pods with
    ``worker_gpus`` GPUs each, and KubeRay's default submitter pod (500m / 200Mi)."""
    head = pod_template(RAY_IMAGE, container="ray-head", cpu=head_cpu, memory="8Gi",
                        run_for=run_for, priority_class=priority_class)
    worker = pod_template(RAY_IMAGE, container="ray-worker", cpu=worker_cpu, memory="16Gi",
                          gpus=worker_gpus, run_for=run_for, priority_class=priority_class)
    spec: dict[str, Any] = {
        "suspend": suspend,
        "entrypoint": "python /home/ray/samples/train.py",
        "shutdownAfterJobFinishes": True,
        "rayClusterSpec": {
            "rayVersion": "2.46.0",
            "headGroupSpec": {"rayStartParams": {"dashboard-host": "0.0.0.0"},
                              "template": head},
            "workerGroupSpecs": [{
                "groupName": group,
                "replicas": workers,
                "minReplicas": workers,
                "maxReplicas": workers,
                "rayStartParams": {},
                "template": worker,
            }],
        },
    }
    if active_deadline_s is not None:
        spec["activeDeadlineSeconds"] = active_deadline_s
    return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": name},
            "spec": spec}


# ---------------------------------------------------------------------- Kubeflow
TF_IMAGE = "kubeflow/tf-mnist-with-summaries:latest"
PYTORCH_IMAGE = "kubeflow/pytorch-dist-mnist:latest"
MPI_IMAGE = "mpioperator/mpi-pi:openmpi"


def _replica(replicas: int, template: dict[str, Any], restart: str = "OnFailure"
             ) -> dict[str, Any]:
    return {"replicas": replicas, "restartPolicy": restart, "template": template}


def tfjob(
    name: str,
    *,
    workers: int = 2,
    worker_gpus: int | str = 2,
    ps: int = 1,
    run_for: str = "600s",
    suspend: bool = True,
) -> dict[str, Any]:
    """A TFJob: ``ps`` parameter servers (CPU) and ``workers`` GPU workers."""
    specs: dict[str, Any] = {
        "Worker": _replica(workers, pod_template(TF_IMAGE, container="tensorflow", cpu="4",
                                                 memory="16Gi", gpus=worker_gpus,
                                                 run_for=run_for)),
    }
    if ps:
        specs["PS"] = _replica(ps, pod_template(TF_IMAGE, container="tensorflow", cpu="2",
                                                memory="4Gi", run_for=run_for))
    return {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": name},
            "spec": {"runPolicy": {"suspend": suspend, "cleanPodPolicy": "None"},
                     "tfReplicaSpecs": specs}}


def pytorchjob(
    name: str,
    *,
    workers: int = 1,
    gpus: int = 2,
    run_for: str = "600s",
    suspend: bool = True,
    priority_class: str | None = None,
) -> dict[str, Any]:
    """A PyTorchJob: one Master and ``workers`` Workers, ``gpus`` GPUs each."""
    def template() -> dict[str, Any]:
        return pod_template(PYTORCH_IMAGE, container="pytorch", cpu="4", memory="16Gi",
                            gpus=gpus, run_for=run_for, priority_class=priority_class)

    run_policy: dict[str, Any] = {"suspend": suspend, "cleanPodPolicy": "None"}
    if priority_class:
        run_policy["schedulingPolicy"] = {"priorityClass": priority_class}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": name},
            "spec": {"runPolicy": run_policy,
                     "pytorchReplicaSpecs": {"Master": _replica(1, template()),
                                             "Worker": _replica(workers, template())}}}


def mpijob(
    name: str,
    *,
    workers: int = 2,
    worker_gpus: int = 2,
    run_for: str = "600s",
    suspend: bool = True,
) -> dict[str, Any]:
    """An MPIJob (v2beta1): a CPU launcher and ``workers`` GPU workers (one slot per GPU)."""
    return {
        "apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": name},
        "spec": {
            "slotsPerWorker": worker_gpus or 1,
            "runPolicy": {"suspend": suspend, "cleanPodPolicy": "Running"},
            "mpiReplicaSpecs": {
                "Launcher": _replica(1, pod_template(
                    MPI_IMAGE, container="launcher", cpu="1", memory="1Gi", run_for=run_for,
                    command=["mpirun", "-n", str(workers * (worker_gpus or 1)), "/home/mpiuser/pi"],
                )),
                # Workers run sshd until the launcher is done; the operator deletes them then.
                "Worker": _replica(workers, pod_template(
                    MPI_IMAGE, container="worker", cpu="8", memory="32Gi", gpus=worker_gpus,
                    run_for=run_for, command=["/usr/sbin/sshd", "-De"],
                )),
            },
        },
    }


# ---------------------------------------------------------------------- Argo
ARGO_IMAGE = "nvcr.io/nvidia/pytorch:24.05-py3"


def workflow(
    name: str,
    *,
    min_resources: str | None = "cpu: 4\nmemory: 16Gi\nnvidia.com/gpu: 2",
    gpus: int = 2,
    with_suspend_template: bool = True,
    suspend: bool = True,
    run_for: str = "600s",
) -> dict[str, Any]:
    """An Argo Workflow queued the kube-queue way: ``spec.suspend``, a first step using the
    ``kube-queue-suspend`` template, then a GPU training step."""
    train = {
        "name": "train",
        "metadata": {"annotations": {RUN_FOR: run_for}},
        "container": {"image": ARGO_IMAGE, "command": ["python", "train.py"],
                      "resources": resources("4", "16Gi", gpus)},
    }
    steps: list[list[dict[str, str]]] = [[{"name": "train", "template": "train"}]]
    templates: list[dict[str, Any]] = [{"name": "main", "steps": steps}, train]
    if with_suspend_template:
        steps.insert(0, [{"name": "wait-for-kube-queue", "template": "kube-queue-suspend"}])
        templates.append({"name": "kube-queue-suspend", "suspend": {}})
    metadata: dict[str, Any] = {"name": name}
    if min_resources is not None:
        metadata["annotations"] = {MIN_RESOURCES: min_resources}
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "metadata": metadata,
            "spec": {"entrypoint": "main", "suspend": suspend, "templates": templates,
                     "podGC": {"strategy": "OnWorkflowCompletion"}}}


# ---------------------------------------------------------------------- Spark
SPARK_IMAGE = "apache/spark:3.5.5"


def spark_application(
    name: str,
    *,
    executors: int = 2,
    executor_gpus: int = 1,
    executor_memory: str = "8g",
    suspend: bool = True,
    run_for: str = "600s",
) -> dict[str, Any]:
    """SparkPi (Scala) with GPU executors, held by spec.suspend and the suspend annotation."""
    def role(cores: int, memory: str, gpus: int) -> dict[str, Any]:
        out: dict[str, Any] = {"cores": cores, "memory": memory,
                               "annotations": {RUN_FOR: run_for}}
        if gpus:
            out["gpu"] = {"name": GPU_RESOURCE, "quantity": gpus}
        return out

    executor = role(4, executor_memory, executor_gpus)
    executor["instances"] = executors
    return {
        "apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
        "metadata": {"name": name, "annotations": {SUSPEND_ANNOTATION: str(suspend).lower()}},
        "spec": {
            "type": "Scala", "mode": "cluster", "image": SPARK_IMAGE,
            "mainClass": "org.apache.spark.examples.SparkPi",
            "mainApplicationFile": "local:///opt/spark/examples/jars/spark-examples_2.12-3.5.5.jar",
            "arguments": ["10000"],
            "sparkVersion": "3.5.5", "suspend": suspend,
            "restartPolicy": {"type": "Never"},
            "driver": role(1, "2g", 0),
            "executor": executor,
        },
    }


# ---------------------------------------------------------------------- readers
async def get(kubectl: Kubectl, resource: str, namespace: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = await kubectl.json("get", resource, name, "-n", namespace)
    return found


def admitted_at(obj: dict[str, Any]) -> str | None:
    value = (obj["metadata"].get("annotations") or {}).get(ADMITTED_AT)
    return str(value) if value is not None else None


async def pods(kubectl: Kubectl, namespace: str, selector: str | None = None
               ) -> list[dict[str, Any]]:
    args = ["get", "pods", "-n", namespace]
    if selector:
        args += ["-l", selector]
    found = await kubectl.json(*args)
    items: list[dict[str, Any]] = found["items"]
    return items


def bound(items: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pods bound to a node and not finished."""
    return [p for p in items if p["spec"].get("nodeName")
            and p.get("status", {}).get("phase") not in ("Succeeded", "Failed")]


def pod_gpus(pod: dict[str, Any]) -> int:
    total = 0
    for c in pod["spec"].get("containers", []):
        total += int((c.get("resources", {}).get("requests") or {}).get(GPU_RESOURCE, 0))
    inits = [int((c.get("resources", {}).get("requests") or {}).get(GPU_RESOURCE, 0))
             for c in pod["spec"].get("initContainers", [])]
    return max([total, *inits])


async def events(kubectl: Kubectl, namespace: str, name: str, reason: str
                 ) -> list[dict[str, Any]]:
    """Events with ``reason`` on the object ``name`` (any kind) in ``namespace``."""
    found = await kubectl.json("get", "events", "-n", namespace,
                               "--field-selector", f"involvedObject.name={name}")
    return [e for e in found["items"] if e["reason"] == reason]


async def first_event(kubectl: Kubectl, namespace: str, name: str, reason: str
                      ) -> dict[str, Any] | None:
    """The first such event, or None: a probe for wait_until."""
    found = await events(kubectl, namespace, name, reason)
    return found[0] if found else None


@dataclass
class GpuSampler:
    """Samples, until stopped, every bound non-terminal pod of the whole cluster and the GPUs it
    requests per node; records any moment at which a node's sum exceeded its allocatable."""

    kubectl: Kubectl
    nodes: frozenset[str] = frozenset()  # only these nodes; empty: every node that exists
    interval_s: float = 0.5
    samples: int = 0
    overcommits: list[str] = field(default_factory=list)
    peak: dict[str, int] = field(default_factory=dict)
    _task: asyncio.Task[None] | None = None
    _stopping: bool = False

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        # The flag, not only the cancel: on Python 3.11 asyncio.wait_for (inside every kubectl
        # call) can swallow a cancellation that arrives as the call completes, and the loop
        # would then sample on forever while stop() waits for it (seen: a CI run hung).
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while not self._stopping:
            await self.sample()
            await asyncio.sleep(self.interval_s)

    async def sample(self) -> None:
        nodes = await self.kubectl.json("get", "nodes")
        allocatable = {n["metadata"]["name"]: int(n["status"].get("allocatable", {})
                                                   .get(GPU_RESOURCE, 0))
                       for n in nodes["items"]}
        found = await self.kubectl.json("get", "pods", "-A")
        used: dict[str, int] = {}
        for pod in bound(found["items"]):
            used[pod["spec"]["nodeName"]] = used.get(pod["spec"]["nodeName"], 0) + pod_gpus(pod)
        self.samples += 1
        for node, gpus in used.items():
            # Pods of earlier tests may still name nodes that no longer exist: skip them.
            if node not in allocatable or (self.nodes and node not in self.nodes):
                continue
            self.peak[node] = max(self.peak.get(node, 0), gpus)
            if gpus > allocatable[node]:
                self.overcommits.append(
                    f"{time.strftime('%H:%M:%S')} {node}: {gpus} GPUs bound > "
                    f"{allocatable[node]} allocatable")


class AdmittedButStillSuspended(AssertionError):
    """kube-queue stamped the job admitted, yet left it suspended: its admission patch did not
    clear the kind's suspend field."""


def admission_probe(
    kubectl: Kubectl,
    resource: str,
    namespace: str,
    name: str,
    suspended: Callable[[dict[str, Any]], bool],
    grace_s: float = 5.0,
) -> Callable[[], Awaitable[dict[str, Any] | None]]:
    """A wait_until probe: the object once it is no longer suspended. Fails fast (instead of
    timing out) when the object carries kube-queue's admitted-at stamp but stays suspended for
    ``grace_s``, which means the admission patch missed the field that holds this kind."""
    stuck_since: list[float] = []

    async def probe() -> dict[str, Any] | None:
        obj = await get(kubectl, resource, namespace, name)
        if not suspended(obj):
            return obj
        if admitted_at(obj) is None:
            stuck_since.clear()
            return None
        if not stuck_since:
            stuck_since.append(time.monotonic())
        elif time.monotonic() - stuck_since[0] > grace_s:
            raise AdmittedButStillSuspended(
                f"{resource} {namespace}/{name} has {ADMITTED_AT}={admitted_at(obj)} but is "
                f"still suspended after {grace_s:.0f}s: spec={obj.get('spec', {}).get('suspend')!r}"
                f", runPolicy={obj.get('spec', {}).get('runPolicy')!r}, annotations="
                f"{obj['metadata'].get('annotations')!r}")
        return None

    return probe


def runpolicy_suspended(obj: dict[str, Any]) -> bool:
    """Kubeflow kinds: held by runPolicy.suspend or the suspend annotation."""
    return (obj["spec"].get("runPolicy", {}).get("suspend") is True
            or (obj["metadata"].get("annotations") or {}).get(SUSPEND_ANNOTATION) == "true")


def spec_suspended(obj: dict[str, Any]) -> bool:
    """RayJob, Workflow, SparkApplication (which may also hold by the annotation)."""
    return (obj["spec"].get("suspend") is True
            or (obj["metadata"].get("annotations") or {}).get(SUSPEND_ANNOTATION) == "true")
