"""Gang placement: can every pod of a job be put on some node right now?

The simulation places pod sets biggest-first, each pod on the tightest node that still has room
(first-fit decreasing over the free-capacity index), charging a scratch overlay so pods of the
same job never share capacity twice. All pods fit or the answer is no: a job that half-starts holds
GPUs it cannot use, which is the waste kube-queue exists to prevent.

``place`` is the hot path and only answers yes (with the placement) or no. ``explain`` runs the
same simulation again on the rare path where a user-facing reason is needed, and with
``empty_cluster=True`` it judges against allocatable only: "could this job ever fit here?".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from kubequeue import resources
from kubequeue.capacity.cache import CapacityCache
from kubequeue.demand import PodSet
from kubequeue.quantity import format_milli
from kubequeue.resources import GPU, Resources

__all__ = ["Assignment", "explain", "place", "place_counted"]

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
    return (n for n in cache.candidates(ps.request) if n in feasible)


def place(pod_sets: Sequence[PodSet], cache: CapacityCache) -> list[Assignment] | None:
    """A placement of every pod on current free capacity, or None if the gang does not fit."""
    scratch: dict[str, Resources] = {}
    out: list[Assignment] = []
    for ps in sorted(pod_sets, key=_size_key):
        if _place_set(ps, cache, scratch, out):
            return None
    return out


def place_counted(ps: PodSet, cache: CapacityCache) -> tuple[list[Assignment] | None, int]:
    """``place([ps])``, and how many of its pods fit: ``ps.count`` when it does, otherwise the
    most that current free capacity can hold (every node was tried), which bounds later tries."""
    out: list[Assignment] = []
    remaining = _place_set(ps, cache, {}, out)
    if remaining:
        return None, ps.count - remaining
    return out, ps.count


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
    for name in _candidates(cache, ps, feasible):
        free = _effective(nodes[name].free, scratch.get(name))
        k = resources.max_copies(request, free, remaining)
        if k:
            resources.add_into(scratch.setdefault(name, {}), request, k)
            out.append(Assignment(ps.name, name, k, request))
            remaining -= k
            if not remaining:
                break
    return remaining


def explain(
    pod_sets: Sequence[PodSet], cache: CapacityCache, *, empty_cluster: bool = False
) -> str:
    """Why the gang does not fit (``""`` if it does). Slow path: scans every feasible node
    (except for a single pod set, where _explain_one reaches the same text cheaper)."""
    if len(pod_sets) == 1:
        return _explain_one(pod_sets[0], cache, empty_cluster)
    scratch: dict[str, Resources] = {}
    for ps in sorted(pod_sets, key=_size_key):
        if ps.count <= 0:
            continue
        feasible = cache.feasible(ps.constraints)
        if not feasible:
            what = (
                "no schedulable node without taints"
                if ps.constraints.unconstrained
                else f"no schedulable node matches {ps.constraints.describe()}"
            )
            return f"{_label(ps, pod_sets)}{what}"
        frees = {
            n: _effective(
                cache.nodes[n].allocatable if empty_cluster else cache.nodes[n].free,
                scratch.get(n),
            )
            for n in feasible
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
        for name, free in sorted(frees.items(), key=lambda kv: (kv[1].get(GPU, 0), kv[0])):
            k = resources.max_copies(ps.request, free, ps.count - placed)
            if k:
                resources.add_into(scratch.setdefault(name, {}), ps.request, k)
                placed += k
                if placed == ps.count:
                    break
        if placed < ps.count:
            room = "the nodes can hold" if empty_cluster else "fit on free capacity now"
            return (
                f"{_label(ps, pod_sets)}needs {ps.count} pods of "
                f"({resources.describe(ps.request)}) placed together; only {placed} {room}"
            )
    return ""


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
        states = cache.nodes
        for name in cache.candidates(request):
            if name in feasible:
                placed += resources.max_copies(request, states[name].free, ps.count - placed)
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


def _label(ps: PodSet, pod_sets: Sequence[PodSet]) -> str:
    return f"{ps.name}: " if len(pod_sets) > 1 else ""
