"""Small builders for API objects in unit tests (dicts as the API server would send them)."""

from __future__ import annotations

import itertools
from typing import Any

import msgspec

from kubequeue.objects import Node, Pod

_uid = itertools.count(1)


def node(
    name: str,
    *,
    cpu: str = "32",
    memory: str = "128Gi",
    gpu: int = 0,
    pods: str = "110",
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    ready: bool = True,
    unschedulable: bool = False,
) -> Node:
    allocatable: dict[str, str] = {"cpu": cpu, "memory": memory, "pods": pods}
    if gpu:
        allocatable["nvidia.com/gpu"] = str(gpu)
    raw = {
        "metadata": {"name": name, "labels": labels or {}, "resourceVersion": "1"},
        "spec": {"unschedulable": unschedulable, "taints": taints or []},
        "status": {
            "allocatable": allocatable,
            "capacity": allocatable,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }
    return msgspec.convert(raw, Node)


def container(
    requests: dict[str, Any] | None = None,
    limits: dict[str, Any] | None = None,
    name: str = "main",
    restart_policy: str | None = None,
) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "resources": {}}
    if requests is not None:
        c["resources"]["requests"] = requests
    if limits is not None:
        c["resources"]["limits"] = limits
    if restart_policy:
        c["restartPolicy"] = restart_policy
    return c


def pod_spec(
    requests: dict[str, Any] | None = None,
    *,
    limits: dict[str, Any] | None = None,
    node_selector: dict[str, str] | None = None,
    tolerations: list[dict[str, str]] | None = None,
    affinity: dict[str, Any] | None = None,
    priority_class: str | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [container(requests, limits)]}
    if node_selector:
        spec["nodeSelector"] = node_selector
    if tolerations:
        spec["tolerations"] = tolerations
    if affinity:
        spec["affinity"] = affinity
    if priority_class:
        spec["priorityClassName"] = priority_class
    return spec


def pod(
    name: str,
    node_name: str,
    requests: dict[str, Any],
    *,
    namespace: str = "default",
    phase: str = "Running",
    owner_job: str | None = None,
    uid: str | None = None,
    ready: bool | None = None,
) -> Pod:
    """A bound pod; Running pods are Ready unless ``ready=False`` (a failing readiness probe)."""
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": uid or f"pod-uid-{next(_uid)}",
        "resourceVersion": "1",
    }
    if owner_job:
        meta["ownerReferences"] = [
            {"kind": "Job", "name": owner_job, "uid": f"job-{owner_job}", "controller": True}
        ]
    raw = {
        "metadata": meta,
        "spec": {"nodeName": node_name, **pod_spec(requests)},
        "status": {
            "phase": phase,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if (phase == "Running" and ready is not False) else "False",
                }
            ],
        },
    }
    return msgspec.convert(raw, Pod)


def job(
    name: str,
    requests: dict[str, Any],
    *,
    namespace: str = "default",
    parallelism: int | None = 1,
    completions: int | None = None,
    suspend: bool = True,
    created: str = "2026-01-01T00:00:00Z",
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    conditions: list[dict[str, str]] | None = None,
    succeeded: int = 0,
    resource_version: str = "1",
    **spec_kw: Any,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"suspend": suspend, "template": {"spec": pod_spec(requests, **spec_kw)}}
    if parallelism is not None:
        spec["parallelism"] = parallelism
    if completions is not None:
        spec["completions"] = completions
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
            "resourceVersion": resource_version,
            "creationTimestamp": created,
            "annotations": annotations or {},
            "labels": labels or {},
        },
        "spec": spec,
        "status": {"conditions": conditions or [], "succeeded": succeeded},
    }
