"""What every node has free right now, kept current from the Node and Pod watches.

free(node) = allocatable - requests of every non-terminal pod bound to it (ours or anyone's)
             - reservations of admitted jobs whose pods are not bound yet.

Nodes that are NotReady, cordoned (spec.unschedulable) or not yet seen take no new pods. A pod may
arrive before its node (watch order is per resource); it is charged to a placeholder that becomes
real when the Node arrives, so no usage is ever lost to ordering.

Two counters let the admission loop skip work: ``freed_generation`` moves whenever some node gains
free capacity (only then can a job that did not fit start to fit), ``nodes_generation`` whenever
node labels, taints, schedulability or allocatable change (only then do memoised feasible-node sets
and "can never fit" verdicts go stale).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

import structlog

from kubequeue import resources
from kubequeue.capacity.index import FreeIndex
from kubequeue.demand import DemandError, parse_resource_map, pod_request
from kubequeue.objects import Node, Pod, Taint
from kubequeue.resources import Resources
from kubequeue.scheduling import NodeConstraints

__all__ = ["CapacityCache", "JobKey", "NodeState", "PodOwner"]

log = structlog.get_logger(__name__)

JobKey = tuple[str, str, str]  # (kind, namespace, name)
PodOwner = tuple[JobKey, str | None]  # (job, pod set name if the pod's labels say it)

_TERMINAL = frozenset({"Succeeded", "Failed"})


@dataclass(slots=True)
class NodeState:
    name: str
    allocatable: Resources = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    ready: bool = False
    unschedulable: bool = False
    known: bool = False  # False: a placeholder made by a pod that arrived before its Node
    used: Resources = field(default_factory=dict)
    reserved: Resources = field(default_factory=dict)
    free: Resources = field(default_factory=dict)

    @property
    def schedulable(self) -> bool:
        return self.known and self.ready and not self.unschedulable

    def recompute_free(self) -> None:
        free = dict(self.allocatable)
        resources.sub_into(free, self.used)
        resources.sub_into(free, self.reserved)
        self.free = free


@dataclass(slots=True)
class _PodUsage:
    node: str
    request: Resources
    owner: PodOwner | None


class CapacityCache:
    """Per-node free capacity with an index for fast candidate search. Not thread-safe by design:
    everything runs on one event loop and no method awaits."""

    def __init__(self, on_freed: Callable[[], None] | None = None) -> None:
        self.nodes: dict[str, NodeState] = {}
        self._pods: dict[str, _PodUsage] = {}
        self._index = FreeIndex()
        self._feasible: dict[NodeConstraints, frozenset[str]] = {}
        self._bound: dict[JobKey, Counter[str | None]] = {}
        self._on_freed = on_freed
        self.freed_generation = 0
        self.nodes_generation = 0

    # ----------------------------------------------------------------- sizes, for metrics
    @property
    def pod_count(self) -> int:
        return len(self._pods)

    # ----------------------------------------------------------------- nodes
    def upsert_node(self, node: Node) -> None:
        name = node.metadata.name
        try:
            allocatable = parse_resource_map(node.status.allocatable, f"node {name} allocatable")
        except DemandError as exc:
            log.warning("node.bad_allocatable", node=name, error=str(exc))
            allocatable = {}
        ready = any(c.type == "Ready" and c.status == "True" for c in node.status.conditions)
        taints = tuple(node.spec.taints)
        labels = node.metadata.labels
        state = self.nodes.get(name)
        if state is None:
            state = NodeState(name=name)
            self.nodes[name] = state
        changed = (
            not state.known
            or state.allocatable != allocatable
            or state.ready != ready
            or state.unschedulable != node.spec.unschedulable
            or state.taints != taints
            or state.labels != labels
        )
        if not changed:
            return  # a heartbeat: nothing a decision depends on moved
        state.known = True
        state.allocatable = resources.intern(allocatable)
        state.ready = ready
        state.unschedulable = node.spec.unschedulable
        state.taints = taints
        state.labels = labels
        state.recompute_free()
        self._node_changed(state)
        self.nodes_generation += 1
        self._feasible.clear()
        self._freed()

    def delete_node(self, name: str) -> None:
        state = self.nodes.get(name)
        if state is None:
            return
        self._index.remove(name)
        self._feasible.clear()
        self.nodes_generation += 1
        if self._pods_on(name) or state.reserved:
            # Pods still reference it (they will be deleted by the pod GC); keep the usage.
            state.known = False
        else:
            del self.nodes[name]

    def _pods_on(self, name: str) -> bool:
        return any(p.node == name for p in self._pods.values())

    def _node_changed(self, state: NodeState) -> None:
        if state.schedulable:
            self._index.update(state.name, state.free)
        else:
            self._index.remove(state.name)

    def _freed(self) -> None:
        self.freed_generation += 1
        if self._on_freed is not None:
            self._on_freed()

    # ----------------------------------------------------------------- pods
    def upsert_pod(self, pod: Pod, owner: PodOwner | None) -> JobKey | None:
        """Account a pod. Returns the job whose bound-pod count changed, if any."""
        uid = pod.metadata.uid
        node = pod.spec.nodeName
        if not node or pod.status.phase in _TERMINAL:
            return self.delete_pod(uid)
        current = self._pods.get(uid)
        try:
            request = pod_request(pod.spec, f"pod {pod.metadata.namespace}/{pod.metadata.name}")
        except DemandError as exc:
            # The API server validated this pod; if we cannot read it, count what we can: the slot.
            log.warning("pod.bad_request", error=str(exc))
            request = resources.intern({resources.PODS: 1000})
        if current is not None:
            if current.node == node and current.request is request and current.owner == owner:
                return None
            self.delete_pod(uid)
        self._pods[uid] = _PodUsage(node=node, request=request, owner=owner)
        state = self.nodes.get(node)
        if state is None:
            state = NodeState(name=node)
            self.nodes[node] = state
        resources.add_into(state.used, request)
        resources.sub_into(state.free, request)
        self._node_changed(state)
        if owner is not None:
            self._bound.setdefault(owner[0], Counter())[owner[1]] += 1
            return owner[0]
        return None

    def delete_pod(self, uid: str) -> JobKey | None:
        usage = self._pods.pop(uid, None)
        if usage is None:
            return None
        state = self.nodes.get(usage.node)
        if state is not None:
            resources.sub_into(state.used, usage.request)
            resources.add_into(state.free, usage.request)
            if not state.known and not state.reserved and not self._pods_on(state.name):
                del self.nodes[state.name]
            else:
                self._node_changed(state)
        self._freed()
        if usage.owner is None:
            return None
        job, pod_set = usage.owner
        counts = self._bound.get(job)
        if counts is not None:
            counts[pod_set] -= 1
            if counts[pod_set] <= 0:
                del counts[pod_set]
            if not counts:
                del self._bound[job]
        return job

    def bound_pods(self, job: JobKey) -> Counter[str | None]:
        """Running (bound, non-terminal) pods of ``job``, by pod set name (None: unlabelled)."""
        return self._bound.get(job, Counter())

    # ----------------------------------------------------------------- reservations
    def reserve(self, node: str, request: Mapping[str, int], count: int) -> None:
        state = self.nodes.get(node)
        if state is None:
            state = NodeState(name=node)
            self.nodes[node] = state
        resources.add_into(state.reserved, request, count)
        resources.sub_into(state.free, request, count)
        self._node_changed(state)

    def unreserve(self, node: str, request: Mapping[str, int], count: int) -> None:
        state = self.nodes.get(node)
        if state is None:
            return
        resources.sub_into(state.reserved, request, count)
        resources.add_into(state.free, request, count)
        if not state.known and not any(state.reserved.values()) and not self._pods_on(node):
            del self.nodes[node]
        else:
            self._node_changed(state)
        self._freed()

    # ----------------------------------------------------------------- queries
    def free(self, node: str) -> Resources:
        return self.nodes[node].free

    def candidates(self, request: Mapping[str, int]) -> Iterator[str]:
        return self._index.candidates(request)

    def schedulable_nodes(self) -> Iterator[NodeState]:
        return (n for n in self.nodes.values() if n.schedulable)

    def feasible(self, constraints: NodeConstraints) -> frozenset[str]:
        """Schedulable nodes these constraints allow (memoised until nodes change)."""
        found = self._feasible.get(constraints)
        if found is None:
            found = frozenset(
                n.name
                for n in self.nodes.values()
                if n.schedulable and constraints.allows(n.name, n.labels, n.taints)
            )
            self._feasible[constraints] = found
        return found
