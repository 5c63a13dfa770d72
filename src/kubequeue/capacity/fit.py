"""Gang placement: can every pod of a job be put on some node right now?

The simulation places pod sets biggest-first, each pod on the tightest node that still has room
(first-fit decreasing over the free-capacity index), charging a scratch overlay so pods of the
same job never share capacity twice. All pods fit or the answer is no: a job that half-starts holds
GPUs it cannot use, which is the waste kube-queue exists to prevent.

For one pod set that greedy pass is exact. For several it can strand a set (the first set takes
the only node the second could use, while another node would have done for the first), so when it
fails a bounded search (``_Search``) looks for a placement before the answer is no. The search
costs nothing on the usual paths (a job that fits, a job with one pod set, a job one of whose pod
sets does not fit even on its own) and at most ``_SEARCH_STEPS`` steps on top of a linear set-up
otherwise; within that budget it is exhaustive, so its "no" is a proof.

``place`` is the hot path and only answers yes (with the placement) or no. ``explain`` runs the
same simulation again on the rare path where a user-facing reason is needed, and with
``empty_cluster=True`` it judges against allocatable only: "could this job ever fit here?".
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from kubequeue import resources
from kubequeue.capacity.cache import CapacityCache
from kubequeue.demand import PodSet
from kubequeue.quantity import format_milli
from kubequeue.resources import GPU, Resources

__all__ = ["Assignment", "explain", "place", "place_counted", "without_amounts"]

# Below this many feasible nodes, scanning them directly beats walking the index.
_DIRECT_SCAN = 64


@dataclass(frozen=True, slots=True)
class Assignment:
    pod_set: str
    node: str
    count: int
    request: Resources


def _size_key(ps: PodSet) -> tuple[int, int, int]:
    r = ps.request
    return (-r.get(GPU, 0), -r.get("cpu", 0), -r.get("memory", 0))


def _effective(free: Mapping[str, int], extra: Mapping[str, int] | None) -> Mapping[str, int]:
    if not extra:
        return free
    out = dict(free)
    resources.sub_into(out, extra)
    return out


def _candidates(cache: CapacityCache, ps: PodSet, feasible: frozenset[str]) -> Iterable[str]:
    if len(feasible) <= _DIRECT_SCAN:
        return sorted(feasible, key=lambda n: (cache.nodes[n].free.get(GPU, 0), n))
    return (n for n in cache.candidates(ps.request, ps.constraints) if n in feasible)


def place(pod_sets: Sequence[PodSet], cache: CapacityCache) -> list[Assignment] | None:
    """A placement of every pod on current free capacity, or None if the gang does not fit
    (or the search behind the greedy pass ran out of steps: see ``_Search``)."""
    scratch: dict[str, Resources] = {}
    out: list[Assignment] = []
    alone = True  # no pod set placed anything yet
    for ps in sorted(pod_sets, key=_size_key):
        if _place_set(ps, cache, scratch, out):
            if alone:  # it does not fit even on its own, and for one set the greedy is exact
                return None
            return _search(pod_sets, cache, empty_cluster=False)[0]
        if ps.count > 0:
            alone = False
    return out


def place_counted(ps: PodSet, cache: CapacityCache) -> tuple[list[Assignment] | None, int]:
    """``place([ps])``, and how many of its pods fit: ``ps.count`` when it does, otherwise the
    most that current free capacity can hold (every node was tried), which bounds later tries."""
    out: list[Assignment] = []
    remaining = _place_set(ps, cache, {}, out)
    if remaining:
        return None, ps.count - remaining
    return out, ps.count


def place_some(
    ps: PodSet, cache: CapacityCache, taken: dict[str, Resources], out: list[Assignment]
) -> int:
    """As many of ``ps``'s pods as fit, on room not in ``taken`` (charged with them, and
    appended to ``out``); returns the pods left over. For placements built in steps
    (capacity/topology.py: a gang spread over as few domains as possible)."""
    return _place_set(ps, cache, taken, out)


def _place_set(
    ps: PodSet, cache: CapacityCache, scratch: dict[str, Resources], out: list[Assignment]
) -> int:
    """Place the pods of one set (charging ``scratch``, appending to ``out``); pods left over."""
    remaining = ps.count
    if remaining <= 0:
        return 0
    feasible = cache.feasible(ps.constraints)
    if not feasible:
        return remaining
    nodes = cache.nodes
    request = ps.request
    needs = _needs(request)
    # The candidates in their order (``_candidates``), looped over here: a fit that fails tries
    # every one, and most of those have no room (memory, say), so each try is kept to a few
    # lookups. ``resources.max_copies`` inlined, the amount most often short checked first.
    groups: Iterable[Iterable[str]]
    if len(feasible) <= _DIRECT_SCAN:
        groups = (_candidates(cache, ps, feasible),)
    else:
        groups = cache.candidate_buckets(request, ps.constraints)
    for group in groups:
        for name in group:
            if name not in feasible:
                continue
            free: Mapping[str, int] = nodes[name].free
            if scratch:
                extra = scratch.get(name)
                if extra:
                    free = _effective(free, extra)
            k = remaining
            for res, amount in needs:
                have = free.get(res, 0)
                if have < amount:
                    k = 0
                    break
                if have < amount * k:
                    k = have // amount
            if k:
                resources.add_into(scratch.setdefault(name, {}), request, k)
                out.append(Assignment(ps.name, name, k, request))
                remaining -= k
                if not remaining:
                    return 0
    return remaining


def _needs(request: Mapping[str, int]) -> list[tuple[str, int]]:
    """The amounts ``request`` asks (> 0), memory first, then CPU (the amounts a busy node most
    often lacks: the index already sorted its candidates by GPUs and CPU), then the rest."""
    needs = [(name, amount) for name, amount in request.items() if amount > 0]
    if len(needs) > 1:
        needs.sort(key=_need_order)
    return needs


def _need_order(item: tuple[str, int]) -> int:
    return _NEED_RANK.get(item[0], 2)


_NEED_RANK = {"memory": 0, "cpu": 1}


def explain(
    pod_sets: Sequence[PodSet], cache: CapacityCache, *, empty_cluster: bool = False
) -> str:
    """Why the gang does not fit (``""`` if it does). Slow path: scans every feasible node
    (except for a single pod set, where _explain_one reaches the same text cheaper).

    First each pod set on its own, biggest first: those reasons are exact. Only when every set
    fits on its own is the placement of all of them together decided (the same greedy pass and
    search as ``place``), and its failure said as such: a count taken after the greedy pass placed
    the other sets would be one placement's, not the most that fit."""
    if len(pod_sets) == 1:
        return _explain_one(pod_sets[0], cache, empty_cluster)
    for ps in sorted(pod_sets, key=_size_key):
        why = _explain_alone(ps, pod_sets, cache, empty_cluster)
        if why:
            return why
    short = _first_try(pod_sets, cache, empty_cluster)
    if short is None:
        return ""
    placed, settled = _search(pod_sets, cache, empty_cluster=empty_cluster)
    if placed is not None:
        return ""
    if empty_cluster and not settled:
        return ""  # not proven: "can never fit" would keep the job from being tried at all
    ps, fitted = short
    where = "on the nodes" if empty_cluster else "on free capacity now"
    head = (
        f"{_label(ps, pod_sets)}needs {ps.count} pods of ({resources.describe(ps.request)}) "
        "placed together with the other pod sets; each pod set fits on its own, but "
    )
    if settled:
        return f"{head}no placement fits them all {where}"
    return (
        f"{head}no placement of them all was found {where} within the search's work limit "
        f"(the first try left room for {fitted})"
    )


