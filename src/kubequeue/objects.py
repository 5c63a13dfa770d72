"""Typed views of the only API fields kube-queue reads from Nodes and Pods.

Decoding watch events straight into these msgspec Structs skips every field the decisions do not
need; on this project's 2-core machines that is ~7x faster than building dicts and ~5x smaller
per cached Pod (docs/design.md). Unknown fields are ignored, missing ones take defaults, so a
newer API server cannot break decoding.

Job kinds are decoded to plain dicts instead: there are few of them, each kind has its own shape,
and adapters read them with explicit paths (see kubequeue.kinds).
"""

from __future__ import annotations

from typing import Generic, TypeVar

import msgspec

__all__ = [
    "Container",
    "ListMeta",
    "Namespace",
    "Node",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "ObjectList",
    "ObjectMeta",
    "OwnerReference",
    "Pod",
    "PodCondition",
    "PodDiagnosis",
    "PodSchedulingGate",
    "PodSpec",
    "PodTemplateSpec",
    "Quantities",
    "Taint",
    "TemplateMeta",
    "Toleration",
    "WatchEvent",
]

Quantities = dict[str, str | int | float]


class OwnerReference(msgspec.Struct, frozen=True):
    kind: str = ""
    name: str = ""
    uid: str = ""
    controller: bool = False


class ObjectMeta(msgspec.Struct):
    name: str = ""
    namespace: str = ""
    uid: str = ""
    resourceVersion: str = ""
    labels: dict[str, str] = {}
    ownerReferences: list[OwnerReference] = []
    deletionTimestamp: str | None = None


class ResourceRequirements(msgspec.Struct):
    requests: Quantities = {}
    limits: Quantities = {}


class Container(msgspec.Struct):
    name: str = ""
    resources: ResourceRequirements = msgspec.field(default_factory=ResourceRequirements)
    # "Always" on an init container makes it a sidecar that keeps running beside the app.
    restartPolicy: str | None = None


class NodeSelectorRequirement(msgspec.Struct):
    key: str = ""
    operator: str = ""
    values: list[str] = []


class NodeSelectorTerm(msgspec.Struct):
    matchExpressions: list[NodeSelectorRequirement] = []
    matchFields: list[NodeSelectorRequirement] = []


class NodeSelector(msgspec.Struct):
    nodeSelectorTerms: list[NodeSelectorTerm] = []


class NodeAffinity(msgspec.Struct):
    requiredDuringSchedulingIgnoredDuringExecution: NodeSelector | None = None


class Affinity(msgspec.Struct):
    nodeAffinity: NodeAffinity | None = None


class Toleration(msgspec.Struct, frozen=True):
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""


class PodSchedulingGate(msgspec.Struct, frozen=True):
    name: str = ""


class PodSpec(msgspec.Struct):
    """The part of a pod spec that decides its size and where it may run."""

    nodeName: str = ""
    # While any gate is left the scheduler does not consider the pod (pinning: capacity/pins.py).
    schedulingGates: list[PodSchedulingGate] = []
    containers: list[Container] = []
    initContainers: list[Container] = []
    overhead: Quantities = {}
    nodeSelector: dict[str, str] = {}
    tolerations: list[Toleration] = []
    affinity: Affinity | None = None
    priorityClassName: str = ""
    priority: int | None = None


class PodCondition(msgspec.Struct):
    type: str = ""
    status: str = ""


class PodStatus(msgspec.Struct):
    phase: str = ""
    # Ready tells whether an admitted job's pods really started (requeue of jobs that never do).
    conditions: list[PodCondition] = []

    @property
    def started(self) -> bool:
        """Running and Ready (Ready follows the readiness probe where a container has one, and
        is simply "all containers running" where none has)."""
        if self.phase != "Running":
            return False
        for condition in self.conditions:
            if condition.type == "Ready":
                return condition.status == "True"
        return False


class Pod(msgspec.Struct):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PodSpec = msgspec.field(default_factory=PodSpec)
    status: PodStatus = msgspec.field(default_factory=PodStatus)


class TemplateMeta(msgspec.Struct):
    """A pod template's metadata: its annotations may ask for a topology (capacity/topology.py).
    (Pods themselves are decoded without annotations: there are many of them.)"""

    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}


class PodTemplateSpec(msgspec.Struct):
    metadata: TemplateMeta = msgspec.field(default_factory=TemplateMeta)
    spec: PodSpec = msgspec.field(default_factory=PodSpec)


class Taint(msgspec.Struct, frozen=True):
    key: str = ""
    value: str = ""
    effect: str = ""


class NodeCondition(msgspec.Struct):
    type: str = ""
    status: str = ""


class NodeSpec(msgspec.Struct):
    unschedulable: bool = False
    taints: list[Taint] = []


class NodeStatus(msgspec.Struct):
    allocatable: Quantities = {}
    capacity: Quantities = {}
    conditions: list[NodeCondition] = []


class Node(msgspec.Struct):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: NodeSpec = msgspec.field(default_factory=NodeSpec)
    status: NodeStatus = msgspec.field(default_factory=NodeStatus)


class Namespace(msgspec.Struct):
    """Only its labels matter (Queue namespaceSelectors)."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)


class WatchEvent(msgspec.Struct):
    """One line of a watch stream; ``object`` stays raw until its type is known."""

    type: str
    object: msgspec.Raw = msgspec.Raw(b"{}")


class ListMeta(msgspec.Struct):
    resourceVersion: str = ""
    # "continue" is a Python keyword; the wire name is mapped explicitly.
    continue_: str = msgspec.field(default="", name="continue")


T = TypeVar("T")


class ObjectList(msgspec.Struct, Generic[T]):
    metadata: ListMeta = msgspec.field(default_factory=ListMeta)
    items: list[T] = []


class _DiagnosisCondition(msgspec.Struct):
    type: str = ""
    status: str = ""
    reason: str = ""
    message: str = ""


class _Waiting(msgspec.Struct):
    reason: str = ""
    message: str = ""


class _ContainerState(msgspec.Struct):
    waiting: _Waiting | None = None


class _ContainerStatus(msgspec.Struct):
    name: str = ""
    state: _ContainerState = msgspec.field(default_factory=_ContainerState)


class _DiagnosisStatus(msgspec.Struct):
    phase: str = ""
    conditions: list[_DiagnosisCondition] = []
    containerStatuses: list[_ContainerStatus] = []


class PodDiagnosis(msgspec.Struct):
    """A pod read once to tell a user why it is not running (never on the watch hot path)."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PodSpec = msgspec.field(default_factory=PodSpec)
    status: _DiagnosisStatus = msgspec.field(default_factory=_DiagnosisStatus)

    def why_not_running(self) -> str:
        """ "" when Running and Ready, else "<Reason>: <detail>" from its own conditions."""
        status = self.status
        ready = next((c for c in status.conditions if c.type == "Ready"), None)
        if status.phase == "Running" and ready is not None and ready.status == "True":
            return ""
        for c in status.conditions:
            if c.type == "PodScheduled" and c.status == "False":
                return f"{c.reason or 'Unschedulable'}: {c.message[:160]}"
        for cs in status.containerStatuses:
            waiting = cs.state.waiting
            if waiting is not None and waiting.reason:
                return f"{waiting.reason}: {waiting.message[:160]}".rstrip(": ")
        if status.phase == "Running":
            return "NotReady: running but not ready (readiness probe)"
        return f"{status.phase or 'Pending'}: not running yet"
