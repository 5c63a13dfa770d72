"""A gang inside one topology domain: a rack, a network block, an NVLink domain.

A topology level is a node label (``topology.kubernetes.io/zone``, a rack label,
``nvidia.com/gpu.clique``); a domain is one value of it, i.e. the schedulable nodes carrying that
value. A pod set asks for its pods together in one domain of a level (demand.py: ``topology_of``,
on the job for every pod set, or on a pod template for its own): *required*, or *preferred* (the
level's domains first, then each coarser level's the admin declared with ``--topology-levels``,
then anywhere).

Choosing the domain: every domain where the whole gang fits (the same per-node fit as any job,
confined to the domain's nodes by one more nodeSelector term), and among them the one it fills
most, i.e. with the least free room left after it (GPUs, then CPU): big domains stay whole for
big gangs. Ties go to the placement on fewer nodes (less fragmented), then to the domain name,
so the choice is deterministic. Within the domain the fit is the usual one, and pinning
(capacity/pins.py) makes it true: each pod's nodeSelector names its node.

The gang is the pod set that asks (the default *pod-set scope*): each pod set that asks gets a
domain of its own, maybe not its siblings'. With the job's ``kube-queue.io/topology-scope: job``
every pod set carries the job's request marked ``whole_job``, and the whole job goes in one
domain (``place_together``). For several pod sets with domains of their own (``_place_each``)
the sets that ask are placed one after another, biggest first, each in its best domain given the
room the earlier ones took, and the sets that do not ask last, anywhere. That greedy pass is not
exhaustive, so when it fails the whole job in one domain is tried before the answer is no (one
domain for all satisfies every set's request of that level): a job whose sets require one level
(or only prefer) is admitted in pod-set scope whenever it would be in job scope.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from kubequeue import resources
from kubequeue.capacity.cache import CapacityCache
from kubequeue.capacity.fit import Assignment, explain, place, place_counted, place_some
from kubequeue.demand import PodSet
from kubequeue.resources import GPU
from kubequeue.scheduling import NodeConstraints, TopologyRequest, is_label_key

__all__ = [
    "Chosen",
    "Placed",
    "Placement",
    "confine",
    "domain_annotation",
    "explain_together",
    "place_job",
    "place_job_in",
    "place_together",
    "recorded_domains",
    "request_of",
    "within_recorded",
]


@dataclass(frozen=True, slots=True)
class Placed:
    assignments: list[Assignment]
    level: str | None  # None: anywhere (a preferred topology that fit nowhere tighter)
    domain: str | None


@dataclass(frozen=True, slots=True)
class Chosen:
    """The domain a placement put a gang in: ``pod_set``'s pods (None: the whole job's) all on
    nodes whose label ``level`` is ``domain``. Carried to the admission (its Event, and the
    ``kube-queue.io/topology-domain`` annotation) so nothing has to re-derive it from labels."""

    pod_set: str | None
    level: str
    domain: str


@dataclass(frozen=True, slots=True)
class Placement:
    """A job's placement and the domains it chose (none for a job without topology, or a
    preferred one placed anywhere)."""

    assignments: list[Assignment]
    domains: tuple[Chosen, ...] = ()


def domain_annotation(domains: Sequence[Chosen]) -> str | None:
    """The ``kube-queue.io/topology-domain`` value: ``<level>=<domain>`` for one domain,
    ``<pod set>=<level>=<domain>,...`` for several; None for none."""
    if not domains:
        return None
    if len(domains) == 1:
        return f"{domains[0].level}={domains[0].domain}"
    return ",".join(f"{d.pod_set}={d.level}={d.domain}" for d in domains)


def recorded_domains(value: object) -> tuple[Chosen, ...]:
    """``domain_annotation`` read back from an admitted job (the edge: the value is the job's,
    anyone with write access may have edited it): entries that are not ``<level>=<domain>`` or
    ``<pod set>=<level>=<domain>`` with a label key and a non-empty value are skipped."""
    if not isinstance(value, str) or len(value) > 4096:
        return ()
    out = []
    for entry in value.split(","):
        parts = entry.split("=")
        if len(parts) == 2:
            pod_set, (level, domain) = None, parts
        elif len(parts) == 3:
            pod_set, level, domain = parts
        else:
            continue
        if is_label_key(level) and domain and len(domain) <= 63 and pod_set != "":
            out.append(Chosen(pod_set, level, domain))
    return tuple(out)


def within_recorded(
    pod_sets: Sequence[PodSet], domains: Sequence[Chosen], cache: CapacityCache
) -> Sequence[PodSet]:
    """An admitted job's pod sets confined to the domains its admission recorded, so that
    the pods it misses (after a restart, or a replacement of a failed pod) are held, and then
    pinned, beside their siblings rather than wherever room is. A domain no schedulable node
    has any more (or never had: a forged value) confines nothing: better held anywhere than
    not at all."""
    if not domains:
        return pod_sets
    out = []
    for ps in pod_sets:
        mine = [d for d in domains if d.pod_set in (None, ps.name)]
        confined = [ps]
        if len(mine) == 1 and mine[0].domain in cache.domains(mine[0].level):
            confined = confine([ps], mine[0].level, mine[0].domain, cache) or [ps]
        out.append(confined[0])
    return out


def request_of(pod_sets: Sequence[PodSet]) -> TopologyRequest | None:
    """The job's topology: the first pod set that asks, required before preferred."""
    asked = [ps.topology for ps in pod_sets if ps.topology is not None]
    if not asked:
        return None
    required = [t for t in asked if t.required]
    return required[0] if required else asked[0]


