"""Nodes held for a job that has waited past the starvation timeout, across every queue.

Holding a queue's line (the starvation guard, cycle.py ``_blocks``) stops only that queue's
smaller jobs. A job that needs a whole node still waits forever when other queues' jobs refill
every node the moment a pod ends (seen in Kueue's baseline mix at full scale: the 20-CPU jobs
waited longest). So the first starved job in the walk that does not fit, though its quota would
allow it, gets nodes held for it: the nodes where it would fit soonest once the queued jobs
running there end (capacity/drain.py). From then on, until it is admitted:

- no other job is admitted if any of its pods fits on a held node as that node is now. This is
  what makes the hold real: kube-queue does not bind pods, the scheduler does, and it may put a
  pod on any node it fits; a job whose pods fit on no held node cannot end up there;
- jobs whose pods fit elsewhere only are admitted as usual (backfill), so the rest of the
  cluster keeps working while the held nodes drain.

One hold at a time, so at most one job's worth of nodes is kept idle. It ends when its job is
admitted, leaves the queue or stops being judged (deleted, changed, bad input); it is planned
again when nodes change, its job's demand changes, or it has lasted another starvation timeout
without the nodes draining (some pod there may never end).

Pure logic on the tracker's state: no API calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kubequeue import resources
from kubequeue.admission.tracker import JobTracker
from kubequeue.capacity.cache import CapacityCache
from kubequeue.capacity.drain import plan_drain
from kubequeue.demand import PodSet
from kubequeue.identity import JobKey
from kubequeue.queueing.queue import QueuedJob

__all__ = ["NodeHold", "blocking_node", "plan_hold"]


@dataclass(frozen=True, slots=True)
class NodeHold:
    key: JobKey
    nodes: tuple[str, ...]
    # What the plan was made for: the job's demand (identity: a new spec is a new tuple), the
    # node set's generation, and when (wall clock), so a stale plan is made again.
    pod_sets: Sequence[PodSet]
    nodes_generation: int
    since: float

    def describe(self) -> str:
        shown = ", ".join(self.nodes[:3])
        more = f" and {len(self.nodes) - 3} more" if len(self.nodes) > 3 else ""
        return f"{shown}{more}"


def plan_hold(tracker: JobTracker, job: QueuedJob, now: float) -> NodeHold | None:
    """Nodes to hold for ``job``, or None if it would not fit even with every job kube-queue
    admitted gone (it waits for capacity nobody here can free: holding nodes would only idle
    them)."""
    cache = tracker.cache
    feasible: set[str] = set()
    for ps in job.pod_sets:
        if ps.count > 0:
            feasible |= cache.feasible(ps.constraints)
    if not feasible:
        return None
    # Every job kube-queue admitted or is admitting, and the capacity already leaving
    # (tracker.leaving's jobs), each once.
    drainable = tracker.footprints(
        (
            *tracker.admitted,
            *tracker.inflight,
            *tracker.preempting,
            *tracker.victims,
            *tracker.queue.keys(),
        ),
        feasible,
    )
    placed = plan_drain(job.pod_sets, cache.scratch(feasible), drainable)
    if placed is None:
        return None
    nodes = tuple(sorted({a.node for a in placed if a.count > 0}))
    if not nodes:
        return None
    return NodeHold(job.key, nodes, job.pod_sets, cache.nodes_generation, now)


def blocking_node(hold: NodeHold, pod_sets: Sequence[PodSet], cache: CapacityCache) -> str | None:
    """A held node on which some pod of ``pod_sets`` fits as the node is now (so the scheduler
    could bind it there), or None."""
    nodes = cache.nodes
    for ps in pod_sets:
        if ps.count <= 0:
            continue
        feasible = cache.feasible(ps.constraints)
        for name in hold.nodes:
            if name in feasible:
                state = nodes.get(name)
                if (
                    state is not None
                    and state.schedulable
                    and resources.max_copies(ps.request, state.free, 1)
                ):
                    return name
    return None
