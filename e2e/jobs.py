"""Builders and readers for batch/v1 Jobs in e2e tests."""

from __future__ import annotations

from typing import Any

from e2e.cluster.nodes import GPU_RESOURCE
from e2e.support import Kubectl

ADMITTED_AT = "kube-queue.io/admitted-at"
RUN_FOR = "pod-complete.stage.kwok.x-k8s.io/delay"


def job(
    name: str,
    *,
    gpus: int = 0,
    pods: int = 1,
    cpu: str = "1",
    memory: str = "1Gi",
    run_for: str = "600s",
    suspend: bool = True,
    priority_class: str | None = None,
    node_selector: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    requests = {"cpu": cpu, "memory": memory}
    limits = {}
    if gpus:  # extended resources need limit == request
        requests[GPU_RESOURCE] = limits[GPU_RESOURCE] = str(gpus)
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                        "resources": {"requests": requests, "limits": limits}}],
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {
            "suspend": suspend,
            "parallelism": pods,
            "completions": pods,
            "backoffLimit": 0,
            "template": {"metadata": {"annotations": {RUN_FOR: run_for}}, "spec": spec},
        },
    }


async def get_job(kubectl: Kubectl, namespace: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = await kubectl.json("get", "job", name, "-n", namespace)
    return found


def is_suspended(obj: dict[str, Any]) -> bool:
    return obj["spec"].get("suspend") is True


def admitted_at(obj: dict[str, Any]) -> str | None:
    value = (obj["metadata"].get("annotations") or {}).get(ADMITTED_AT)
    return str(value) if value is not None else None


def completed(obj: dict[str, Any]) -> bool:
    return any(c["type"] == "Complete" and c["status"] == "True"
               for c in obj.get("status", {}).get("conditions", []))


async def suspended_states(kubectl: Kubectl, namespace: str) -> dict[str, bool]:
    found = await kubectl.json("get", "jobs", "-n", namespace)
    return {j["metadata"]["name"]: is_suspended(j) for j in found["items"]}


async def events_for(kubectl: Kubectl, namespace: str, name: str) -> list[dict[str, Any]]:
    found = await kubectl.json(
        "get", "events", "-n", namespace, "--field-selector", f"involvedObject.name={name}"
    )
    events: list[dict[str, Any]] = found["items"]
    return events


async def pods_by_node(kubectl: Kubectl, namespace: str) -> dict[str, str]:
    """Bound, non-terminal pods of the namespace -> node."""
    found = await kubectl.json("get", "pods", "-n", namespace)
    return {
        p["metadata"]["name"]: p["spec"]["nodeName"]
        for p in found["items"]
        if p["spec"].get("nodeName") and p["status"].get("phase") not in ("Succeeded", "Failed")
    }