def _explain_alone(
    ps: PodSet, pod_sets: Sequence[PodSet], cache: CapacityCache, empty_cluster: bool
) -> str:
    """Why this pod set does not fit even without the others (``""`` if it does)."""
    if ps.count <= 0:
        return ""
    feasible = cache.feasible(ps.constraints)
    if not feasible:
        what = (
            "no schedulable node without taints"
            if ps.constraints.unconstrained
            else f"no schedulable node matches {ps.constraints.describe()}"
        )
        return f"{_label(ps, pod_sets)}{what}"
    frees = {
        n: cache.nodes[n].allocatable if empty_cluster else cache.nodes[n].free for n in feasible
    }
    for res, need in sorted(ps.request.items()):
        most = max(f.get(res, 0) for f in frees.values())
        if need > most:
            if not any(cache.nodes[n].allocatable.get(res, 0) for n in feasible):
                return (
                    f"{_label(ps, pod_sets)}each pod needs {format_milli(res, need)} {res} "
                    f"and no eligible node offers {res} at all"
                )
            where = "has" if empty_cluster else "has free"
            return (
                f"{_label(ps, pod_sets)}each pod needs {format_milli(res, need)} {res} on one "
                f"node; the most any eligible node {where} is {format_milli(res, most)}"
            )
    placed = 0
    for free in frees.values():
        placed += resources.max_copies(ps.request, free, ps.count - placed)
        if placed == ps.count:
            return ""
    room = "the nodes can hold" if empty_cluster else "fit on free capacity now"
    return (
        f"{_label(ps, pod_sets)}needs {ps.count} pods of "
        f"({resources.describe(ps.request)}) placed together; only {placed} {room}"
    )


