"""Pods read on demand (not watched): a namespace's pods, to tell a user why a job's pods never
started (bounded: at most ``limit`` pods are read); and the one write kube-queue makes to pods:
removing its scheduling gate, with the node the plan chose added to the nodeSelector."""

from __future__ import annotations

import msgspec

from kubequeue.kube.client import KubeClient
from kubequeue.labels import HOSTNAME, PLACEMENT_GATE, PLACEMENT_LABEL
from kubequeue.objects import ObjectList, PodDiagnosis
from kubequeue.precondition import JsonPatch, escape

__all__ = ["list_pods", "ungate", "ungate_ops"]


_decoder = msgspec.json.Decoder(ObjectList[PodDiagnosis])


async def list_pods(client: KubeClient, namespace: str, limit: int = 2000) -> list[PodDiagnosis]:
    out: list[PodDiagnosis] = []
    token = ""
    while len(out) < limit:
        query = [("limit", str(min(500, limit - len(out))))]
        if token:
            query.append(("continue", token))
        page = _decoder.decode(
            await client.request("GET", f"/api/v1/namespaces/{namespace}/pods", query=query)
        )
        out.extend(page.items)
        token = page.metadata.continue_
        if not token:
            break
    return out


def ungate_ops(
    uid: str,
    gates: tuple[str, ...],
    host: str | None,
    has_selector: bool,
    has_labels: bool,
) -> JsonPatch:
    """Remove our gate (tested: the pod and its gates are as we saw them, so another
    controller's gate removed meanwhile is not put back) and, with ``host``, pin the pod to that
    node. A gated pod's nodeSelector may only gain keys (Kubernetes >= 1.27): an add, never a
    change."""
    ops: JsonPatch = [
        {"op": "test", "path": "/metadata/uid", "value": uid},
        {"op": "test", "path": "/spec/schedulingGates", "value": [{"name": g} for g in gates]},
    ]
    rest = [{"name": g} for g in gates if g != PLACEMENT_GATE]
    if rest:
        ops.append({"op": "replace", "path": "/spec/schedulingGates", "value": rest})
    else:
        ops.append({"op": "remove", "path": "/spec/schedulingGates"})
    # What became of it; the label stays, so a restarted controller still sees a pinned pod
    # that has not bound yet (its slot is taken). ("add" sets it whether the webhook's label is
    # there or not: a pod gated by hand has none, and no labels map is assumed either way.)
    label = f"/metadata/labels/{escape(PLACEMENT_LABEL)}"
    if has_labels:
        ops.append({"op": "add", "path": label, "value": "pinned" if host else "unpinned"})
    else:
        ops.append(
            {
                "op": "add",
                "path": "/metadata/labels",
                "value": {PLACEMENT_LABEL: "pinned" if host else "unpinned"},
            }
        )
    if host is not None:
        if has_selector:
            path = f"/spec/nodeSelector/{escape(HOSTNAME)}"
            ops.append({"op": "add", "path": path, "value": host})
        else:
            ops.append({"op": "add", "path": "/spec/nodeSelector", "value": {HOSTNAME: host}})
    return ops


async def ungate(
    client: KubeClient,
    namespace: str,
    name: str,
    uid: str,
    gates: tuple[str, ...],
    host: str | None,
    has_selector: bool,
    has_labels: bool,
) -> None:
    """Raises ApiError (``conflict``: the pod is not as it was seen; ``not_found``: gone)."""
    ops = ungate_ops(uid, gates, host, has_selector, has_labels)
    await client.json_patch(f"/api/v1/namespaces/{namespace}/pods/{name}", ops, answer=False)
