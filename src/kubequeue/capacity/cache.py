"""What every node has free right now, kept current from the Node and Pod watches.

free(node) = allocatable - requests of every non-terminal pod bound to it (ours or anyone's)
             - reservations of admitted jobs whose pods are not bound yet.

Nodes that are NotReady, cordoned (spec.unschedulable) or not yet seen take no new pods. A pod may
arrive before its node (watch order is per resource); it is charged to a placeholder that becomes
real when the Node arrives, so no usage is ever lost to ordering.

Two counters let the admission loop skip work: ``freed_generation`` moves whenever some node gains
free capacity (only then can a job that did not fit start to fit), ``nodes_generation`` whenever
node labels, taints, schedulability or allocatable change (only then do memoised feasible-node sets
and "can never fit" verdicts go stale). ``freed_nodes_since`` tells which nodes gained capacity
after a given ``freed_generation``, so a job that did not fit is judged again only if one of those
nodes can take one of its pods: the cost of a cycle follows what changed, not the size of the
queue.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import cast

import msgspec
import structlog

from kubequeue import resources
from kubequeue.capacity.index import CPU_KEY_MAX, CPU_STEP, GPU_KEY_MAX, FreeIndex, bucket_of
from kubequeue.demand import DemandError, cached_pod_request, parse_resource_map, pod_request
from kubequeue.identity import JobKey, PodOwner
from kubequeue.labels import HOSTNAME
from kubequeue.objects import Node, Pod, Taint
from kubequeue.resources import GPU, Resources
from kubequeue.scheduling import HARD_EFFECTS, NodeConstraints, tolerates

__all__ = ["CapacityCache", "NodeState"]

log = structlog.get_logger(__name__)

_TERMINAL = frozenset({"Succeeded", "Failed"})
# A fit's walk and a count of copies (candidates, copies) pick the taint partitions a pod
# tolerates only while there are few partitions; a count scans the feasible nodes directly when
# there are at most this many.
_PARTITIONS_MAX = 32
_DIRECT_COUNT = 64


def _hard(taints: tuple[Taint, ...]) -> tuple[Taint, ...]:
    """The taints that keep a pod off a node unless tolerated: a node's partition."""
    return tuple(t for t in taints if t.effect in HARD_EFFECTS)


@dataclass(slots=True)
class NodeState:
    name: str
    allocatable: Resources = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    ready: bool = False
    unschedulable: bool = False
    known: bool = False  # False: a placeholder made by a pod that arrived before its Node
    reserved: Resources = field(default_factory=dict)
    # Kept equal to allocatable - used - reserved by every change (pod events touch only this
    # and ``pods``; ``used`` is derived when asked for).
    free: Resources = field(default_factory=dict)
    pods: int = 0  # pods charged to this node (so "does any pod use it" is O(1))
    # The free-capacity index bucket this node belongs in (None: not indexed, i.e. not
    # schedulable), and when that last changed (see CapacityCache._refresh_index).
    index_key: tuple[int, int] | None = None
    moved: int = 0

    @property
    def schedulable(self) -> bool:
        return self.known and self.ready and not self.unschedulable

    @property
    def used(self) -> Resources:
        """Requests of the pods charged to this node: allocatable - free - reserved."""
        used = dict(self.allocatable)
        resources.sub_into(used, self.free)
        resources.sub_into(used, self.reserved)
        return used

    def set_allocatable(self, allocatable: Resources) -> None:
        """New allocatable; free moves by the difference (used and reserved are unchanged)."""
        free = dict(self.free)
        resources.sub_into(free, self.allocatable)
        resources.add_into(free, allocatable)
        self.allocatable = allocatable
        self.free = free


class _PodUsage(msgspec.Struct, gc=False):
    """One accounted pod (one per running pod, so: C-level construction, and not tracked by the
    cyclic GC: it only refers to strings, an interned request and an owner tuple, no cycles)."""

    node: str
    request: Resources
    owner: PodOwner | None
    started: bool = False  # Running and Ready