def _first_try(
    pod_sets: Sequence[PodSet], cache: CapacityCache, empty_cluster: bool
) -> tuple[PodSet, int] | None:
    """The greedy pass (``place``'s, or on allocatable the same order by a direct scan): None
    when it places every pod, else the pod set it could not complete and how many of its pods
    it did place after the sets before it."""
    if not empty_cluster:
        scratch: dict[str, Resources] = {}
        out: list[Assignment] = []
        for ps in sorted(pod_sets, key=_size_key):
            remaining = _place_set(ps, cache, scratch, out)
            if remaining:
                return ps, ps.count - remaining
        return None
    nodes = cache.nodes
    charged: dict[str, Resources] = {}
    for ps in sorted(pod_sets, key=_size_key):
        if ps.count <= 0:
            continue
        frees = {
            n: _effective(nodes[n].allocatable, charged.get(n))
            for n in cache.feasible(ps.constraints)
        }
        placed = 0
        for name, free in sorted(frees.items(), key=lambda kv: (kv[1].get(GPU, 0), kv[0])):
            k = resources.max_copies(ps.request, free, ps.count - placed)
            if k:
                resources.add_into(charged.setdefault(name, {}), ps.request, k)
                placed += k
                if placed == ps.count:
                    break
        if placed < ps.count:
            return ps, placed
    return None


def _explain_one(ps: PodSet, cache: CapacityCache, empty_cluster: bool) -> str:
    """``explain`` for one pod set, same text. With one pod set the placement order cannot
    change how many pods fit: it is min(count, sum over feasible nodes of the copies each holds),
    and if any node holds a copy, every resource passes the "most any node has" test (that node
    has enough of each). So: count copies only on nodes that can hold one (the free-capacity
    index, or the groups of identical allocatable for the empty cluster), and only when there
    are none look for the resource that is short."""
    if ps.count <= 0:
        return ""
    feasible = cache.feasible(ps.constraints)
    if not feasible:
        return (
            "no schedulable node without taints"
            if ps.constraints.unconstrained
            else f"no schedulable node matches {ps.constraints.describe()}"
        )
    request = ps.request
    placed = 0
    groups: list[tuple[Resources, int]] = []
    if empty_cluster:
        groups = cache.allocatable_groups(ps.constraints)
        for allocatable, nodes in groups:
            placed += nodes * resources.max_copies(request, allocatable, ps.count)
            if placed >= ps.count:
                return ""
    else:
        placed = cache.copies(request, ps.constraints, ps.count)
        if placed >= ps.count:
            return ""
    if not placed:
        for res, need in sorted(request.items()):
            if empty_cluster:
                most = max(allocatable.get(res, 0) for allocatable, _ in groups)
                offered = most > 0  # allocatable is never negative
            else:
                most = cache.most_free(ps.constraints, res, enough=need)
                offered = need <= most or any(
                    cache.nodes[n].allocatable.get(res, 0) for n in feasible
                )
            if need > most:
                if not offered:
                    return (
                        f"each pod needs {format_milli(res, need)} {res} "
                        f"and no eligible node offers {res} at all"
                    )
                where = "has" if empty_cluster else "has free"
                return (
                    f"each pod needs {format_milli(res, need)} {res} on one "
                    f"node; the most any eligible node {where} is {format_milli(res, most)}"
                )
    room = "the nodes can hold" if empty_cluster else "fit on free capacity now"
    return (
        f"needs {ps.count} pods of "
        f"({resources.describe(ps.request)}) placed together; only {placed} {room}"
    )


