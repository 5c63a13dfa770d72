"""Which admitted jobs to stop so that a waiting job fits: chosen by the same per-node placement
simulation that admits jobs, never by quota arithmetic alone.

On a scratch copy of the capacity (capacity/cache.py ``CapacityCache.scratch``):

1. capacity that is already leaving (pods of jobs that were suspended and are terminating) is
   counted as free: if the preemptor fits then, it only has to wait, and nobody is preempted
   (this is also what keeps a restarted controller from preempting a second time);
2. otherwise candidates are removed cheapest first (the caller orders them: lowest priority,
   most recently admitted, smallest), each one's pods and held capacity given back node by node,
   until every pod of the preemptor fits (and, when the caller asks, its quota too);
3. then each chosen victim is put back, most valuable first, and stays put back if the
   preemptor still fits without it: no job is stopped whose capacity the preemptor does not use.

The result is inclusion-minimal: removing any single victim from it makes the preemptor not fit
(given that with less capacity a job that did not fit still does not). If removing every
candidate does not make it fit, nothing is preempted.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from kubequeue.capacity.cache import CapacityCache
from kubequeue.capacity.fit import Assignment
from kubequeue.capacity.topology import Chosen, place_job, place_job_in
from kubequeue.demand import PodSet
from kubequeue.identity import JobKey
from kubequeue.resources import Resources

__all__ = ["Candidate", "Choice", "choose_victims"]

# Node -> the capacity a job holds there (its bound pods' requests plus what is held for it).
Footprint = dict[str, Resources]


@dataclass(slots=True)
class Candidate:
    key: JobKey
    footprint: Footprint
    # Anything the caller needs back (its queue, priority, ...); not used here.
    info: object = None


@dataclass(slots=True)
class Choice:
    victims: list[Candidate]
    placement: list[Assignment]
    steps: int = 0  # placement simulations run (for logs and the benchmark)
    wait_only: bool = False  # it fits once the capacity already leaving is gone
    notes: list[str] = field(default_factory=list)
    domains: tuple[Chosen, ...] = ()  # the topology domains of ``placement``


def _give(scratch: CapacityCache, footprint: Footprint, sign: int) -> None:
    for node, amounts in footprint.items():
        if node in scratch.nodes:
            scratch.adjust_free(node, amounts, sign)


def choose_victims(
    pod_sets: Sequence[PodSet],
    scratch: CapacityCache,
    candidates: Sequence[Candidate],
    *,
    leaving: Mapping[str, Resources] | None = None,
    allowed: Callable[[Sequence[Candidate]], bool] = lambda _: True,
    eligible: Callable[[Candidate, Sequence[Candidate]], bool] = lambda _c, _s: True,
    max_candidates: int = 256,
) -> Choice | None:
    """The victims whose removal lets ``pod_sets`` fit on ``scratch`` (modified in place), and
    the placement it would get; None if no set of candidates works.

    ``allowed(victims)``: any other condition the result must meet (the preemptor's quota with
    these victims gone). ``eligible(candidate, chosen)``: whether a candidate may still be taken
    given those already chosen (a reclaim stops taking from a queue once it is back at its min).
    """
    steps = 0
    if leaving:
        _give(scratch, dict(leaving), +1)
    placed = place_job_in(pod_sets, scratch)
    steps += 1
    if placed is not None and allowed(()):
        return Choice([], placed.assignments, steps, wait_only=True, domains=placed.domains)
    removed: list[Candidate] = []
    fits = False
    for candidate in candidates[:max_candidates]:
        if not eligible(candidate, removed):
            continue
        _give(scratch, candidate.footprint, +1)
        removed.append(candidate)
        steps += 1
        if place_job(pod_sets, scratch) is not None and allowed(removed):
            fits = True
            break
    if not fits:
        return None
    for candidate in reversed(removed[:-1]):  # the last one was needed: it made it fit
        _give(scratch, candidate.footprint, -1)
        rest = [c for c in removed if c is not candidate]
        steps += 1
        if place_job(pod_sets, scratch) is not None and allowed(rest):
            removed = rest
        else:
            _give(scratch, candidate.footprint, +1)
    placement = place_job_in(pod_sets, scratch)
    steps += 1
    if placement is None:  # cannot happen while the fit is monotone; never preempt on doubt
        return None
    return Choice(removed, placement.assignments, steps, domains=placement.domains)
