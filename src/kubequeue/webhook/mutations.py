"""What the mutating admission webhook changes on CREATE, as JSON patches. Pure functions.

Two jobs, both about making queueing safe rather than merely possible:

- ``native_suspend``: the ``scheduling.x-k8s.io/suspend: "true"`` annotation only works with
  operator builds that know it. An upstream operator would start the job at once. So on create
  the annotation is mirrored into the kind's own suspend field (``runPolicy.suspend`` for
  Kubeflow kinds, ``spec.suspend`` for RayJob and SparkApplication), which every recent operator
  honours. kube-queue's admission clears both.
- ``auto_queue``: in namespaces labelled ``kube-queue.io/managed=true`` (the webhook
  configuration's namespaceSelector) every new job is created held, without the user writing
  anything. Jobs that opt out (``kube-queue.io/ignore: "true"``), Jobs owned by another
  controller (a JobSet, an operator: the parent is what gets queued) and Argo Workflows (their
  demand must be declared by the user) are left alone.

And one about making the plan binding:

- ``pod_gate``: a new pod of a queued kind (the webhook configuration's objectSelectors name
  each kind's pod label) gets the scheduling gate ``kube-queue.io/placement``; kube-queue pins
  it to the node its job's plan held room on, then removes the gate (capacity/pins.py). When
  the replica answering leads (it knows the plan) and the job holds a slot for the pod, it adds
  the node to the nodeSelector right away instead, and no gate: no PATCH, no second round. Pods
  with no controller (nothing queued them), pods already bound (``nodeName``: the API server
  refuses gates on them) and pods that carry the gate already are left alone. Stateless on
  purpose: every replica answers the same, leader or not, and a pod of a job kube-queue does
  not admit is simply ungated again by the leader.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kubequeue.kinds.common import (
    annotations_of,
    controller_owner,
    dig,
    labels_of,
)
from kubequeue.labels import (
    HOSTNAME,
    IGNORE,
    PLACEMENT_GATE,
    PLACEMENT_LABEL,
    SUSPEND_ANNOTATION,
)
from kubequeue.precondition import JsonPatch, merge_ops

__all__ = ["JsonPatch", "auto_queue", "native_suspend", "pod_gate"]

_KUBEFLOW = frozenset({"TFJob", "PyTorchJob", "MPIJob"})
_SPEC_SUSPEND = frozenset({"RayJob", "SparkApplication"})


def _set(obj: dict[str, Any], path: tuple[str, ...], value: Any) -> JsonPatch:
    """JSON-patch ops that set obj[path] = value, creating missing parents (as the merge patch
    {path: value} would: precondition.merge_ops)."""
    nested: Any = value
    for step in reversed(path):
        nested = {step: nested}
    return merge_ops(obj, nested)


def _suspend_field(kind: str) -> tuple[str, ...] | None:
    if kind in _KUBEFLOW:
        return ("spec", "runPolicy", "suspend")
    if kind in _SPEC_SUSPEND or kind == "Job":
        return ("spec", "suspend")
    return None


def native_suspend(kind: str, obj: dict[str, Any]) -> JsonPatch:
    """Mirror the suspend annotation into the kind's native field (no-op if already held)."""
    if annotations_of(obj).get(SUSPEND_ANNOTATION) != "true":
        return []
    field = _suspend_field(kind)
    if field is None or kind == "Job" or dig(obj, *field) is True:
        return []
    return _set(obj, field, True)


def auto_queue(kind: str, obj: dict[str, Any]) -> JsonPatch:
    """Create the job held, for kube-queue to admit (managed namespaces only)."""
    if annotations_of(obj).get(IGNORE) == "true" or labels_of(obj).get(IGNORE) == "true":
        return []
    owner = controller_owner(obj)
    if owner is not None and owner.get("kind") != "CronJob":
        return []
    field = _suspend_field(kind)
    if field is None:
        return []
    ops: JsonPatch = []
    if dig(obj, *field) is not True:
        ops += _set(obj, field, True)
    # The annotation too: operator builds that only know the annotation still hold it. (A
    # metadata that is not an object is left for the API server to reject: replacing it would
    # drop the name.)
    if (kind in _KUBEFLOW or kind == "SparkApplication") and isinstance(obj.get("metadata"), dict):
        ops += _set(obj, ("metadata", "annotations", SUSPEND_ANNOTATION), "true")
    return ops


def pod_gate(
    kind: str, obj: dict[str, Any], pin: Callable[[dict[str, Any]], str | None] | None = None
) -> JsonPatch:
    """Hold a new pod of a queued kind for pinning (no-op for pods it does not apply to): the
    gate, and the label kube-queue's watch of gated pods selects on. With ``pin`` (the leader
    answering, which knows the plan): the node at once when ``pin`` names one, no gate."""
    spec = obj.get("spec")
    meta = obj.get("metadata")
    if kind != "Pod" or not isinstance(spec, dict) or not isinstance(meta, dict):
        return []
    if spec.get("nodeName") or controller_owner(obj) is None:
        return []
    host = pin(obj) if pin is not None else None
    if host is not None:
        return _set(obj, ("spec", "nodeSelector", HOSTNAME), host) + _set(
            obj, ("metadata", "labels", PLACEMENT_LABEL), "pinned"
        )
    gates = spec.get("schedulingGates")
    gate = {"name": PLACEMENT_GATE}
    ops: JsonPatch
    if gates is None:
        ops = [{"op": "add", "path": "/spec/schedulingGates", "value": [gate]}]
    elif not isinstance(gates, list) or any(
        isinstance(g, dict) and g.get("name") == PLACEMENT_GATE for g in gates
    ):
        return []  # malformed (the API server refuses it) or gated by us already
    else:
        ops = [{"op": "add", "path": "/spec/schedulingGates/-", "value": gate}]
    return ops + _set(obj, ("metadata", "labels", PLACEMENT_LABEL), "gated")