# The parts of ``explain``'s texts that move with free capacity (not with the job or the nodes'
# shape): what ``without_amounts`` takes out. Kept beside the texts they match.
_AMOUNTS = (
    (
        re.compile(r"; the most any eligible node has free is \S+"),
        "; no eligible node has that free",
    ),
    (re.compile(r"; only \d+ fit on free capacity now"), "; not all fit on free capacity now"),
    (re.compile(r" \(the first try left room for \d+\)"), ""),
)


def without_amounts(why: str) -> str:
    """``explain``'s text without the amounts of free capacity in it: the same while the job
    waits for the same thing. A waiting job's Event changes when this does, not whenever a pod
    somewhere ends (kube-queue status shows the amounts as they are)."""
    for pattern, stable in _AMOUNTS:
        why = pattern.sub(stable, why)
    return why


def _label(ps: PodSet, pod_sets: Sequence[PodSet]) -> str:
    return f"{ps.name}: " if len(pod_sets) > 1 else ""


# ----------------------------------------------------------------------------- the search
# Work limit of one search, in steps: a value tried for the pods one node takes, a pod set's room
# re-counted on one node, a node charged or sorted into its class on entering a deeper level.
# Counted, not timed, so the same inputs always get the same answer. A step is 1-3 us, so the
# search proper stays under ~10 ms (the set-up before it is linear in the candidate nodes, like
# the greedy pass). It is exhaustive for every job of at most 3 pod sets of at most 3 pods each
# on at most 4 nodes (test_search_budget_covers_the_exact_bounds), and for the usual gang of one
# pod (launcher, head, driver) plus any number of workers on up to ~1,300 candidate nodes of
# distinct free capacity (3 steps each; identical nodes count once).
_SEARCH_STEPS = 4_096


class _GiveUp(Exception):
    """The search used up its steps."""


@dataclass(slots=True)
class _Shape:
    """The pods of the job's pod sets that share one request and one set of constraints: such
    pods are interchangeable, so they are placed as one set and handed back in the sets' order."""

    request: Resources
    count: int
    members: list[PodSet]
    nodes: list[str] = field(default_factory=list)  # could hold one pod at the start, in order
    # How many pods each node could hold now (at most ``count``), kept current while the shape is
    # not placed yet, and their sum: the most pods of the shape that can still be placed (exact
    # for one set), so room < count means this branch cannot succeed.
    copies: dict[str, int] = field(default_factory=dict)
    room: int = 0


@dataclass(frozen=True, slots=True)
class _Searched:
    cache: CapacityCache
    version: int
    nodes_generation: int
    pod_sets: list[PodSet]
    found: list[Assignment] | None
    settled: bool


# The last search's answer per view (key: empty_cluster). The cycle runs place() and, for a job
# that does not fit, explain() right after on the same capacity, which would repeat the same
# search; any change to free capacity or to nodes moves cache.version or cache.nodes_generation.
_last: dict[bool, _Searched] = {}


