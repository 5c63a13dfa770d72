"""Preemption policy: which admitted jobs a waiting job may take capacity from, in which order,
and the what-if simulation that picks the fewest needed (capacity/victims.py).

Two reasons to preempt, both opt-in per Queue (``spec.preemption``; ``--preemption`` for the
implicit queue):

- **reclaim** (``reclaimWithinTree: Any``): the waiting job stays within guarantee (some queue
  on its path covers it, QuotaLedger.within_levels), so it may take back capacity that other
  parts of its tree borrowed: candidates are admitted jobs whose side of the common ancestor
  (QuotaLedger.lender: the ancestor's child on their path, when the ancestor is above the queue
  covering the job) is above its min in a resource the job needs, taken only while that side is
  still above its min;
- **priority** (``withinQueue: LowerPriority``): candidates are admitted jobs of the same queue
  with a strictly lower priority; the job's quota is then checked with the victims gone.

Never candidates: jobs marked ``kube-queue.io/preemptible: "false"``, jobs of kinds that cannot
be suspended once running (Spark, Argo), jobs with a write in flight, and jobs already being
preempted. Cheapest first: lowest priority, then most recently admitted, then smallest.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from kubequeue.admission.tracker import AdmittedJob, JobTracker
from kubequeue.capacity.fit import Assignment
from kubequeue.capacity.topology import Chosen
from kubequeue.capacity.victims import Candidate, Choice, choose_victims
from kubequeue.identity import JobKey
from kubequeue.queueing.queue import QueuedJob
from kubequeue.resources import GPU, Resources

__all__ = ["Preemption", "PreemptionPolicy", "plan_preemption"]


@dataclass(frozen=True, slots=True)
class PreemptionPolicy:
    reclaim: bool = False
    lower_priority: bool = False

    def __bool__(self) -> bool:
        return self.reclaim or self.lower_priority


@dataclass(slots=True)
class Preemption:
    """A decision: stop ``victims`` so ``job`` fits at ``placement`` (empty: it only waits for
    capacity that is already leaving)."""

    job: QueuedJob
    victims: list[AdmittedJob]
    placement: list[Assignment]
    reason: str
    domains: tuple[Chosen, ...] = ()  # the topology domains of ``placement``


# Nodes a reclaim tries candidates node by node on, at most (each try is one simulation pass).
_NODE_TRIES = 16


def _nodes_by_room(candidates: Sequence[Candidate]) -> list[str]:
    """Nodes holding candidates, those where the candidates hold the most first."""
    held: dict[str, int] = {}
    for c in candidates:
        for node, amounts in c.footprint.items():
            held[node] = held.get(node, 0) + amounts.get(GPU, 0) * 1000 + amounts.get("cpu", 0)
    return sorted(held, key=lambda n: (-held[n], n))


def _info(candidate: Candidate) -> tuple[AdmittedJob, str]:
    info = candidate.info
    assert isinstance(info, tuple)
    return info[0], info[1]


def _lender(candidate: Candidate) -> str:
    """The queue (the candidate's or an ancestor's) whose borrowing a reclaim takes it from."""
    info = candidate.info
    assert isinstance(info, tuple)
    return str(info[2])


def _cost(job: AdmittedJob) -> tuple[int, float, int, int]:
    demand = job.demand
    return (job.priority, -job.admitted_epoch, demand.get(GPU, 0), demand.get("cpu", 0))


@contextmanager
def _without(tracker: JobTracker, victims: Sequence[Candidate]) -> Iterator[None]:
    """The quota ledger as if these jobs were gone (put back exactly afterwards; the cycle is
    synchronous, so nothing else sees the difference)."""
    ledger = tracker.ledger
    saved = []
    for c in victims:
        queue = ledger.queue_of(c.key)
        if queue is not None:
            saved.append((c.key, queue, ledger.demand_of(c.key)))
            ledger.release(c.key)
    try:
        yield
    finally:
        for key, queue, demand in saved:
            ledger.charge(key, queue, demand)


def plan_preemption(
    tracker: JobTracker, job: QueuedJob, policy: PreemptionPolicy
) -> Preemption | None:
    """Victims for ``job`` (which does not fit, or is over its queue's quota), or None."""
    ledger = tracker.ledger
    queue = job.queue
    demand = job.demand
    wanted = {res for res, amount in demand.items() if amount}
    # Where the job's guarantee covers it (None: it borrows, so it may not reclaim).
    levels = ledger.within_levels(queue, demand) if policy.reclaim and queue else None
    reclaiming = levels is not None
    root = tracker.ledger.tree.nodes[queue].root if queue in tracker.ledger.tree.nodes else None
    feasible: set[str] = set()
    for ps in job.pod_sets:
        feasible |= tracker.cache.feasible(ps.constraints)
    candidates: list[Candidate] = []
    for admitted in sorted(tracker.preemptible(), key=_cost):
        if admitted.key == job.key:
            continue
        why = ""
        lender: str | None = None
        if policy.lower_priority and admitted.queue == queue and admitted.priority < job.priority:
            why = "priority"
        elif levels is not None and admitted.queue != queue and root is not None:
            lender = ledger.lender(admitted.queue, queue, levels)
            if lender is not None:
                why = "reclaim"
        if not why:
            continue
        footprint = {n: r for n, r in tracker.footprint(admitted.key).items() if n in feasible}
        if footprint:
            info = (admitted, why, lender if why == "reclaim" else "")
            candidates.append(Candidate(admitted.key, footprint, info))
    if not candidates and not tracker.leaving_somewhere():
        return None

    def eligible(candidate: Candidate, chosen: Sequence[Candidate]) -> bool:
        admitted, why = _info(candidate)
        if why != "reclaim":
            return True
        # Take from a queue (the subtree that lent: the candidate's queue or an ancestor
        # beside the job's path) only while it is still above its min in what the job needs.
        # A job holding none of what its subtree borrowed spends nothing of that: it is taken
        # when the room it holds is needed beside the borrowed capacity (its CPU next to a
        # borrowed GPU), whatever was taken before it, so the choice does not depend on the
        # cost order. The last job taken may hold more than was left borrowed (jobs are
        # stopped whole): the subtree can end below its min by less than that job.
        lender = _lender(candidate)
        borrowed = ledger.borrowed(lender)
        if not any(admitted.demand.get(res, 0) for res in borrowed):
            return True
        gone: Resources = {}
        for c in chosen:
            other, why_other = _info(c)
            if why_other == "reclaim" and _lender(c) == lender:
                for res, amount in other.demand.items():
                    gone[res] = gone.get(res, 0) + amount
        return any(borrowed.get(res, 0) - gone.get(res, 0) > 0 for res in wanted)

    def allowed(chosen: Sequence[Candidate]) -> bool:
        if not queue:
            return True
        with _without(tracker, chosen):
            return ledger.check(queue, demand).allowed

    leaving = tracker.leaving(feasible)

    def attempt(order: Sequence[Candidate]) -> Choice | None:
        return choose_victims(
            job.pod_sets,
            tracker.cache.scratch(feasible),
            order,
            leaving=leaving,
            allowed=allowed,
            eligible=eligible,
        )

    choice = attempt(candidates)
    if choice is None and reclaiming:
        # A reclaim may take only what a queue borrowed, so the cheapest candidates can run
        # out of budget on the wrong nodes. Try again node by node: that node's candidates
        # first (cheapest first), then the rest.
        for node in _nodes_by_room(candidates)[:_NODE_TRIES]:
            first = [c for c in candidates if node in c.footprint]
            choice = attempt(first + [c for c in candidates if node not in c.footprint])
            if choice is not None:
                break
    if choice is None:
        return None
    victims = [_info(c)[0] for c in choice.victims]
    reasons = {_info(c)[1] for c in choice.victims}
    if not victims:
        reason = "waiting for capacity that is already being freed"
    elif reasons == {"reclaim"}:
        reason = f"reclaiming quota borrowed from queue {job.queue}'s guarantee"
    elif reasons == {"priority"}:
        reason = "preempting lower-priority jobs of its queue"
    else:
        reason = "reclaiming borrowed quota and preempting lower-priority jobs"
    return Preemption(job, victims, choice.placement, reason, choice.domains)


def victim_keys(preemption: Preemption) -> list[JobKey]:
    return [v.key for v in preemption.victims]