def confine(
    pod_sets: Sequence[PodSet], level: str, domain: str, cache: CapacityCache | None = None
) -> list[PodSet]:
    """The pod sets, allowed only onto the domain's nodes. With ``cache``, the nodes each
    confined set may use are worked out from the domain's own nodes (``confined_feasible``),
    not by testing every node of the cluster against the new constraints: with thousands of
    racks, one such scan per rack tried made topology placement cost nodes x racks."""
    out = []
    for ps in pod_sets:
        c = ps.constraints
        selector = dict(c.node_selector)
        if selector.get(level, domain) != domain:
            return []  # its own nodeSelector names another domain of this level
        selector[level] = domain
        confined = NodeConstraints(tuple(sorted(selector.items())), c.terms, c.tolerations)
        if cache is not None:
            cache.confined_feasible(c, confined, level, domain)
        out.append(replace(ps, constraints=confined))
    return out


def _levels(request: TopologyRequest, declared: Sequence[str]) -> list[str | None]:
    if request.required:
        return [request.level]
    out: list[str | None] = [request.level]
    if request.level in declared:  # coarsest first: fall back towards the start
        out += reversed(declared[: declared.index(request.level)])
    out.append(None)
    return out


def place_together(
    pod_sets: Sequence[PodSet], cache: CapacityCache, declared: Sequence[str] = ()
) -> Placed | None:
    """The placement of all of ``pod_sets`` in the best domain (module docstring), or None if
    they fit in no domain of a required level (the job's topology: ``request_of``)."""
    request = request_of(pod_sets)
    if request is None:
        placed = place(pod_sets, cache)
        return Placed(placed, None, None) if placed is not None else None
    need_gpu = sum(ps.request.get(GPU, 0) * ps.count for ps in pod_sets)
    need_cpu = sum(ps.request.get("cpu", 0) * ps.count for ps in pod_sets)
    fewest = not request.required
    for level in _levels(request, declared):
        if level is None:
            placed = _fewest(pod_sets, cache, request.level) if fewest else None
            if placed is None:
                placed = place(pod_sets, cache)
            return Placed(placed, None, None) if placed is not None else None
        # Tightest first: the first domain that holds the gang is the best one, but for ties
        # (the same room left), among which fewer nodes and then the name decide.
        candidates = sorted(
            ((gpu - need_gpu, cpu - need_cpu), domain)
            for domain, (gpu, cpu) in cache.domain_free(level).items()
            if gpu >= need_gpu and cpu >= need_cpu
        )  # (a domain whose sum cannot hold the gang is not tried)
        best: tuple[tuple[int, int, int, str], Placed] | None = None
        for left, domain in candidates:
            if best is not None and left != best[0][:2]:
                break
            confined = confine(pod_sets, level, domain, cache)
            placed = place(confined, cache) if confined else None
            if placed is not None and fewest and level != request.level:
                # A coarser domain of a preferred gang: within it, the fewest of the asked
                # level's domains (one block, and in it as few racks as possible).
                placed = _fewest(confined, cache, request.level) or placed
            if placed is None:
                continue
            key = (*left, len({a.node for a in placed}), domain)
            if best is None or key < best[0]:
                best = (key, Placed(placed, level, domain))
        if best is not None:
            return best[1]
    return None