class CapacityCache:
    """Per-node free capacity with an index for fast candidate search. Not thread-safe by design:
    everything runs on one event loop and no method awaits."""

    def __init__(self, on_freed: Callable[[], None] | None = None) -> None:
        self.nodes: dict[str, NodeState] = {}
        self._pods: dict[str, _PodUsage] = {}
        self._index = FreeIndex()
        # Nodes whose index bucket changed since the index was last brought up to date. The
        # index is read only through candidates() and most_free(), which apply these moves
        # first, so a burst of pod events costs at most one index update per node.
        self._stale: dict[str, int] = {}  # node -> its latest move's stamp (NodeState.moved)
        self._moves = 0
        self._feasible: dict[NodeConstraints, frozenset[str]] = {}
        # label key -> its values on schedulable nodes -> those nodes (capacity/topology.py)
        # The topology levels the cluster admin declared, coarsest first (--topology-levels): a
        # preferred topology falls back through the coarser ones (capacity/topology.py).
        self.topology_levels: tuple[str, ...] = ()
        self._domains: dict[str, dict[str, tuple[str, ...]]] = {}
        self._domain_free: dict[str, tuple[int, dict[str, tuple[int, int]]]] = {}
        # constraints -> (partition count when computed, the taint partitions they tolerate)
        self._tolerated: dict[NodeConstraints, tuple[int, list[Hashable]]] = {}
        self._groups: dict[NodeConstraints, list[tuple[Resources, int]]] = {}
        self._most: dict[tuple[NodeConstraints, str], tuple[int, int]] = {}
        # Moves whenever any node's free capacity or schedulability changes (memo validity).
        self.version = 0
        self._bound: dict[JobKey, Counter[str | None]] = {}
        self._owners: dict[PodOwner, PodOwner] = {}  # canonical owner tuples of bound pods
        # The bound pods of each (raw) owner, so a job's footprint per node is found without
        # scanning every pod (preemption asks for it).
        self._members: dict[JobKey, dict[str, None]] = {}
        self._started: dict[JobKey, int] = {}  # per raw owner: pods Running and Ready
        self._on_freed = on_freed
        self.freed_generation = 0
        self.nodes_generation = 0
        # Each node that gained capacity, with the freed_generation of its latest gain, in the
        # order of those gains: the distinct nodes freed since any generation, newest first,
        # in time linear in their number (freed_nodes_since).
        self._last_freed: dict[str, int] = {}
        # Likewise each node whose free capacity or state changed, with the version of its
        # latest change (touched_since): what a memo of a per-node verdict must look at again.
        self._touched: dict[str, int] = {}
        self._touched_floor = 0  # touched_since cannot answer for versions before this

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
        state.set_allocatable(resources.intern(allocatable))
        state.ready = ready
        state.unschedulable = node.spec.unschedulable
        if state.taints != taints:
            self._index.repartition(name, _hard(taints))
        state.taints = taints
        state.labels = labels
        self._node_changed(state)
        self.nodes_generation += 1
        self._feasible.clear()
        self._groups.clear()
        self._domains.clear()
        self._freed(name)

    def delete_node(self, name: str) -> None:
        state = self.nodes.get(name)
        if state is None:
            return
        self._index.remove(name)
        self._stale.pop(name, None)
        state.index_key = None
        self._feasible.clear()
        self._groups.clear()
        self._domains.clear()
        self.version += 1  # memos keyed on it (most_free) must not name this node again
        self._touch(name)
        self.nodes_generation += 1
        self._last_freed.pop(name, None)  # no room left to find there
        if state.pods or any(state.reserved.values()):
            # Pods still reference it (they will be deleted by the pod GC); keep the usage.
            state.known = False
        else:
            del self.nodes[name]
            self._forget_touched()

    def _node_changed(self, state: NodeState) -> None:
        self.version += 1
        self._touch(state.name)
        key = bucket_of(state.free) if state.schedulable else None
        if key != state.index_key:
            self._moved(state, key)

    def _moved(self, state: NodeState, key: tuple[int, int] | None) -> None:
        state.index_key = key
        self._moves += 1
        state.moved = self._moves
        self._stale[state.name] = self._moves

    def _refresh_index(self) -> None:
        """Apply the pending bucket moves in the order they happened: each moved node goes last
        in its bucket, exactly where moving it at once would have put it, so candidates come in
        the same order as with an index updated on every event."""
        nodes = self.nodes
        index = self._index
        stale = self._stale
        order: list[str] = list(stale)
        if len(order) > 1:
            # (Each node's latest stamp is its NodeState.moved; a node gone from ``nodes`` is
            # only removed, which moves no other node.)
            order.sort(key=stale.__getitem__)
        for name in order:
            state = nodes.get(name)
            key = state.index_key if state is not None else None
            if key is None or state is None:
                index.remove(name)
            else:
                # A node in the index is in the partition of its hard taints already (a taint
                # change repartitions it at once): only a node new to the index needs _hard.
                part = index.partition_of(name)
                index.place(name, key, _hard(state.taints) if part is None else part)
        stale.clear()

    def _freed(self, node: str) -> None:
        self.freed_generation += 1
        last = self._last_freed
        last.pop(node, None)
        last[node] = self.freed_generation
        if self._on_freed is not None:
            self._on_freed()

    def _touch(self, name: str) -> None:
        self._touched.pop(name, None)
        self._touched[name] = self.version

    def _forget_touched(self) -> None:
        """Nodes are gone for good: once their entries outnumber the nodes, drop them all
        (readers from before then get None and look at every node once)."""
        if len(self._touched) > 2 * len(self.nodes) + 1024:
            self._touched.clear()
            self._touched_floor = self.version

    def touched_since(self, version: int, limit: int) -> list[str] | None:
        """The distinct nodes whose free capacity or state changed after ``version``; None
        when there are more than ``limit`` or the record does not go back that far."""
        if version < self._touched_floor:
            return None
        return _newer_than(self._touched, version, limit)

    def freed_nodes_since(self, generation: int, limit: int) -> list[str] | None:
        """The distinct nodes that gained free capacity after ``freed_generation`` was
        ``generation``, newest first; None when there are more than ``limit``."""
        return _newer_than(self._last_freed, generation, limit)

    # ----------------------------------------------------------------- pods
    def upsert_pod(self, pod: Pod, owner: PodOwner | None) -> JobKey | None:
        """Account a pod. Returns the job whose bound or started pod count changed, if any."""
        # The watch hot path (one call per pod event): kept free of avoidable calls/allocations.
        uid = pod.metadata.uid
        spec = pod.spec
        node = spec.nodeName
        if not node or pod.status.phase in _TERMINAL:
            return self.delete_pod(uid)
        current = self._pods.get(uid)
        request = cached_pod_request(spec)
        if request is None:
            try:
                request = pod_request(spec, f"pod {pod.metadata.namespace}/{pod.metadata.name}")
            except DemandError as exc:
                # The API server validated this pod; if we cannot read it, count what we can: the
                # slot.
                log.warning("pod.bad_request", error=str(exc))
                request = resources.intern({resources.PODS: 1000})
        started = pod.status.started
        if current is not None:
            if current.node == node and current.request is request and current.owner == owner:
                if current.started == started or owner is None:
                    current.started = started
                    return None
                self._count_started(owner[0], 1 if started else -1)
                current.started = started
                return owner[0]  # its job's started-pod count changed
            self.delete_pod(uid)
        state = self.nodes.get(node)
        if state is None:
            state = NodeState(name=node)
            self.nodes[node] = state
        else:
            node = state.name  # one string per node, not one per pod
        if owner is not None:  # likewise one owner tuple per (job, pod set)
            owner = self._owners.setdefault(owner, owner)
        self._pods[uid] = _PodUsage(node, request, owner, started)
        free = state.free
        for name, amount in request.items():
            free[name] = free.get(name, 0) - amount
        state.pods += 1
        self.version += 1
        touched = self._touched  # _touch(node), inlined: this runs on every pod event
        touched.pop(node, None)
        touched[node] = self.version
        key = state.index_key
        if state.known and state.ready and not state.unschedulable:
            # bucket_of(free), inlined: this runs on every pod event
            gpu = free.get(GPU, 0)
            cpu = free.get("cpu", 0)
            g = 0 if gpu <= 0 else min(gpu // 1000, GPU_KEY_MAX)
            c = 0 if cpu <= 0 else min((cpu // CPU_STEP).bit_length(), CPU_KEY_MAX)
            if key is None or key[0] != g or key[1] != c:
                self._moved(state, (g, c))
        elif key is not None:
            self._moved(state, None)
        if owner is not None:
            job, pod_set = owner
            counts = self._bound.get(job)
            if counts is None:
                counts = self._bound[job] = Counter()
            counts[pod_set] += 1
            members = self._members.get(job)
            if members is None:
                members = self._members[job] = {}
            members[uid] = None
            if started:
                self._count_started(job, 1)
            return job
        return None

    def delete_pod(self, uid: str) -> JobKey | None:
        usage = self._pods.pop(uid, None)
        if usage is None:
            return None
        state = self.nodes.get(usage.node)
        if state is not None:
            resources.add_into(state.free, usage.request)
            state.pods -= 1
            if not state.known and not any(state.reserved.values()) and not state.pods:
                del self.nodes[state.name]
            else:
                self._node_changed(state)
        self._freed(usage.node)
        if usage.owner is None:
            return None
        job, pod_set = usage.owner
        counts = self._bound.get(job)
        if counts is not None:
            counts[pod_set] -= 1
            if counts[pod_set] <= 0:
                del counts[pod_set]
                self._owners.pop(usage.owner, None)
            if not counts:
                del self._bound[job]
        members = self._members.get(job)
        if members is not None:
            members.pop(uid, None)
            if not members:
                del self._members[job]
        if usage.started:
            self._count_started(job, -1)
        return job

    def _count_started(self, job: JobKey, delta: int) -> None:
        count = self._started.get(job, 0) + delta
        if count > 0:
            self._started[job] = count
        else:
            self._started.pop(job, None)

    def started_pods(self, job: JobKey) -> int:
        """Bound pods attributed to ``job`` (a raw owner) that are Running and Ready."""
        return self._started.get(job, 0)

    def footprint(
        self, job: JobKey, into: dict[str, Resources] | None = None
    ) -> dict[str, Resources]:
        """What the bound pods attributed to ``job`` (a raw owner) request, per node."""
        out: dict[str, Resources] = {} if into is None else into
        pods = self._pods
        for uid in self._members.get(job, ()):
            usage = pods[uid]
            resources.add_into(out.setdefault(usage.node, {}), usage.request)
        return out

    def owners_with_pods(self) -> Mapping[JobKey, object]:
        """The (raw) owners that have bound pods (a set-like view)."""
        return self._members

    def is_bound(self, uid: str) -> bool:
        """The pod is accounted here: bound to a node and not finished."""
        return uid in self._pods

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
        if not state.known and not any(state.reserved.values()) and not state.pods:
            del self.nodes[node]
        else:
            self._node_changed(state)
        self._freed(node)

    # ----------------------------------------------------------------- what-if copies
    def scratch(self, names: Iterable[str] | None = None) -> CapacityCache:
        """A copy of these nodes (default: all) for a what-if simulation (capacity/victims.py):
        same labels, taints, allocatable and free capacity, no pods; change it with
        ``adjust_free`` and place on it like on the real cache."""
        copy = CapacityCache()
        for name in self.nodes if names is None else names:
            state = self.nodes.get(name)
            if state is None or not state.schedulable:
                continue
            twin = NodeState(
                name=state.name,
                allocatable=state.allocatable,
                labels=state.labels,
                taints=state.taints,
                ready=True,
                unschedulable=False,
                known=True,
                free=dict(state.free),
            )
            copy.nodes[name] = twin
            copy._node_changed(twin)
        return copy

    def adjust_free(self, node: str, amounts: Mapping[str, int], sign: int) -> None:
        """free += sign * amounts on one node (what-if copies only: no pod or hold moves)."""
        state = self.nodes[node]
        if sign > 0:
            resources.add_into(state.free, amounts)
        else:
            resources.sub_into(state.free, amounts)
        self._node_changed(state)

    # ----------------------------------------------------------------- queries
    def free(self, node: str) -> Resources:
        return self.nodes[node].free

    def candidates(
        self, request: Mapping[str, int], constraints: NodeConstraints | None = None
    ) -> Iterator[str]:
        """Nodes that may have room for ``request``, in the order a fit tries them. With
        ``constraints``, nodes of taint partitions they do not tolerate may be left out (when
        only one partition is tolerated, only its nodes come, in the same order)."""
        if self._stale:
            self._refresh_index()
        return self._index.candidates(request, *self._only_partition(constraints))

    def candidate_buckets(
        self, request: Mapping[str, int], constraints: NodeConstraints | None = None
    ) -> list[dict[str, None]]:
        """``candidates(request, constraints)`` as the index buckets holding them, in order
        (the nodes of each in order): the fit loops over them without a generator per node.
        The index must not change while they are read."""
        if self._stale:
            self._refresh_index()
        return self._index.buckets(request, *self._only_partition(constraints))

    def _only_partition(self, constraints: NodeConstraints | None) -> tuple[Hashable, ...]:
        """(the partition,) when ``constraints`` tolerate only one taint partition (of several):
        the index's search can keep to it; else () for all of them."""
        if constraints is not None and self._index.partition_count > 1:
            tolerated = self._tolerated_partitions(constraints)
            if tolerated is not None and len(tolerated) == 1:
                return (tolerated[0],)
        return ()

    def copies(self, request: Mapping[str, int], constraints: NodeConstraints, limit: int) -> int:
        """How many copies of ``request`` fit on the nodes ``constraints`` allow, at most
        ``limit``: for one pod set, exactly what the greedy fit places (it takes the copies
        of each node in turn), found without its order, so over fewer nodes: those of the
        taint partitions the constraints tolerate, or the feasible nodes themselves when they
        are fewer still (a node selector)."""
        feasible = self.feasible(constraints)
        if self._stale:
            self._refresh_index()
        index = self._index
        names: Iterable[str]
        tolerated = self._tolerated_partitions(constraints)
        if tolerated is None:
            names = index.candidates(request)
        else:
            names = index.candidates_in(request, tolerated)
            if len(feasible) <= _DIRECT_COUNT or len(feasible) < index.candidate_count(
                request, tolerated
            ):
                names = feasible
        nodes = self.nodes
        placed = 0
        for name in names:
            if name in feasible:
                placed += resources.max_copies(request, nodes[name].free, limit - placed)
                if placed >= limit:
                    break
        return placed

    def _tolerated_partitions(self, constraints: NodeConstraints) -> list[Hashable] | None:
        """The taint partitions ``constraints`` tolerate (memoised: partitions are only ever
        added, so their count tells when to look again); None past _PARTITIONS_MAX of them."""
        index = self._index
        count = index.partition_count
        if count > _PARTITIONS_MAX:
            return None
        memo = self._tolerated.get(constraints)
        if memo is not None and memo[0] == count:
            return memo[1]
        tolerations = constraints.tolerations
        found = [
            part
            for part in index.partitions
            if all(tolerates(tolerations, t) for t in cast(tuple[Taint, ...], part))
        ]
        if len(self._tolerated) > 4096:
            self._tolerated.clear()
        self._tolerated[constraints] = (count, found)
        return found

    def feasible(self, constraints: NodeConstraints) -> frozenset[str]:
        """Schedulable nodes these constraints allow (memoised until nodes change)."""
        found = self._feasible.get(constraints)
        if found is None:
            found = self._feasible[constraints] = self._find_feasible(constraints)
        return found

    def _find_feasible(self, constraints: NodeConstraints) -> frozenset[str]:
        """Without required node affinity, from what is indexed already: the free-capacity
        index holds exactly the schedulable nodes, by partition (their hard taints), and
        ``domains`` the schedulable nodes by the value of a label, so the set is the nodes of the
        partitions the constraints tolerate that carry each label the node selector names, set
        operations on whole groups (a first cycle computes each distinct set once; a scan of
        every node costs ~0.6 us a node, most of it reading node objects spread over the heap).
        Otherwise (or past _PARTITIONS_MAX partitions), ``allows`` on every node."""
        tolerated: list[Hashable] | None = None
        if not constraints.terms:
            if self._stale:
                self._refresh_index()
            tolerated = self._tolerated_partitions(constraints)
        if tolerated is None:
            return frozenset(
                n.name
                for n in self.nodes.values()
                if n.schedulable and constraints.allows(n.name, n.labels, n.taints)
            )
        index = self._index
        members = itertools.chain.from_iterable(
            bucket for part in tolerated for bucket in index.partition_buckets(part)
        )
        selector = constraints.node_selector
        if not selector:
            return frozenset(members)
        allowed: frozenset[str] | None = None
        for key, value in selector:
            labelled = self.domains(key).get(value, ())
            allowed = frozenset(labelled) if allowed is None else allowed.intersection(labelled)
            if not allowed:
                return frozenset()
        assert allowed is not None
        if len(tolerated) == index.partition_count:
            return allowed
        return allowed.intersection(members)

    def confined_feasible(
        self, base: NodeConstraints, confined: NodeConstraints, level: str, domain: str
    ) -> frozenset[str]:
        """``feasible(confined)`` for ``confined`` = ``base`` plus the node selector
        ``level=domain``: the domain's nodes that ``base`` allows (the same set, from a
        rack's nodes instead of every node), memoised as ``feasible(confined)``."""
        found = self._feasible.get(confined)
        if found is None:
            allowed = self.feasible(base)
            members = self.domains(level).get(domain, ())
            found = self._feasible[confined] = frozenset(n for n in members if n in allowed)
        return found

    def hostname(self, node: str) -> str:
        """The node's ``kubernetes.io/hostname`` label, what a pinned pod's nodeSelector names
        ("" when the node is unknown or has none)."""
        state = self.nodes.get(node)
        return state.labels.get(HOSTNAME, "") if state is not None else ""

    def domains(self, level: str) -> dict[str, tuple[str, ...]]:
        """The topology domains of a node label: each value it has on schedulable nodes, with
        those nodes (memoised until nodes change)."""
        found = self._domains.get(level)
        if found is None:
            grouped: dict[str, list[str]] = {}
            for n in self.nodes.values():
                value = n.labels.get(level) if n.schedulable else None
                if value is not None:
                    grouped.setdefault(value, []).append(n.name)
            found = self._domains[level] = {v: tuple(sorted(ns)) for v, ns in grouped.items()}
        return found

    def domain_free(self, level: str) -> dict[str, tuple[int, int]]:
        """Free GPUs and CPU summed over each domain of ``level`` (memoised until any node's
        free capacity moves: a cycle judges many gangs at one capacity)."""
        memo = self._domain_free.get(level)
        if memo is not None and memo[0] == self.version:
            return memo[1]
        nodes = self.nodes
        sums: dict[str, tuple[int, int]] = {}
        for domain, names in self.domains(level).items():
            gpu = cpu = 0
            for name in names:
                free = nodes[name].free
                gpu += free.get(GPU, 0)
                cpu += free.get("cpu", 0)
            sums[domain] = (gpu, cpu)
        self._domain_free[level] = (self.version, sums)
        return sums

    def allocatable_groups(self, constraints: NodeConstraints) -> list[tuple[Resources, int]]:
        """The feasible nodes' allocatable vectors with how many nodes have each (memoised until
        nodes change). Allocatable is interned, so a cluster of a few node types has a few
        groups: judging "could this ever fit" costs per group, not per node."""
        found = self._groups.get(constraints)
        if found is None:
            counts: dict[int, tuple[Resources, int]] = {}
            nodes = self.nodes
            for name in self.feasible(constraints):
                allocatable = nodes[name].allocatable
                seen = counts.get(id(allocatable))
                counts[id(allocatable)] = (allocatable, seen[1] + 1 if seen else 1)
            found = self._groups[constraints] = list(counts.values())
        return found

    def most_free(self, constraints: NodeConstraints, res: str, enough: int | None = None) -> int:
        """The most free ``res`` any feasible node has (0 for none), memoised until a node
        changes. With ``enough``, the scan may stop at the first node with at least that much
        and return its amount instead (not the maximum, and not memoised)."""
        key = (constraints, res)
        memo = self._most.get(key)
        if memo is not None and memo[0] == self.version:
            return memo[1]
        nodes = self.nodes
        feasible = self.feasible(constraints)
        if self._stale:
            self._refresh_index()
        most = self._index.most(res, feasible, lambda name: nodes[name].free)
        if most is not None:
            self._most[key] = (self.version, most)
            return most
        for name in feasible:
            amount = nodes[name].free.get(res, 0)
            if most is None or amount > most:
                most = amount
                if enough is not None and amount >= enough:
                    return amount
        found = 0 if most is None else most
        if len(self._most) > 4096:
            self._most.clear()
        self._most[key] = (self.version, found)
        return found


def _newer_than(record: dict[str, int], mark: int, limit: int) -> list[str] | None:
    """The names ``record`` (name -> the stamp of its latest change, kept in stamp order)
    stamped after ``mark``, newest first, in time linear in their number; None when there are
    more than ``limit``."""
    out: list[str] = []
    for name in reversed(record):
        if record[name] <= mark:
            break
        if len(out) == limit:
            return None
        out.append(name)
    return out
