"""The contract every job kind implements, so the core never knows which kind it is queueing.

Like Kueue's jobframework GenericJob: a kind answers "is it held back", "is it done", "what does
it need", "how do I let it run", and "which pods are its". Everything else (queueing, fit,
reservations, events, restarts) is shared. Adapters read the raw object dict with explicit paths
and raise DemandError with a message a user can act on when the object is malformed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from kubequeue.demand import PodSet
from kubequeue.identity import KindInfo
from kubequeue.objects import Pod

__all__ = [
    "FollowsUp",
    "HasPodAliases",
    "JobAdapter",
    "KindInfo",
    "Obj",
    "PodAlias",
    "PodOwnership",
    "Preemptible",
]

Obj = Mapping[str, Any]
# (job name in the pod's namespace, pod set name when the pod's labels tell it)
PodOwnership = tuple[str, str | None]
# (kind, name, pod set): "pods that the <kind> adapter attributes to <name> belong to me"
PodAlias = tuple[str, str, str | None]


class JobAdapter(Protocol):
    """One job kind. Implementations are small modules in kubequeue.kinds, one per kind."""

    info: KindInfo

    def is_suspended(self, obj: Obj) -> bool:
        """Held back from running (waiting for kube-queue, or deliberately)."""
        ...

    def is_finished(self, obj: Obj) -> bool:
        """Done for good: its capacity will not be needed again."""
        ...

    def pod_sets(self, obj: Obj) -> list[PodSet]:
        """Pods the job runs at once, right now (status-aware once running). DemandError if bad."""
        ...

    def priority_class_name(self, obj: Obj) -> str | None: ...

    def admission_patch(self, obj: Obj) -> dict[str, Any]:
        """The merge patch that lets the job run (kube-queue adds its annotation and the
        resourceVersion precondition)."""
        ...

    def pod_owner(self, pod: Pod) -> PodOwnership | None:
        """Which job of this kind (in the pod's namespace) a pod belongs to, if any."""
        ...

    def skip_reason(self, obj: Obj) -> str | None:
        """Why kube-queue must leave this object alone (owned by a parent, opted out), or None."""
        ...


@runtime_checkable
class FollowsUp(Protocol):
    """Optional: a kind that needs one more write after admission, once the operator reacts
    (Argo: resume the kube-queue-suspend step). Judged on every observation of an admitted
    object, so it is level-triggered and survives restarts."""

    def follow_up_patch(self, obj: Obj) -> dict[str, Any] | None: ...


@runtime_checkable
class HasPodAliases(Protocol):
    """Optional: a kind whose pods carry a name only known from the job's status (KubeRay names
    the RayCluster, and so its pods' ray.io/cluster label, ``<rayjob>-<random>``, and runs the
    submitter as a batch Job named after the RayJob). Judged on every observation."""

    # Kinds its aliases may name (pods owned by objects of these kinds are remembered under
    # their owner even when no enabled adapter claims them).
    alias_kinds: tuple[str, ...]

    def pod_aliases(self, obj: Obj) -> list[PodAlias]: ...


@runtime_checkable
class Preemptible(Protocol):
    """Optional: a kind that can be stopped again after it started, by the same lever that holds
    it (its operator then deletes its pods and keeps the object). Kinds without it (Spark, Argo)
    are never preempted or requeued."""

    def preemption_patch(self, obj: Obj) -> dict[str, Any] | None:
        """The merge patch that suspends the running job (None: this one cannot be)."""
        ...
