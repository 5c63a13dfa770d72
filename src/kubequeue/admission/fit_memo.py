"""Answers "does not fit" without running the fit, when the capacity freed since a failure
cannot make up the difference (step 3 of admission/cycle.py); and remembers, within a cycle,
which shapes were found to fit at the capacity as it is, so jobs a node hold keeps waiting
reuse that answer instead of running the fit again.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from kubequeue import resources
from kubequeue.capacity.cache import CapacityCache
from kubequeue.capacity.fit import place_counted
from kubequeue.capacity.topology import Placement, place_job_in
from kubequeue.demand import PodSet
from kubequeue.queueing.queue import QueuedJob

__all__ = ["FitShortcuts"]


# Freed nodes to look at before giving up on a shortcut and simply running the fit (a drain
# frees hundreds per cycle: looking at each for every shape costs more than the fits it saves).
_FREED_CHECK_MAX = 256
_NO_LIMIT = sys.maxsize


class FitShortcuts:
    """Answers "does not fit" without running the fit when that is already certain.

    A node's free capacity only grows through an event the cache records
    (``CapacityCache.freed_nodes_since``), and with less capacity a job that did not fit still
    does not (for one pod set the fit is exact, so this is a theorem; for several it is one
    whenever the search behind the greedy pass settles the answer, and otherwise the assumption
    the cycle's ``failed_at`` skip has always made). Hence, per demand shape (pod requests and
    constraints, numbered by ``_shape``):

    1. Room. When a one-pod-set fit fails it has tried every node, so it knows how many pods of
       that shape fit at most: the room for that shape at that freed generation g. After nodes F
       were freed, at most ``room(g) + the copies that fit on F now`` fit (O(|F|) to compute); a
       job with more pods cannot fit and is not tried. The room is the shape's, so the newest
       one known serves every job of the shape, whenever (or whether) that job last failed.
       After one pod ended that is one node per shape, so a cycle over ten thousand queued jobs
       runs the fit only for the jobs the freed capacity can actually complete, and a job behind
       a failed one of its shape with more pods is never tried in the same cycle.
    2. Without a room figure (several pod sets, or forgotten), a job that failed at g can fit
       now only if some node freed since g can take at least one of its pods.

    Either way the job counts as evaluated and follows the cycle's usual "does not fit" path.
    """

    def __init__(self) -> None:
        self._ids: dict[tuple[object, ...], int] = {}
        # The ids of one-pod-set shapes without topology by the identity of their request and
        # constraints (both shared between the jobs of a template: demand.py interns them), so
        # a job of a known shape is numbered without building and hashing its key: (id of the
        # request, id of the constraints) -> (the request, the constraints, the shape id). The
        # objects are kept so that their ids cannot be reused while the entry exists.
        self._by_identity: dict[tuple[int, int], tuple[object, object, int]] = {}
        self._next_id = 0
        self._gen = -1  # the cache's freed_generation / nodes_generation the memos below are for
        self._nodes_gen = -1
        self._now: dict[int, int] = {}  # shape -> room at _gen
        # shape -> (an earlier freed generation, its room then): the newest room known of it
        self._rooms: dict[int, tuple[int, int]] = {}
        self._may_fit: dict[tuple[int, int], bool] = {}  # (shape, failed generation) -> rule 2
        self._freed: dict[int, list[str] | None] = {}  # generation -> distinct nodes freed since
        self._feasible: dict[int, frozenset[str]] = {}  # one-pod-set shape -> its feasible nodes
        # One-pod-set shape -> most pods found to fit at the capacity as it is now in this
        # cycle: until capacity is taken again (an admission, a preemption's hold), fewer pods
        # of the shape fit too. Emptied by ``taken``.
        self._fitting: dict[int, int] = {}

    def start(self, cache: CapacityCache) -> None:
        self._fitting = {}
        if cache.freed_generation != self._gen or cache.nodes_generation != self._nodes_gen:
            self._sync(cache)
        if len(self._ids) > 100_000:  # ids are never reused, so forgetting is always safe
            self._ids.clear()
            self._by_identity.clear()
            self._rooms.clear()
        elif len(self._by_identity) > 100_000:  # (requests not interned: a cache of _ids only)
            self._by_identity.clear()

    def _sync(self, cache: CapacityCache) -> None:
        """Capacity was freed or nodes changed: keep what stays true, drop the rest."""
        if cache.nodes_generation != self._nodes_gen:
            self._rooms.clear()  # which nodes count, or their size, changed
            self._feasible.clear()
            self._nodes_gen = cache.nodes_generation
        else:
            gen, rooms = self._gen, self._rooms
            for shape, room in self._now.items():
                rooms[shape] = (gen, room)
        self._now = {}
        self._gen = cache.freed_generation
        self._may_fit.clear()
        self._freed.clear()

    def room(self, job: QueuedJob, cache: CapacityCache) -> int | None:
        """A bound on how many pods of the job's shape fit now, if one was found this
        generation (a failed fit's count, or a room carried over from an earlier one)."""
        memo = job.shape
        if (
            memo is None
            or memo[0] is not job.pod_sets
            or self._gen != cache.freed_generation
            or self._nodes_gen != cache.nodes_generation
        ):
            return None
        return self._now.get(memo[1])

    def _shape(self, job: QueuedJob) -> int:
        pod_sets = job.pod_sets
        if len(pod_sets) == 1 and pod_sets[0].topology is None:
            ps = pod_sets[0]
            request, constraints = ps.request, ps.constraints
            known = self._by_identity.get((id(request), id(constraints)))
            if known is not None and known[0] is request and known[1] is constraints:
                job.shape = (pod_sets, known[2])
                return known[2]
            shape = self._numbered(job)
            self._by_identity[(id(request), id(constraints))] = (request, constraints, shape)
            return shape
        return self._numbered(job)

    def _numbered(self, job: QueuedJob) -> int:
        key = tuple((tuple(ps.request.items()), ps.constraints, ps.topology) for ps in job.pod_sets)
        shape = self._ids.get(key)
        if shape is None:
            shape = self._ids[key] = self._next_id
            self._next_id += 1
        job.shape = (job.pod_sets, shape)
        return shape

    def place(self, job: QueuedJob, cache: CapacityCache) -> Placement | None:
        if cache.freed_generation != self._gen or cache.nodes_generation != self._nodes_gen:
            self._sync(cache)  # capacity grew during the cycle
        pod_sets = job.pod_sets
        memo = job.shape
        shape = memo[1] if memo is not None and memo[0] is pod_sets else self._shape(job)
        failed = job.failed_at
        if failed is not None and failed[1] != self._nodes_gen:
            failed = None
        if len(pod_sets) == 1 and pod_sets[0].topology is None:
            ps = pod_sets[0]
            room = self._now.get(shape)
            if room is None:
                room = self._latest_room(shape, ps, cache)
            if room is not None:
                if ps.count > room:
                    return None
            elif failed is not None and not self._helps(shape, job, failed[0], cache):
                return None
            placed, fitted = place_counted(ps, cache)
            if placed is None:
                self._now[shape] = fitted
                return None
            if fitted > self._fitting.get(shape, 0):
                self._fitting[shape] = fitted
            return Placement(placed)
        if failed is not None and not self._helps(shape, job, failed[0], cache):
            return None
        return place_job_in(pod_sets, cache)

    def taken(self) -> None:
        """Capacity was taken in the cycle: fits found before may no longer hold."""
        if self._fitting:
            self._fitting = {}

    def fitted(self, job: QueuedJob) -> None:
        """A job found to fit at the capacity as it is (see ``known_to_fit``)."""
        memo = job.shape
        if memo is not None and len(job.pod_sets) == 1:
            count = job.pod_sets[0].count
            if count > self._fitting.get(memo[1], 0):
                self._fitting[memo[1]] = count

    def known_to_fit(self, job: QueuedJob) -> bool:
        """Whether a job of its shape with at least as many pods fitted since capacity was
        last taken in this cycle."""
        memo = job.shape
        return (
            memo is not None
            and memo[0] is job.pod_sets
            and len(job.pod_sets) == 1
            and self._fitting.get(memo[1], 0) >= job.pod_sets[0].count
        )

    def _latest_room(self, shape: int, ps: PodSet, cache: CapacityCache) -> int | None:
        """Rule 1: the room now, from the newest room known of the shape plus the nodes freed
        since. A room belongs to the shape, not to the job that found it, so it also bounds a
        job that failed long ago or never was tried."""
        known = self._rooms.get(shape)
        if known is None:
            return None
        since, before = known
        names = self._freed_names(since, cache)
        if names is None:
            del self._rooms[shape]  # too much was freed since: it only gets worse
            return None
        feasible = self._feasible.get(shape)
        if feasible is None:
            feasible = self._feasible[shape] = cache.feasible(ps.constraints)
        nodes = cache.nodes
        room = before
        for name in names:
            if name in feasible:
                state = nodes.get(name)
                if state is not None:
                    # Every copy, not at most this job's count: the room is kept for the shape,
                    # and a bigger job of it may come next.
                    room += resources.max_copies(ps.request, state.free, _NO_LIMIT)
        self._now[shape] = room
        return room

    def _freed_names(self, since: int, cache: CapacityCache) -> list[str] | None:
        if since not in self._freed:
            self._freed[since] = cache.freed_nodes_since(since, _FREED_CHECK_MAX)
        return self._freed[since]

    def _helps(self, shape: int, job: QueuedJob, since: int, cache: CapacityCache) -> bool:
        """Rule 2: can a node freed since the job failed take at least one of its pods?"""
        key = (shape, since)
        found = self._may_fit.get(key)
        if found is None:
            names = self._freed_names(since, cache)
            found = names is None or _takes_a_pod(job.pod_sets, names, cache)
            self._may_fit[key] = found
        return found


def _takes_a_pod(pod_sets: Sequence[PodSet], names: list[str], cache: CapacityCache) -> bool:
    nodes = cache.nodes
    wants = False
    for ps in pod_sets:
        if ps.count <= 0:
            continue
        wants = True
        feasible = cache.feasible(ps.constraints)
        for name in names:
            if name in feasible:
                state = nodes.get(name)
                if state is not None and resources.max_copies(ps.request, state.free, 1):
                    return True
    return not wants
