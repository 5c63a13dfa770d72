"""Shared shape of the Kubeflow kinds (TFJob, PyTorchJob, MPIJob): replica specs + runPolicy.

Held by ``runPolicy.suspend: true`` (training-operator >= 1.7, mpi-operator v2) or by the
``scheduling.x-k8s.io/suspend: "true"`` annotation (operator builds that honour it; kube-queue's
webhook turns the annotation into runPolicy.suspend for those that do not). Admission clears
whichever of the two holds the job, and nothing else.

Demand: every replica type, ``replicas`` (default 1) pods of its template.
"""

from __future__ import annotations

from typing import Any

from kubequeue.demand import DemandError, PodSet, pod_set_from_template
from kubequeue.identity import KindInfo
from kubequeue.kinds.common import (
    annotations_of,
    dig,
    has_true_condition,
    labels_of,
    opted_out,
)
from kubequeue.kinds.protocol import Obj, PodOwnership
from kubequeue.labels import SUSPEND_ANNOTATION
from kubequeue.objects import Pod

__all__ = ["REPLICA_TYPE_LABEL", "ReplicaSpecKind"]

REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
_KUEUE_LABEL = "kueue.x-k8s.io/queue-name"


class ReplicaSpecKind:
    """Base for kinds whose spec holds ``<field>: {ReplicaType: {replicas, template}}``."""

    info: KindInfo
    replica_field: str

    def is_suspended(self, obj: Obj) -> bool:
        return (
            annotations_of(obj).get(SUSPEND_ANNOTATION) == "true"
            or dig(obj, "spec", "runPolicy", "suspend") is True
        )

    def is_finished(self, obj: Obj) -> bool:
        return has_true_condition(obj, "Succeeded", "Failed")

    def replica_count(self, replica_type: str, replica_spec: dict[str, Any], obj: Obj) -> Any:
        return replica_spec.get("replicas", 1)

    def pod_sets(self, obj: Obj) -> list[PodSet]:
        specs = dig(obj, "spec", self.replica_field)
        if not isinstance(specs, dict) or not specs:
            raise DemandError(f"spec.{self.replica_field} is missing or empty")
        out = []
        for replica_type, replica_spec in sorted(specs.items()):
            where = f"spec.{self.replica_field}.{replica_type}"
            if not isinstance(replica_spec, dict):
                raise DemandError(f"{where} is not an object")
            count = self.replica_count(replica_type, replica_spec, obj)
            out.append(
                pod_set_from_template(
                    replica_type.lower(), count, replica_spec.get("template"), where
                )
            )
        return out

    def priority_class_name(self, obj: Obj) -> str | None:
        found = dig(obj, "spec", "runPolicy", "schedulingPolicy", "priorityClass")
        if isinstance(found, str) and found:
            return found
        specs = dig(obj, "spec", self.replica_field)
        if isinstance(specs, dict):
            for _, replica_spec in sorted(specs.items()):
                name = dig(replica_spec, "template", "spec", "priorityClassName")
                if isinstance(name, str) and name:
                    return name
        return None

    def admission_patch(self, obj: Obj) -> dict[str, Any]:
        patch: dict[str, Any] = {}
        if SUSPEND_ANNOTATION in annotations_of(obj):
            patch["metadata"] = {"annotations": {SUSPEND_ANNOTATION: "false"}}
        if dig(obj, "spec", "runPolicy", "suspend") is True:
            patch["spec"] = {"runPolicy": {"suspend": False}}
        return patch

    def preemption_patch(self, obj: Obj) -> dict[str, Any] | None:
        """runPolicy.suspend (the operator deletes the pods), and the annotation too where the
        job uses it, so operator builds that watch only the annotation stop as well."""
        patch: dict[str, Any] = {"spec": {"runPolicy": {"suspend": True}}}
        if SUSPEND_ANNOTATION in annotations_of(obj):
            patch["metadata"] = {"annotations": {SUSPEND_ANNOTATION: "true"}}
        return patch

    def pod_owner(self, pod: Pod) -> PodOwnership | None:
        for ref in pod.metadata.ownerReferences:
            if ref.controller and ref.kind == self.info.kind:
                replica_type = pod.metadata.labels.get(REPLICA_TYPE_LABEL)
                return ref.name, replica_type.lower() if replica_type else None
        return None

    def skip_reason(self, obj: Obj) -> str | None:
        if _KUEUE_LABEL in labels_of(obj):
            return f"label {_KUEUE_LABEL} is set: Kueue manages this job"
        return opted_out(obj)
