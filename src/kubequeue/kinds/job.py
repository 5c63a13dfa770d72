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


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _wanted_active(parallelism: int, completions: Any, obj: Obj) -> int:
    """Pods the Job controller keeps running at once right now (its ``manageJob`` rule):

    - with ``completions``: never more than the completions still missing;
    - without (a work queue): ``parallelism`` until the first pod succeeds; after that it
      creates no new pods and lets the active ones finish, so only those still count.
    """
    raw_succeeded = dig(obj, "status", "succeeded")
    succeeded: int = raw_succeeded if _count(raw_succeeded) else 0
    if _count(completions):
        return max(0, min(parallelism, int(completions) - succeeded))
    if succeeded > 0:
        active = dig(obj, "status", "active")
        return min(parallelism, int(active)) if _count(active) else 0
    return parallelism


class JobKind:
    info = KindInfo(name="job", kind="Job", group="batch", version="v1", plural="jobs")

    def is_suspended(self, obj: Obj) -> bool:
        return dig(obj, "spec", "suspend") is True

    def is_finished(self, obj: Obj) -> bool:
        return has_true_condition(obj, "Complete", "Failed")

    def pod_sets(self, obj: Obj) -> list[PodSet]:
        spec = dig(obj, "spec")
        if not isinstance(spec, dict):
            raise DemandError("spec is missing")
        parallelism = spec.get("parallelism", 1)
        if not _count(parallelism):
            raise DemandError(f"spec.parallelism {parallelism!r} is not a non-negative integer")
        count = _wanted_active(parallelism, spec.get("completions"), obj)
        return [pod_set_from_template("main", count, spec.get("template"), "spec.template")]

    def priority_class_name(self, obj: Obj) -> str | None:
        found = dig(obj, "spec", "template", "spec", "priorityClassName")
        return found if isinstance(found, str) and found else None

    def admission_patch(self, obj: Obj) -> dict[str, Any]:
        return {"spec": {"suspend": False}}

    def preemption_patch(self, obj: Obj) -> dict[str, Any] | None:
        # The Job controller deletes the active pods of a suspended Job and keeps its progress.
        return {"spec": {"suspend": True}}

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
