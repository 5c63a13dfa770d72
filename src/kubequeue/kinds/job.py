"""batch/v1 Job: held by ``spec.suspend`` (Kubernetes >= 1.22), admitted by setting it false."""

from __future__ import annotations

from typing import Any

from kubequeue.demand import DemandError, PodSet, pod_set_from_template
from kubequeue.identity import KindInfo
from kubequeue.kinds.common import (
    controller_owner,
    dig,
    has_true_condition,
    labels_of,
    opted_out,
)
from kubequeue.kinds.protocol import Obj, PodOwnership
from kubequeue.objects import Pod

__all__ = ["JobKind"]

# Parents that suspend their child Jobs themselves; queueing the child would fight the parent.
_MANAGED_BY_PARENT = "owned by {kind} {name}, which manages its suspension"
_KUEUE_LABEL = "kueue.x-k8s.io/queue-name"


class JobKind:
    info = KindInfo(name="job", kind="Job", group="batch", version="v1", plural="jobs")

    def is_suspended(self, obj: Obj) -> bool:
        return dig(obj, "spec", "suspend") is True

    def is_finished(self, obj: Obj) -> bool:
        return has_true_condition(obj, "Complete", "Failed")

    def pod_sets(self, obj: Obj) -> list[PodSet]:
        spec = dig(obj, "spec") or {}
        parallelism = spec.get("parallelism", 1)
        completions = spec.get("completions")
        if isinstance(parallelism, bool) or not isinstance(parallelism, int) or parallelism < 0:
            raise DemandError(f"spec.parallelism {parallelism!r} is not a non-negative integer")
        count = parallelism
        if isinstance(completions, int) and not isinstance(completions, bool):
            # Pods still to run: a Job never runs more pods at once than completions remain.
            succeeded = dig(obj, "status", "succeeded") or 0
            count = max(0, min(parallelism, completions - int(succeeded)))
        return [pod_set_from_template("main", count, spec.get("template"), "spec.template")]

    def priority_class_name(self, obj: Obj) -> str | None:
        found = dig(obj, "spec", "template", "spec", "priorityClassName")
        return found if isinstance(found, str) and found else None

    def admission_patch(self, obj: Obj) -> dict[str, Any]:
        return {"spec": {"suspend": False}}

    def pod_owner(self, pod: Pod) -> PodOwnership | None:
        for ref in pod.metadata.ownerReferences:
            if ref.controller and ref.kind == "Job":
                return ref.name, None
        return None

    def skip_reason(self, obj: Obj) -> str | None:
        owner = controller_owner(obj)
        if owner is not None and owner.get("kind") != "CronJob":
            return _MANAGED_BY_PARENT.format(kind=owner.get("kind"), name=owner.get("name"))
        if _KUEUE_LABEL in labels_of(obj):
            return f"label {_KUEUE_LABEL} is set: Kueue manages this job"
        return opted_out(obj)
