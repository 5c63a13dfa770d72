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
    "PodSpec",
    "PodTemplateSpec",
    "Quantities",
    "Taint",
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


class PodSpec(msgspec.Struct):
    """The part of a pod spec that decides its size and where it may run."""

    nodeName: str = ""
    containers: list[Container] = []
    initContainers: list[Container] = []
    overhead: Quantities = {}
    nodeSelector: dict[str, str] = {}
    tolerations: list[Toleration] = []
    affinity: Affinity | None = None
    priorityClassName: str = ""
    priority: int | None = None


class PodStatus(msgspec.Struct):
    phase: str = ""


class Pod(msgspec.Struct):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PodSpec = msgspec.field(default_factory=PodSpec)
    status: PodStatus = msgspec.field(default_factory=PodStatus)


class PodTemplateSpec(msgspec.Struct):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
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
