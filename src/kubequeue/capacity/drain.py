"""Which nodes to let drain for a job that has waited too long: the nodes where its gang would
fit soonest if the queued jobs running there ended, found by the same placement simulation that
admits jobs.

A big gang job (a whole node, or several) never fits on a busy cluster while small jobs keep
refilling every node the moment a pod ends. Holding its queue's line does not help when the
small jobs come from other queues. So once it has waited past the starvation timeout, the
admission cycle holds a few nodes for it (admission/node_hold.py): nothing new starts there
until it fits. Which nodes: on a scratch copy of the feasible nodes, the capacity that admitted
jobs hold (``drainable``: pods that will end, and capacity reserved for pods not yet bound) is
given back node by node, nodes with the least to drain first, until the gang fits; the nodes of
that placement are the ones held. Pods that kube-queue did not admit (daemons, other workloads)
are not expected to leave and stay counted as used, so a node they fill is never chosen.

The shortest such prefix of nodes is found by doubling it and then bisecting, so a plan costs
O(log n) placement passes, not one per node; it runs when a hold is taken, not every cycle.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kubequeue.capacity.cache import CapacityCache
from kubequeue.capacity.fit import Assignment
from kubequeue.capacity.topology import place_job
from kubequeue.demand import PodSet
from kubequeue.resources import Resources

__all__ = ["plan_drain"]


def _to_drain(allocatable: Mapping[str, int], drainable: Mapping[str, int]) -> float:
    """How much of the node must be freed, as the largest share of any resource: a node whose
    admitted pods hold 1 of 20 CPU drains before one where they hold 19."""
    share = 0.0
    for name, amount in drainable.items():
        total = allocatable.get(name, 0)
        if amount > 0 and total > 0:
            share = max(share, amount / total)
    return share


def plan_drain(
    pod_sets: Sequence[PodSet],
    scratch: CapacityCache,
    drainable: Mapping[str, Resources],
) -> list[Assignment] | None:
    """Where ``pod_sets`` would fit once the nodes chosen have drained, on ``scratch`` (a copy
    of the nodes the gang may use; modified in place), or None if it does not fit even with
    every admitted job gone (it waits for capacity kube-queue does not control, or never fits).
    """
    order = sorted(
        scratch.nodes,
        key=lambda n: (_to_drain(scratch.nodes[n].allocatable, drainable.get(n, {})), n),
    )
    at = 0  # the first ``at`` nodes of ``order`` are drained on the scratch copy

    def drain_to(prefix: int) -> None:
        nonlocal at
        lo, hi, sign = (at, prefix, +1) if prefix > at else (prefix, at, -1)
        for name in order[lo:hi]:
            amounts = drainable.get(name)
            if amounts:
                scratch.adjust_free(name, amounts, sign)
        at = prefix

    placed = place_job(pod_sets, scratch)
    if placed is not None:
        return placed
    # Doubling prefixes until it fits, then the shortest prefix that does (more drained capacity
    # never makes a gang stop fitting): the nodes with the least to drain are the ones used.
    # ``placed`` is always the placement found at prefix ``high``.
    low, high = 0, 1
    while True:
        drain_to(min(high, len(order)))
        placed = place_job(pod_sets, scratch)
        if placed is not None:
            break
        if high >= len(order):
            return None
        low, high = high, high * 2
    high = min(high, len(order))
    while high - low > 1:
        middle = (low + high) // 2
        drain_to(middle)
        found = place_job(pod_sets, scratch)
        if found is not None:
            high, placed = middle, found
        else:
            low = middle
    return placed
