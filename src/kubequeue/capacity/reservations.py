"""Capacity held for admitted jobs until their pods are bound, so it cannot be admitted twice.

Between "suspend=false" and the scheduler binding the job's pods there is a window in which the
nodes still look free. A reservation covers it: for each admitted, unfinished job kube-queue holds

    held(pod set) = max(0, pods the job should be running now - its pods bound to nodes)

on concrete nodes. This is level-triggered: the same rule recomputes the reservation after a pod
binds (it shrinks; the real pod now uses the capacity), after a pod ends while the job still wants
it (it grows back), and after a controller restart (admitted jobs are recognised by their
annotation and their missing pods are held again). A restart therefore can never over-commit.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import structlog

from kubequeue.capacity.binding import Shape, shape_of
from kubequeue.capacity.cache import CapacityCache
from kubequeue.capacity.fit import Assignment, place
from kubequeue.demand import PodSet
from kubequeue.identity import JobKey
from kubequeue.resources import GPU, Resources
from kubequeue.scheduling import NodeConstraints

__all__ = ["UNPLACED", "Reservations"]

log = structlog.get_logger(__name__)

# Pseudo-node for held pods that no schedulable node could take (e.g. while the Node list is
# still arriving after a restart). They are charged to no node and placed as soon as one can.
UNPLACED = ""


@dataclass(slots=True)
class _Held:
    key: JobKey
    seq: int  # order of insertion into Reservations._held (relocate() goes in that order)
    pod_sets: dict[str, PodSet]
    # pod set name -> node -> reserved pod count
    placed: dict[str, dict[str, int]] = field(default_factory=dict)

    def count(self, pod_set: str) -> int:
        return sum(self.placed.get(pod_set, {}).values())


class Reservations:
    def __init__(self, cache: CapacityCache) -> None:
        self._cache = cache
        # How many of a job's pods are bound, by pod set. The job tracker replaces it with a
        # view that also counts pods attributed to the job's aliases (see JobTracker.bound_pods).
        self.bound_pods: Callable[[JobKey], Counter[str | None]] = cache.bound_pods
        # Pods of a job's pod set pinned to a node and not bound yet, by the node's hostname
        # label (capacity/pins.py sets it): the holds they count on are dropped last.
        self.pinned: Callable[[JobKey, str], Mapping[str, int]] | None = None
        self._held: dict[JobKey, _Held] = {}
        self._relocated_at: tuple[int, int] | None = None
        # Holds that stay where they are although their nodes are over-committed: a preemptor's
        # capacity, held on the nodes its victims are leaving (relocate() leaves them alone).
        self._pinned: set[JobKey] = set()
        # Held pods per node (UNPLACED included), so relocate() looks at the few nodes that
        # hold anything instead of at every hold; and per node, the jobs holding pods there,
        # so it moves the holds of the stranded nodes without a pass over every admitted job.
        self._holds_on: dict[str, int] = {}
        self._jobs_on: dict[str, dict[JobKey, int]] = {}
        self._serial = itertools.count()
        # The stranded nodes among those holding anything, kept up to date from what changed:
        # the nodes the cache says were touched since (every change of a node's free capacity
        # or state), and the nodes that gained their first or lost their last hold.
        self._holds_version = 0
        self._holds_changed: set[str] = set()
        self._stranded_memo: tuple[tuple[int, int], frozenset[str]] = ((-1, -1), frozenset())
        # Held pods per shape (request, constraints), for the binding guard (capacity/binding.py):
        # the pods in flight, whose nodes the scheduler has not chosen yet.
        self.inflight: dict[Shape, tuple[Resources, NodeConstraints, int]] = {}
        self.inflight_version = 0  # moves with every change of it
        # debt(), memoised on what it depends on (every hold on a node moves cache.version).
        self._debt: Resources = {}
        self._debt_at: tuple[int, int, int] | None = None

    def __contains__(self, job: object) -> bool:
        return job in self._held

    def __len__(self) -> int:
        return len(self._held)

    def held_nodes(self) -> list[str]:
        """The real nodes holding anything now."""
        return [node for node in self._holds_on if node != UNPLACED]

    def inflight_pods(self) -> int:
        """Held pods, all shapes together."""
        return sum(count for _, _, count in self.inflight.values())

    def held_pods(self, job: JobKey) -> int:
        held = self._held.get(job)
        return sum(held.count(ps) for ps in held.pod_sets) if held else 0

    def hold(
        self,
        job: JobKey,
        pod_sets: Sequence[PodSet],
        assignments: Sequence[Assignment],
        *,
        pinned: bool = False,
    ) -> None:
        """Charge a fresh admission's placement (computed by fit.place on the same cache)."""
        self.release(job)
        if pinned:
            self._pinned.add(job)
        held = _Held(job, next(self._serial), pod_sets={ps.name: ps for ps in pod_sets})
        self._held[job] = held
        # Pods in flight counted once per pod set, not per node (a shape key is hashed twice
        # per count: a first cycle's admissions hold tens of thousands of node assignments).
        counts: dict[str, int] = {}
        for a in assignments:
            self._place(held, a.pod_set, a.node, a.count)
            counts[a.pod_set] = counts.get(a.pod_set, 0) + a.count
        for name, count in counts.items():
            self._count_inflight(held.pod_sets[name], count)
        self.reconcile(job)

    def track(self, job: JobKey, pod_sets: Sequence[PodSet]) -> None:
        """An admitted job as observed now (after a restart, or its status moved)."""
        held = self._held.get(job)
        if held is None:
            held = _Held(job, next(self._serial), pod_sets={})
            self._held[job] = held
        new = {ps.name: ps for ps in pod_sets}
        for name in list(held.placed):
            old = held.pod_sets.get(name)
            if name not in new or (old is not None and old.request is not new[name].request):
                self._drop(held, name, held.count(name))
        held.pod_sets = new
        self.reconcile(job)

    def unpin(self, job: JobKey) -> None:
        self._pinned.discard(job)

    def placed(self, job: JobKey) -> list[tuple[str, Resources, int]]:
        """(node, request, pods) held for the job on real nodes."""
        held = self._held.get(job)
        if held is None:
            return []
        return [
            (node, held.pod_sets[name].request, count)
            for name, nodes in held.placed.items()
            for node, count in nodes.items()
            if node != UNPLACED
        ]

    def expected(self, job: JobKey) -> int:
        """Pods the admitted job should be running now (its pod sets' counts)."""
        held = self._held.get(job)
        return sum(ps.count for ps in held.pod_sets.values()) if held is not None else 0

    def pod_sets(self, job: JobKey) -> Mapping[str, PodSet]:
        """The pod sets the job's holds are for, by name (empty if nothing is held)."""
        held = self._held.get(job)
        return held.pod_sets if held is not None else {}

    def assignments(self, job: JobKey) -> list[Assignment]:
        """The job's held placement, as fit.place reports one."""
        held = self._held.get(job)
        if held is None:
            return []
        return [
            Assignment(name, node, count, held.pod_sets[name].request)
            for name, nodes in held.placed.items()
            for node, count in nodes.items()
        ]

    def overcommits(self, job: JobKey) -> bool:
        """Whether any node the job's capacity is held on has less than nothing free (its
        previous users' pods have not all gone yet)."""
        nodes = self._cache.nodes
        for node, _, _ in self.placed(job):
            state = nodes.get(node)
            if state is None or any(v < 0 for v in state.free.values()):
                return True
        return False

    def release(self, job: JobKey) -> None:
        self._pinned.discard(job)
        held = self._held.pop(job, None)
        if held is None:
            return
        for name in list(held.placed):
            self._drop(held, name, held.count(name))

    def reconcile(self, job: JobKey) -> None:
        """Make the held pods match what is still missing (see the module docstring)."""
        held = self._held.get(job)
        if held is None:
            return
        bound = _attribute(self.bound_pods(job), held.pod_sets)
        for name, ps in held.pod_sets.items():
            needed = max(0, ps.count - bound.get(name, 0))
            have = held.count(name)
            if have > needed:
                self._drop(held, name, have - needed)
            elif have < needed:
                self._grow(job, held, ps, needed - have)

    def relocate(self) -> int:
        """Move held pods off nodes that cannot take them, when somewhere else can.

        A hold can end up on the wrong node: placed while the Node list was incomplete (after a
        restart), on a node that was since deleted, cordoned or went NotReady, or on a node that
        someone else's pods over-filled. Left there, it would block nothing useful while the
        job's pods go elsewhere, i.e. an over-commit. Runs at the start of each cycle, and only
        does work when capacity or nodes changed since the last run. Returns pods moved.
        """
        cache = self._cache
        generation = (cache.freed_generation, cache.nodes_generation)
        if generation == self._relocated_at:
            return 0
        moved = 0
        stranded = self._stranded_nodes()
        pinned = self._pinned
        # The jobs holding pods on a stranded node, in the order they were held.
        jobs_on = self._jobs_on
        candidates = {job for node in stranded for job in jobs_on.get(node, ())}
        held_by = self._held
        for held in sorted((held_by[job] for job in candidates), key=_seq):
            if pinned and held.key in pinned:
                continue
            for name, nodes in list(held.placed.items()):
                ps = held.pod_sets[name]
                if ps.topology is not None:
                    # Moved anywhere, it would leave its gang's domain: it stays, owed (debt),
                    # and a pod of it that finds no room gets the gang requeued (Unplaceable).
                    continue
                for node, count in list(nodes.items()):
                    if node not in stranded:
                        continue
                    assignments = place([PodSet(name, count, ps.request, ps.constraints)], cache)
                    if assignments is None:
                        continue
                    for a in assignments:
                        self._add(held, name, a.node, a.count)
                    self._remove(held, name, node, count)
                    moved += count
        self._relocated_at = (cache.freed_generation, cache.nodes_generation)
        if moved:
            log.info("reservation.relocated", pods=moved)
        return moved

    def debt(self) -> Resources:
        """Capacity owed to admitted pods that have no room, summed over the cluster.

        The scheduler places pods by its own scoring, not where our simulation held room for
        them. When a pod lands on a node held for another job, that job's hold is displaced
        (the node's free goes negative) while the room the pod was meant to use elsewhere is
        released. relocate() moves the displaced hold if some node can take it; when none can
        (an 8-GPU hold and only fragments left), the cluster as a whole is short by the
        overflow. Admitting into the released fragments would then put more demand on the
        cluster than it has, and some admitted pod, not necessarily the displaced one, would
        stay Pending. The debt is that overflow per resource: holds on over-committed nodes
        (their overflow), on nodes that take no new pods and on no node at all (all of it).
        Holds pinned for a preemptor are left out: their nodes are over-committed on purpose
        while victims leave. Cost: nothing unless a node holding something is stranded."""
        memo = (self._cache.version, self._holds_on.get(UNPLACED, 0), len(self._pinned))
        if memo == self._debt_at:
            return self._debt
        self._debt_at = memo
        self._debt = {}
        stranded = sorted(self._stranded_nodes())  # in a fixed order, not a pass over all
        if not stranded:
            return self._debt
        pinned_on = self._pinned_nodes()
        out: Resources = {}
        cache_nodes = self._cache.nodes
        for node in stranded:
            if node in pinned_on:
                continue
            state = cache_nodes.get(node) if node != UNPLACED else None
            if state is not None and state.schedulable:
                for name, amount in state.free.items():
                    if amount < 0:
                        out[name] = out.get(name, 0) - amount
                continue
            for held in self._held.values():
                for name, nodes in held.placed.items():
                    count = nodes.get(node, 0)
                    for res, amount in held.pod_sets[name].request.items() if count else ():
                        out[res] = out.get(res, 0) + amount * count
        self._debt = out
        return out

    def stranded_jobs(self) -> set[JobKey]:
        """The jobs whose held pods are owed room (``debt``): held on a node that cannot take
        them (over-committed, gone, cordoned, NotReady) or on no node, after relocate() found
        no better place. Which of them the scheduler leaves without a node is its choice, so
        these are suspects, not verdicts (admission/requeue.py confirms with the pods' own
        state). Pinned holds are left out, like the nodes they share, as debt() does them."""
        if not self.debt():
            return set()  # the usual case: nothing owed, nothing to look for
        stranded = self._stranded_nodes() - self._pinned_nodes()
        jobs_on = self._jobs_on
        return {job for node in stranded for job in jobs_on.get(node, ())} - self._pinned

    # ----------------------------------------------------------------- internals
    def _pinned_nodes(self) -> set[str]:
        """Nodes holding any pinned (preemptor) hold: over-committed on purpose."""
        out: set[str] = set()
        for job in self._pinned:
            held = self._held.get(job)
            for nodes in held.placed.values() if held is not None else ():
                out.update(nodes)
        return out

    def _stranded_nodes(self) -> frozenset[str]:
        """The nodes holding anything that cannot take what they hold (``_stranded``).

        Recomputed only for the nodes touched since the last answer (a burst touches a few
        nodes per cycle while a thousand hold pods); all of them when too many were."""
        cache = self._cache
        key = (cache.version, self._holds_version)
        seen, known = self._stranded_memo
        if seen == key:
            return known
        holds_on = self._holds_on
        touched = cache.touched_since(seen[0], len(holds_on)) if seen[0] >= 0 else None
        if touched is None:
            out = frozenset(node for node in holds_on if self._stranded(node))
        else:
            changed = set(touched)
            changed |= self._holds_changed
            current = set(known)
            for node in changed:
                if node in holds_on and self._stranded(node):
                    current.add(node)
                else:
                    current.discard(node)
            out = frozenset(current)
        self._holds_changed.clear()
        self._stranded_memo = (key, out)
        return out

    def _stranded(self, node: str) -> bool:
        state = self._cache.nodes.get(node) if node != UNPLACED else None
        if state is None or not state.schedulable:
            return True
        return any(v < 0 for v in state.free.values())

    def _add(self, held: _Held, pod_set: str, node: str, count: int) -> None:
        self._place(held, pod_set, node, count)
        self._count_inflight(held.pod_sets[pod_set], count)

    def _place(self, held: _Held, pod_set: str, node: str, count: int) -> None:
        """``_add`` but for the count of pods in flight."""
        ps = held.pod_sets[pod_set]
        nodes = held.placed.setdefault(pod_set, {})
        nodes[node] = nodes.get(node, 0) + count
        self._holds_on[node] = self._holds_on.get(node, 0) + count
        jobs = self._jobs_on.setdefault(node, {})
        jobs[held.key] = jobs.get(held.key, 0) + count
        self._holds_version += 1
        self._holds_changed.add(node)
        if node != UNPLACED:
            self._cache.reserve(node, ps.request, count)

    def _count_inflight(self, ps: PodSet, delta: int) -> None:
        self.inflight_version += 1
        shape = shape_of(ps.request, ps.constraints)
        known = self.inflight.get(shape)
        total = (known[2] if known is not None else 0) + delta
        if total > 0:
            self.inflight[shape] = (ps.request, ps.constraints, total)
        else:
            self.inflight.pop(shape, None)

    def _remove(self, held: _Held, pod_set: str, node: str, count: int) -> None:
        nodes = held.placed[pod_set]
        nodes[node] -= count
        left = self._holds_on.get(node, 0) - count
        if left > 0:
            self._holds_on[node] = left
        else:
            self._holds_on.pop(node, None)
        jobs = self._jobs_on.get(node)
        if jobs is not None:
            mine = jobs.get(held.key, 0) - count
            if mine > 0:
                jobs[held.key] = mine
            else:
                jobs.pop(held.key, None)
                if not jobs:
                    del self._jobs_on[node]
        self._holds_version += 1
        self._holds_changed.add(node)
        self._count_inflight(held.pod_sets[pod_set], -count)
        if node != UNPLACED:
            self._cache.unreserve(node, held.pod_sets[pod_set].request, count)
        if not nodes[node]:
            del nodes[node]
        if not nodes:
            del held.placed[pod_set]

    def _drop(self, held: _Held, pod_set: str, count: int) -> None:
        """Release ``count`` held pods: stranded ones first, the holds a pod pinned to their
        node (and not bound yet) counts on last, and otherwise those beside a bound pod of the
        job first. Holds are interchangeable for unpinned pods, not for pinned ones: a pinned
        pod can only bind on its node, so dropping the hold it was pinned to (when a sibling
        bound or ended) would let another job into its room."""
        nodes = held.placed.get(pod_set, {})
        claimed = self.pinned(held.key, pod_set) if self.pinned is not None else {}
        hostname = self._cache.hostname
        # Where the job's pods are bound: a hold beside one of them is most likely the one that
        # pod was planned into (a bind is what usually shrinks the hold), so it goes first,
        # and the holds planned for pods not created yet stay where the plan put them.
        bound_on = self._cache.footprint(held.key) if len(nodes) > 1 else {}

        def order(node: str) -> tuple[bool, bool, bool]:
            return (
                not self._stranded(node),
                nodes[node] <= claimed.get(hostname(node), 0),
                node not in bound_on,
            )

        for node in sorted(nodes, key=order):
            if count <= 0:
                break
            k = min(count, nodes[node])
            self._remove(held, pod_set, node, k)
            count -= k

    def _grow(self, job: JobKey, held: _Held, ps: PodSet, count: int) -> None:
        extra = PodSet(ps.name, count, ps.request, ps.constraints)
        assignments = place([extra], self._cache)
        if assignments is not None:
            for a in assignments:
                self._add(held, a.pod_set, a.node, a.count)
            return
        # The capacity is gone (someone else's pods took it while we were not watching). Hold it
        # anyway on the roomiest eligible node: that node goes negative and takes nothing new,
        # which is safer than admitting more work into capacity this job is about to claim.
        # relocate() moves it as soon as a better place frees up.
        eligible = self._cache.feasible(ps.constraints)
        if not eligible:
            log.info(
                "reservation.unplaced",
                job="/".join(job),
                pod_set=ps.name,
                pods=count,
                why="no schedulable node can take these pods yet",
            )
            self._add(held, ps.name, UNPLACED, count)
            return
        node = max(eligible, key=lambda n: _roominess(self._cache.nodes[n].free, ps))
        log.warning(
            "reservation.overcommitted",
            job="/".join(job),
            pod_set=ps.name,
            pods=count,
            node=node,
            why="an admitted job's pods are missing and no free capacity is left to hold for them",
        )
        self._add(held, ps.name, node, count)


def _seq(held: _Held) -> int:
    return held.seq


def _roominess(free: Mapping[str, int], ps: PodSet) -> tuple[int, int, int]:
    return (free.get(GPU, 0), free.get("cpu", 0), free.get("memory", 0))


def _attribute(bound: Counter[str | None], pod_sets: Mapping[str, PodSet]) -> dict[str, int]:
    """Bound pods per pod set; pods without a pod-set label fill sets in declaration order."""
    out = {name: bound.get(name, 0) for name in pod_sets}
    loose = bound.get(None, 0)
    for name, ps in pod_sets.items():
        if loose <= 0:
            break
        take = min(loose, max(0, ps.count - out[name]))
        if len(pod_sets) == 1:
            take = loose
        out[name] += take
        loose -= take
    return out