def _fewest(
    pod_sets: Sequence[PodSet], cache: CapacityCache, level: str
) -> list[Assignment] | None:
    """A preferred gang that no one domain of ``level`` holds, over as few of them as possible:
    domains in the order of how many of its pods each holds, each taking as many as fit. For
    one pod set (identical pods) that is the fewest domains: what one domain takes does not
    change what another holds, so the largest counts first cover the gang soonest. For several
    pod sets the domains go by free GPUs (then CPU), close to it. None if the domains together
    cannot hold the gang (nodes without the label may: the caller then places anywhere)."""
    rooms = cache.domain_free(level)
    if len(pod_sets) == 1:
        counts = []
        for domain in rooms:
            confined = confine(pod_sets, level, domain, cache)
            held = place_counted(confined[0], cache)[1] if confined else 0
            if held:
                counts.append((-held, domain))
        order = [domain for _, domain in sorted(counts)]
    else:
        order = [d for d, _ in sorted(rooms.items(), key=lambda i: (-i[1][0], -i[1][1], i[0]))]
    taken: dict[str, dict[str, int]] = {}
    out: list[Assignment] = []
    for ps in pod_sets:
        left = ps.count
        for domain in order:
            if not left:
                break
            confined = confine([replace(ps, count=left)], level, domain, cache)
            if confined:
                left = place_some(confined[0], cache, taken, out)
        if left:
            return None
    return _merged(out)


def _merged(assignments: list[Assignment]) -> list[Assignment]:
    """One assignment per (pod set, node), as ``place`` reports them."""
    merged: dict[tuple[str, str], Assignment] = {}
    for a in assignments:
        key = (a.pod_set, a.node)
        found = merged.get(key)
        merged[key] = a if found is None else replace(found, count=found.count + a.count)
    return list(merged.values())


def place_job(pod_sets: Sequence[PodSet], cache: CapacityCache) -> list[Assignment] | None:
    """``fit.place`` for any job: in one domain when it asks for a topology. What admission,
    preemption (victims are chosen so the room they free is in one domain) and node holds
    (a starved gang gets a domain held, not scattered nodes) all place with."""
    found = place_job_in(pod_sets, cache)
    return found.assignments if found is not None else None


def place_job_in(pod_sets: Sequence[PodSet], cache: CapacityCache) -> Placement | None:
    """``place_job``, with the domains chosen (for the admission to carry)."""
    if all(ps.topology is None for ps in pod_sets):
        placed = place(pod_sets, cache)
        return Placement(placed) if placed is not None else None
    if _per_set(pod_sets):
        return _place_each(pod_sets, cache, cache.topology_levels)
    return _whole(place_together(pod_sets, cache, cache.topology_levels))


def _whole(found: Placed | None) -> Placement | None:
    if found is None:
        return None
    if found.level is None or found.domain is None:
        return Placement(found.assignments)
    return Placement(found.assignments, (Chosen(None, found.level, found.domain),))


def _per_set(pod_sets: Sequence[PodSet]) -> bool:
    """Whether the job's pod sets ask for domains of their own (pod-set scope, more than one
    pod set), rather than the whole job for one."""
    return len(pod_sets) > 1 and not any(
        ps.topology is not None and ps.topology.whole_job for ps in pod_sets
    )


def _asking(pod_sets: Sequence[PodSet]) -> list[PodSet]:
    """The pod sets that ask for a domain, in the order they are placed: required first, then
    the biggest (GPUs, then CPU, in total), then by name."""

    def order(ps: PodSet) -> tuple[bool, int, int, str]:
        t = ps.topology
        assert t is not None
        gpu = ps.request.get(GPU, 0) * ps.count
        return (not t.required, -gpu, -ps.request.get("cpu", 0) * ps.count, ps.name)

    return sorted((ps for ps in pod_sets if ps.topology is not None and ps.count > 0), key=order)