def _search(
    pod_sets: Sequence[PodSet], cache: CapacityCache, *, empty_cluster: bool
) -> tuple[list[Assignment] | None, bool]:
    """A placement of every pod by search, and whether the answer is certain (True: found, or
    proven impossible; False: out of steps). Called only after the greedy pass failed."""
    sets = list(pod_sets)
    last = _last.get(empty_cluster)
    if not (
        last is not None
        and last.cache is cache
        and last.version == cache.version
        and last.nodes_generation == cache.nodes_generation
        and last.pod_sets == sets
    ):
        found, settled = _search_now(sets, cache, empty_cluster)
        last = _Searched(cache, cache.version, cache.nodes_generation, sets, found, settled)
        _last[empty_cluster] = last
    return (None if last.found is None else list(last.found)), last.settled


def _search_now(
    pod_sets: Sequence[PodSet], cache: CapacityCache, empty_cluster: bool
) -> tuple[list[Assignment] | None, bool]:
    by_key: dict[tuple[object, ...], _Shape] = {}
    for ps in pod_sets:
        if ps.count > 0:
            key = (tuple(sorted(ps.request.items())), ps.constraints)
            shape = by_key.get(key)
            if shape is None:
                by_key[key] = _Shape(ps.request, ps.count, [ps])
            else:
                shape.count += ps.count
                shape.members.append(ps)
    shapes = list(by_key.values())
    states = cache.nodes
    for shape in shapes:
        feasible = cache.feasible(shape.members[0].constraints)
        names: Iterable[str] = feasible
        if not empty_cluster and len(feasible) > _DIRECT_SCAN:
            names = (
                n
                for n in cache.candidates(shape.request, shape.members[0].constraints)
                if n in feasible
            )
        for name in names:
            state = states[name]
            k = resources.max_copies(
                shape.request, state.allocatable if empty_cluster else state.free, shape.count
            )
            if k:
                shape.copies[name] = k
                shape.room += k
        if shape.room < shape.count:  # a set that does not fit on its own: no search needed
            return None, True
    # The nodes' vectors, not copies: _Search copies a node's the first time it charges it.
    free: dict[str, Resources] = {}
    for shape in shapes:
        for name in shape.copies:
            if name not in free:
                state = states[name]
                free[name] = state.allocatable if empty_cluster else state.free
    # All of it together must fit in the sum of what these nodes have (a cheap proof of "no" for
    # jobs that are short of a resource in total, which the search could only reach by
    # exhausting every split).
    need: Resources = {}
    for shape in shapes:
        resources.add_into(need, shape.request, shape.count)
    for res, amount in need.items():
        if amount > sum(max(0, f.get(res, 0)) for f in free.values()):
            return None, True
    # Node order: the greedy's (tightest GPU node first, then by name): deterministic, and the
    # first branch the search takes is close to the greedy's choice.
    rank = {n: i for i, n in enumerate(sorted(free, key=lambda n: (free[n].get(GPU, 0), n)))}
    for shape in shapes:
        shape.nodes = sorted(shape.copies, key=rank.__getitem__)
    search = _Search(shapes, free, _SEARCH_STEPS)
    try:
        found = search.run()
    except _GiveUp:
        return None, False
    return (search.assignments(rank) if found else None), True


