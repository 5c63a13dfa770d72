"""Whether the pods admitted but not bound yet can all still be placed, whatever the scheduler does.

A hold reserves room for each admitted pod on a node of our choosing, but kube-scheduler binds
the pods in its own order (the order their controllers create them) and scores nodes its own way
(LeastAllocated, MostAllocated, weights we cannot read). While room is plentiful that changes
nothing. When it is tight, one admitted pod can take the node another was planned for, and the
other stays Pending: a 1-GPU pod created before a 2-GPU one takes the tightest node, the one the
2-GPU pod needed. Our holds then say the cluster fits while a pod waits (the debt rule in
reservations.py limits the damage afterwards; this module avoids it beforehand).

The check needs no model of the scheduler's scoring or order. For a pod *shape* s (a request r
and the nodes its constraints allow), count its **slots**: over the allowed nodes, how many
copies of r fit into what the node has free of *bound* pods (holds not subtracted: a pod in
flight may end up anywhere). A pod q of any shape, bound on any node, takes at most

    cost_s(q) = max over resources x that r requests of ceil(q[x] / r[x])

slots of shape s from that node, because floor((f - q) / r) >= floor(f / r) - ceil(q / r) for
each resource and a node's slots are the least over resources. So if

    slots(s) >= sum of cost_s(q) over every pod q in flight (those of shape s included),

each in-flight pod of shape s still finds a node whatever the others did before it: they took
at most slots(s) - 1 slots. When that holds for every shape in flight, no binding order and no
scoring can leave one of them without room. A job is admitted now only if adding its pods keeps
it so; otherwise it waits until pods in flight are bound (their nodes are then known and count
as used, which usually restores the margin), for a bounded time (admission/cycle.py).

It is a sufficient condition, so it is pessimistic: it assumes the worst placement of every
other pod, which a packing scheduler will not choose. It only bites when the margin is thin (a
whole free node wanted while many pods are in flight); a shape that was already short before
the job (pods displaced earlier, or pods the scheduler refuses for reasons we do not model) does
not hold back jobs that do not make it shorter. Because it bites whenever hundreds of pods are
in flight (a burst, while the Job controller has not created them yet), it is off unless
``--binding-wait`` is set (docs/design.md, docs/benchmarks.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from kubequeue import resources
from kubequeue.capacity.cache import CapacityCache
from kubequeue.demand import PodSet
from kubequeue.scheduling import NodeConstraints

__all__ = ["BindingGuard", "Shape", "cost", "shape_of", "slots"]

# A pod shape: its request (as items, hashable) and its constraints.
Shape = tuple[tuple[tuple[str, int], ...], NodeConstraints]


def shape_of(request: Mapping[str, int], constraints: NodeConstraints) -> Shape:
    return (tuple(sorted(request.items())), constraints)


def cost(of: Mapping[str, int], on: Mapping[str, int]) -> int:
    """At most how many slots of request ``on`` one pod requesting ``of`` can take from a node."""
    worst = 0
    for name, unit in on.items():
        if unit <= 0:
            continue
        amount = of.get(name, 0)
        if amount > 0:
            worst = max(worst, -(-amount // unit))
    return worst


class BindingGuard:
    """Per admission cycle: would admitting these pod sets leave some pod in flight no room?

    ``inflight`` is the live count of held (unbound) pods per shape, with each shape's request
    and constraints (Reservations.inflight), and ``version`` moves whenever it changes. The
    load each shape bears from the pods in flight is computed once per shape and then kept up
    to date by ``admitted`` (each admission adds its pods' costs), so a question costs the
    number of shapes in flight, not its square; any other change is seen by the version and
    the loads are recomputed."""

    __slots__ = (
        "_cache",
        "_costs",
        "_held_nodes",
        "_inflight",
        "_loads",
        "_pre",
        "_seen",
        "_slots",
        "_version",
    )

    def __init__(
        self,
        cache: CapacityCache,
        inflight: Mapping[Shape, tuple[Mapping[str, int], NodeConstraints, int]],
        held_nodes: Callable[[], Iterable[str]],
        version: Callable[[], int],
    ) -> None:
        self._cache = cache
        self._inflight = inflight
        self._held_nodes = held_nodes
        self._version = version
        # Slots per shape: what bound pods leave free does not move within a cycle (a hold
        # takes from free what it adds to reserved), so these stay true for the whole cycle.
        # Value: (count, exact); not exact means "at least count".
        self._slots: dict[Shape, tuple[int, bool]] = {}
        self._costs: dict[tuple[Shape, Shape], int] = {}
        # Per shape, the slots the pods in flight can take (as of version _seen), and its
        # request.
        self._loads: dict[Shape, tuple[int, Mapping[str, int]]] = {}
        self._seen = -1
        self._pre = -2

    def start(self) -> None:
        """A new cycle: pods may have been bound or ended since the last one."""
        self._slots.clear()
        self._loads.clear()
        self._seen = -1
        if len(self._costs) > 65_536:
            self._costs.clear()

    def admits(self, pod_sets: Sequence[PodSet]) -> bool:
        """Whether these pods can join the ones in flight without any of them (new or not)
        risking to find no node, or at least without making a shape shorter than it was."""
        inflight = self._inflight
        if not inflight and len(pod_sets) == 1:
            return True  # identical pods: the fit that placed them found this many slots
        version = self._version()
        if version != self._seen:
            self._loads.clear()
            self._seen = version
        new = _pods(pod_sets)
        new_shapes = {shape for shape, _ in new}
        for shape, (request, constraints, _) in new:
            need = self._base(shape, request) + self._load(shape, request, new)
            if self._slots_at_least(shape, request, constraints, need) < need:
                return False
        for shape, (held, held_constraints, _) in inflight.items():
            if shape in new_shapes:
                continue
            base = self._base(shape, held)
            need = base + self._load(shape, held, new)
            have = self._slots_at_least(shape, held, held_constraints, need)
            if have < need and have >= base:
                return False
        return True

    def holding(self) -> None:
        """The cycle is about to hold an admission's pods (call ``admitted`` after)."""
        self._pre = self._version()

    def admitted(self, pod_sets: Sequence[PodSet]) -> None:
        """The cycle held these pods: add their costs to the loads known, unless something
        else changed the pods in flight since the loads were computed."""
        if self._pre != self._seen:
            return  # the next question recomputes
        pods = _pods(pod_sets)
        loads = self._loads
        for shape, (load, request) in loads.items():
            loads[shape] = (load + self._load(shape, request, pods), request)
        self._seen = self._version()

    def _base(self, shape: Shape, request: Mapping[str, int]) -> int:
        """The slots of ``shape`` the pods in flight can take."""
        known = self._loads.get(shape)
        if known is not None:
            return known[0]
        load = self._load(shape, request, self._inflight.items())
        self._loads[shape] = (load, request)
        return load

    def _load(
        self,
        shape: Shape,
        request: Mapping[str, int],
        pods: Iterable[tuple[Shape, tuple[Mapping[str, int], NodeConstraints, int]]],
    ) -> int:
        """Slots of ``shape`` these pods can take at most, wherever they are bound."""
        costs = self._costs
        total = 0
        for other, (other_request, _, count) in pods:
            if count <= 0:
                continue
            key = (shape, other)
            each = costs.get(key)
            if each is None:
                each = costs[key] = cost(other_request, request)
            total += each * count
        return total

    def _slots_at_least(
        self, shape: Shape, request: Mapping[str, int], constraints: NodeConstraints, need: int
    ) -> int:
        """The shape's slots if fewer than ``need``, else some count >= ``need``."""
        known = self._slots.get(shape)
        if known is not None and (known[1] or known[0] >= need):
            return known[0]
        # Ask for twice as many: the load grows with each admission of the cycle, and a count
        # that reaches its limit is only a lower bound to be raised (amortised, as a list grows).
        limit = 2 * need + 16
        found = slots(self._cache, self._held_nodes(), request, constraints, limit)
        self._slots[shape] = (found, found < limit)
        return found


def _pods(
    pod_sets: Sequence[PodSet],
) -> list[tuple[Shape, tuple[Mapping[str, int], NodeConstraints, int]]]:
    """Pod sets as entries of the in-flight map (shape -> request, constraints, pods)."""
    return [
        (shape_of(ps.request, ps.constraints), (ps.request, ps.constraints, ps.count))
        for ps in pod_sets
        if ps.count > 0
    ]


def slots(
    cache: CapacityCache,
    held: Iterable[str],
    request: Mapping[str, int],
    constraints: NodeConstraints,
    limit: int,
) -> int:
    """Copies of ``request`` that fit on the nodes ``constraints`` allow, counting what only
    bound pods use (holds given back): exact below ``limit``, else some count >= ``limit``."""
    if limit <= 0:
        return 0
    held_view = cache.copies(request, constraints, limit)
    if held_view >= limit:
        return held_view  # holds only ever make it less
    # Below the limit copies() counted every allowed node with what holds leave: add back what
    # the holds on each node take (few nodes hold anything).
    nodes = cache.nodes
    feasible = cache.feasible(constraints)
    total = held_view
    for name in held:
        state = nodes.get(name)
        if state is None or name not in feasible:
            continue
        bound_free = dict(state.free)
        resources.add_into(bound_free, state.reserved)
        total += resources.max_copies(request, bound_free, limit) - resources.max_copies(
            request, state.free, limit
        )
    return total