def _place_each(
    pod_sets: Sequence[PodSet], cache: CapacityCache, declared: Sequence[str]
) -> Placement | None:
    """Each pod set that asks in a domain of its own (module docstring), else the whole job in
    one domain, else None."""
    asking = _asking(pod_sets)
    rest = [ps for ps in pod_sets if ps.topology is None]
    feasible: set[str] = set()
    for ps in pod_sets:
        feasible |= cache.feasible(ps.constraints)
    scratch = cache.scratch(feasible)  # the room the sets placed so far took, charged
    out: list[Assignment] = []
    chosen: list[Chosen] = []
    for ps in asking:
        found = place_together([ps], scratch, declared)
        if found is None:
            return _one_domain(pod_sets, cache, declared)
        for a in found.assignments:
            taken: dict[str, int] = {}
            resources.add_into(taken, a.request, a.count)
            scratch.adjust_free(a.node, taken, -1)
        out += found.assignments
        if found.level is not None and found.domain is not None:
            chosen.append(Chosen(ps.name, found.level, found.domain))
    if rest:
        placed = place(rest, scratch)
        if placed is None:
            return _one_domain(pod_sets, cache, declared)
        out += placed
    return Placement(out, tuple(chosen))


def _one_domain(
    pod_sets: Sequence[PodSet], cache: CapacityCache, declared: Sequence[str]
) -> Placement | None:
    """The whole job in one domain of the level its pod sets require (of the first that asks,
    if none requires one), which satisfies every set's request; None if sets require different
    levels (one domain of one level need not be one domain of the other)."""
    request = request_of(pod_sets)
    if request is None or any(
        ps.topology is not None and ps.topology.required and ps.topology.level != request.level
        for ps in pod_sets
    ):
        return None
    return _whole(place_together(pod_sets, cache, declared))


def explain_together(
    pod_sets: Sequence[PodSet], cache: CapacityCache, *, empty_cluster: bool = False
) -> str:
    """Why the gang fits in no domain of its required level (``""`` if it does somewhere,
    or asks for no required topology); for pod sets with domains of their own, the first pod
    set that fits in none even alone, else why they do not fit all at once."""
    if _per_set(pod_sets) and any(ps.topology is not None for ps in pod_sets):
        return _explain_each(pod_sets, cache, empty_cluster)
    request = request_of(pod_sets)
    if request is None or not request.required:
        return explain(pod_sets, cache, empty_cluster=empty_cluster)
    level = request.level
    domains = cache.domains(level)
    total = sum(ps.count for ps in pod_sets)
    shape = (
        f"{pod_sets[0].count} pods x {_size(pod_sets[0])}"
        if len(pod_sets) == 1
        else f"all {total} pods"
    )
    if not domains:
        return f"needs {shape} in one {level}, and no schedulable node has the label {level}"
    best_room, best_domain = -1, ""
    for domain in sorted(domains):
        confined = confine(pod_sets, level, domain, cache)
        if not confined:
            continue
        if not explain(confined, cache, empty_cluster=empty_cluster):
            return ""
        if len(confined) == 1 and not empty_cluster:
            room = place_counted(confined[0], cache)[1]
            if room > best_room:
                best_room, best_domain = room, domain
    if best_domain:
        return (
            f"needs {shape} in one {level}; the best domain ({best_domain}) has room for "
            f"{best_room}"
        )
    where = "even on an empty cluster, " if empty_cluster else ""
    return f"needs {shape} in one {level}; {where}no {level} domain can hold them"


def _explain_each(pod_sets: Sequence[PodSet], cache: CapacityCache, empty_cluster: bool) -> str:
    """``explain_together`` for pod sets with domains of their own. Each set alone first (exact,
    like a one-set job's reasons), then the sets without topology alone; with
    ``empty_cluster`` then only what is proven (all of it fits nowhere even unconfined: a
    "never fits" must be a proof), otherwise, if the placement fails, that it does."""
    asking = _asking(pod_sets)
    for ps in asking:
        why = explain_together([ps], cache, empty_cluster=empty_cluster)
        if why:
            return f"{ps.name}: {why}"
    rest = [ps for ps in pod_sets if ps.topology is None]
    if rest:
        why = explain(rest, cache, empty_cluster=empty_cluster)
        if why:
            return why if len(rest) > 1 else f"{rest[0].name}: {why}"
    if empty_cluster:
        return explain(pod_sets, cache, empty_cluster=True)
    if place_job_in(pod_sets, cache) is not None:
        return ""
    why = explain(pod_sets, cache)
    if why:
        return why
    asks = ", ".join(f"{ps.name} {ps.topology.describe()}" for ps in asking if ps.topology)
    return (
        f"each pod set fits on its own ({asks}), but no placement was found for all of them at "
        "once, each in a domain of its own or all in one"
    )


def _size(ps: PodSet) -> str:
    gpu = ps.request.get(GPU, 0)
    if gpu:
        return f"{gpu // 1000} {GPU}"
    return f"{ps.request.get('cpu', 0)}m cpu"