class _Search:
    """Depth-first search over pod sets, one level per shape, exhaustive within its steps.

    Shapes are placed in order of pod count, the biggest last: for the last one no choice is
    needed (for one set the most pods that fit is the sum of what each node holds, kept current
    in ``_Shape.room``), so the common gang of a few pods plus many is a search over where the
    few go. At each level:

    - nodes no later shape can use take as many of the shape's pods as they hold: moving pods
      there from elsewhere never hurts, so no branch is lost;
    - the rest is spread over the shared nodes, trying every split (the most on the first node
      first); nodes that are interchangeable (same free vector, usable by the same later shapes)
      take non-increasing counts, so no split is tried twice up to their order;
    - each charge re-counts, on that node only, the room of every later shape, and the branch is
      cut as soon as one of them cannot be placed even on its own.

    When it finishes within its steps its answer is exact, and so monotone in free capacity
    (what the cycle's "did not fit, nothing it could use was freed, still does not fit" skips
    assume); when it runs out, the answer is no, as the greedy pass's was before the search.
    """

    def __init__(self, shapes: list[_Shape], free: dict[str, Resources], budget: int) -> None:
        self.shapes = shapes
        self.free = free  # the cache's own vectors until _charge copies them
        self.copied: set[str] = set()
        self.budget = budget
        self.steps = 0
        order = sorted(
            range(len(shapes)),
            key=lambda i: (shapes[i].count, _request_key(shapes[i].request), i),
        )
        self.order = order
        self.pending = [True] * len(shapes)  # not placed yet: their room is kept current
        self.users: dict[str, list[int]] = {n: [] for n in free}
        self.masks = dict.fromkeys(free, 0)  # the same as users, as a bit set
        for i, shape in enumerate(shapes):
            for name in shape.nodes:
                self.users[name].append(i)
                self.masks[name] |= 1 << i
        # Per level: the shape's nodes no later shape can use, and the others.
        self.private: list[list[str]] = []
        self.shared: list[list[str]] = []
        for t, i in enumerate(order):
            later = {n for j in order[t + 1 :] for n in shapes[j].nodes}
            self.private.append([n for n in shapes[i].nodes if n not in later])
            self.shared.append([n for n in shapes[i].nodes if n in later])
        self.placed: list[tuple[int, str, int]] = []  # (shape, node, pods), in charge order
        self.trail: list[tuple[int, str, int]] = []  # (shape, node, copies before), for undo

    def run(self) -> bool:
        return self._level(0)

    def _level(self, t: int) -> bool:
        i = self.order[t]
        shape = self.shapes[i]
        self.pending[i] = False
        left = shape.count
        if t == len(self.order) - 1:
            # The last shape: room >= count holds (every charge checked it), so this fills.
            for name in shape.nodes:
                k = min(shape.copies[name], left)
                if k:
                    self.placed.append((i, name, k))
                    left -= k
                    if not left:
                        return True
            raise AssertionError("room said the last pod set fits")  # pragma: no cover
        private = []
        for name in self.private[t]:
            k = min(shape.copies[name], left)
            if k:
                private.append((name, k, len(self.trail)))
                self._charge(i, name, k)  # no later shape uses it: nothing to re-count
                self._spend(1)
                left -= k
                if not left:
                    break
        if not left:
            if self._level(t + 1):
                return True
        else:
            for _ in self._spread(i, self.shared[t], left, setup=t == 0):
                if self._level(t + 1):
                    return True
        for name, k, mark in reversed(private):
            self._uncharge(i, name, k, mark)
        self.pending[i] = True
        return False

    def _spread(self, i: int, shared: list[str], left: int, setup: bool) -> Iterator[None]:
        """Every split of ``left`` pods of shape ``i`` over ``shared`` that keeps each later shape
        placeable on its own, charged; yields with each one in place, undoes it on resume.
        (``setup``: the first level, entered once, where sorting the nodes into classes is part
        of the linear set-up rather than of the search's steps.)"""
        shape = self.shapes[i]
        free = self.free
        # Interchangeable nodes next to each other (in the order of their first member).
        later = sum(1 << j for j, waiting in enumerate(self.pending) if waiting)
        masks = self.masks
        classes: dict[tuple[frozenset[tuple[str, int]], int], list[str]] = {}
        for name in shared:
            key = (frozenset(free[name].items()), masks[name] & later)
            classes.setdefault(key, []).append(name)
        if not setup:
            self._spend(len(shared))
        nodes: list[str] = []
        same: list[bool] = []  # same class as the node before
        ends: list[int] = []  # the position just past the node's class
        for members in classes.values():
            nodes += members
            same += [False] + [True] * (len(members) - 1)
            ends += [len(nodes)] * len(members)
        caps = [min(shape.copies[n], left) for n in nodes]  # equal within a class
        m = len(nodes)
        suffix = [0] * (m + 1)
        for p in range(m - 1, -1, -1):
            suffix[p] = suffix[p + 1] + caps[p]
        if suffix[0] < left:
            return
        # (position, pods, trail mark) per position tried; a 0 stands for the rest of its class
        stack: list[tuple[int, int, int]] = []
        p = 0
        k = min(caps[0], left)
        while True:
            end = ends[p]
            # Taking k here, the rest of the class takes at most k each: if that and the nodes
            # after cannot hold what is left, neither can any smaller k.
            if k < 0 or k * (end - p) + suffix[end] < left:
                if not stack:
                    return
                p, taken, mark = stack.pop()
                if taken:
                    self._uncharge(i, nodes[p], taken, mark)
                    left += taken
                k = taken - 1
                continue
            self._spend(1)
            mark = len(self.trail)
            if k and not self._charge(i, nodes[p], k):
                self._uncharge(i, nodes[p], k, mark)
                k -= 1
                continue
            stack.append((p, k, mark))
            left -= k
            if not left:
                yield
                p, taken, mark = stack.pop()
                self._uncharge(i, nodes[p], taken, mark)
                left += taken
                k = taken - 1
                continue
            p = end if k == 0 else p + 1  # none here: none on the rest of the class either
            k = min(caps[p], left)
            if same[p]:
                k = min(k, stack[-1][1])

    def _charge(self, i: int, name: str, k: int) -> bool:
        """Put ``k`` pods of shape ``i`` on ``name``; False if a later shape no longer fits."""
        shapes = self.shapes
        request = shapes[i].request
        if name in self.copied:
            free = self.free[name]
        else:
            free = self.free[name] = dict(self.free[name])
            self.copied.add(name)
        for res, amount in request.items():
            free[res] = free.get(res, 0) - amount * k
        self.placed.append((i, name, k))
        pending = self.pending
        probes = 0
        ok = True
        for j in self.users[name]:
            if pending[j]:
                probes += 1
                later = shapes[j]
                copies = resources.max_copies(later.request, free, later.count)
                before = later.copies[name]
                if copies != before:
                    self.trail.append((j, name, before))
                    later.copies[name] = copies
                    later.room += copies - before
                    if later.room < later.count:
                        ok = False
                        break
        self._spend(probes)
        return ok

    def _uncharge(self, i: int, name: str, k: int, mark: int) -> None:
        trail = self.trail
        shapes = self.shapes
        while len(trail) > mark:
            j, node, before = trail.pop()
            later = shapes[j]
            later.room += before - later.copies[node]
            later.copies[node] = before
        resources.add_into(self.free[name], shapes[i].request, k)
        self.placed.pop()

    def _spend(self, steps: int) -> None:
        self.steps += steps
        if self.steps > self.budget:
            raise _GiveUp

    def assignments(self, rank: Mapping[str, int]) -> list[Assignment]:
        """The placement found, per pod set in the job's order, nodes in node order."""
        per_shape: list[list[tuple[str, int]]] = [[] for _ in self.shapes]
        for i, name, k in self.placed:
            per_shape[i].append((name, k))
        for spread in per_shape:
            spread.sort(key=lambda nk: rank[nk[0]])
        out: list[Assignment] = []
        for i, shape in enumerate(self.shapes):
            spread = per_shape[i]
            at = 0
            for ps in shape.members:
                need = ps.count
                while need:
                    name, k = spread[at]
                    take = min(k, need)
                    out.append(Assignment(ps.name, name, take, ps.request))
                    need -= take
                    if take == k:
                        at += 1
                    else:
                        spread[at] = (name, k - take)
        return out


def _request_key(request: Mapping[str, int]) -> tuple[int, int, int]:
    return (-request.get(GPU, 0), -request.get("cpu", 0), -request.get("memory", 0))
