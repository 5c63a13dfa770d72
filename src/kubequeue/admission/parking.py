"""Parking: queued jobs whose next visits by the admission walk are already known to change
nothing sit out of the walk, so a cycle costs what changed, not the length of the queue.

Every cycle walks the queue in claim order, and for most queued jobs the visit is a foregone
conclusion: the job does not fit and nothing was freed that could make it fit, or its queue's
quota refused it and that queue's usage has not moved. Such a visit only counts the job
(``waiting``, and ``evaluated`` when capacity was freed since the last cycle) and, when it is
evaluated, moves its ``failed_at``. A *parked* job is left out of the walk; the cycle adds
those counts in bulk and ``failed_at`` is kept by a stamp shared by all of them. A job is parked
only while that is *exactly* what its visit would do, and woken (put back in the walk) as soon
as something could make it otherwise. Kinds:

- capacity: one pod set that did not fit. Keyed by its shape (pod request and node
  constraints: the cycle's shape id, admission/fit_memo.py, never reused). Each shape keeps
  one upper bound on how many of its pods fit in the whole cluster now, shared by every line
  that parks jobs of it (it is a fact about the cluster, not about a line): from the fits
  that failed (or a job's own count minus one), in any line, whichever is lowest. A node's
  free capacity only grows through an event the cache records (``freed_nodes_since``), so at
  the start of each cycle the bound grows by the copies that fit *now* on the nodes freed
  since (a new or changed node counts too; only nodes the shape's constraints allow count;
  counting stops once the bound reaches the biggest pod count parked of the shape in any
  line). In the walk the bound only falls: admissions only take capacity, and every fit of
  the shape that fails (or job of it that is known not to fit) lowers it at once, for every
  line.

  Waking is lazy and per line. At the start of a cycle, of each line's jobs of a shape whose
  pod count the bound reaches, only the first in the line's order is picked, and it is not
  woken: its entry is put into the walk with the job still parked (``follow``). When the
  walk reaches that entry, the bound is read again, and checked against the nodes freed: the
  bound before this cycle's gain plus the copies that fit on those nodes *now* is an upper
  bound too (no other node gained capacity since that bound held), and it is lower once an
  admission took the room freed (most often the very node whose pod ended), so the bound
  falls to it (``_reaches``). If the bound still reaches the job's count, the job is woken
  there and visited; if not (a fit of the shape failed since, in this line or another, or
  admissions took the room freed), the job cannot fit (the bound is an upper bound), so its
  visit would only count it, which parking does: it stays parked and the walk goes on as if
  it had visited it (a visit that admits nothing moves neither claims nor lines). Either way the
  line's next job of the shape that the bound (as it is then) reaches is picked next, its
  entry put into the walk ahead of the walk's position (all of the line's jobs of the shape
  before it have counts above the bound, which has only fallen since they were passed). So
  a freed node wakes a handful of jobs per shape, not per line, and not every job it might
  help: the first line to visit one runs the fit, which sets the bound to the room it found
  (usually below every job left, in every line). (When too many nodes were freed to count,
  every bound is void; the job picked of a shape that only one line parks is then woken at
  once, as it would be visited anyway: that is cheaper than putting it into the walk.)

  Why a bound that stopped counting at the biggest count parked stays exact: while it is
  above the true room, it is above every parked count, so every parked job of the shape is
  picked and visited in turn; the first of them that fails lowers the bound to a true upper
  bound, and if none fails, none is left parked. So once a walk is over, the bound of every
  shape with parked jobs is a true upper bound (the jobs it parked lower it further), which
  the check against the nodes freed takes as its base.
- quota: its queue refused it at a ledger version (``QuotaLedger.version``); it wakes when that
  version moves, also in the middle of a walk (after an admission or a preemption attempt):
  then the jobs the walk has not reached yet go back into it, as they would be evaluated.
- silent: a job with a problem (reported already) or that can never fit on the nodes as they
  are: the walk skips it without a trace; it wakes when it changes or nodes change.

What the walk would still do with a parked job, and how it is kept:

- blocking: a job that blocks its line (StrictFIFO, or starved under the starvation guard)
  changes the walk. Jobs are parked only in lines that neither preempt nor are StrictFIFO, and
  only while not starved (they wake when they would be); when an unparked job blocks a line,
  the parked jobs behind it wake (the walk does not reach them, so they are not counted).
- explanations: the first ``explain_budget`` evaluated jobs with a stale explanation that do
  not fit are explained, in walk order. Those among the parked are kept per line in walk order
  ("due"); when capacity was freed (parked jobs are evaluated), the first ``DUE_AHEAD`` due
  jobs of each line (at most the budget) wake before the walk. A woken due job need not spend
  the budget: the capacity freed may let it be admitted, or its quota refuse it. So after each
  visit of one, the next due jobs of its line wake into the walk until as many are ahead of it
  as the budget has left, or ``DUE_AHEAD`` (``follow``; a due job whose entry is in the walk
  already, picked for capacity, is only woken): whenever the walk reaches a due job of a line
  while the budget lasts, it is awake, as the budget reaches exactly the jobs it would with
  every job visited (explained jobs of a line are a prefix of its due ones); the others are
  parked again after their visit.
- claim order: the walk of several lines (fair sharing) is replayed with every line's parked
  entries in place, so lines whose only jobs are parked still take their turn exactly when
  they would, and a quota job woken mid-walk is put back only if its line has not passed it.
  A picked capacity job the walk leaves parked is passed as its visit would be (it admits
  nothing, so no claim moves and the walk goes on in the same order).

Jobs of several pod sets, of lines that preempt, with a requeue backoff or that are starved are
never parked: they are visited as before.
"""

from __future__ import annotations

import heapq
import itertools
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from kubequeue.capacity.cache import CapacityCache, NodeState
from kubequeue.identity import JobKey
from kubequeue.queueing.queue import JobQueue, Parked, QueuedJob
from kubequeue.queueing.quota import QuotaLedger
from kubequeue.resources import Resources, max_copies
from kubequeue.scheduling import NodeConstraints

__all__ = ["END", "Parking", "Position"]

log = structlog.get_logger(__name__)

_NO_LIMIT = sys.maxsize
# Due jobs (stale explanation) kept awake ahead of the walk per line while the explanation
# budget lasts. One is enough: the next due job of a line is behind the woken one in the line's
# order, so waking it once the walk has visited the woken one is always in time. Waking the
# whole budget per line instead made a cycle over 40 queues wake (and park again) about a
# thousand jobs to explain 25.
DUE_AHEAD = 1
# A heap is compacted (entries of woken jobs dropped) once it holds more than COMPACT_FACTOR
# times the parked jobs it is for, plus COMPACT_SLACK (tests set both to 0: compact at every push).
COMPACT_FACTOR = 2
# Freed nodes beyond which a cycle does not count what each shape gains on them (as the cycle's
# own shortcuts stop at _FREED_CHECK_MAX, admission/fit_memo.py).
FREED_COUNT_MAX = 256
COMPACT_SLACK = 1024


class _End:
    """The position of a line the walk has gone through to its end."""

    def __repr__(self) -> str:
        return "END"


END = _End()
# How far the walk has gone through one line: None (not started), its last visited entry, or END.
Position = tuple[Any, ...] | _End | None


class Walk(Protocol):
    """What parking needs of the cycle's walk to put a woken job back into it."""

    def position(self, line: str) -> Position: ...

    def insert(self, line: str, entry: tuple[Any, ...]) -> None: ...


class _Stamp:
    """``failed_at`` of every capacity-parked job: the generation of the last cycle, which
    visited them all in effect."""

    __slots__ = ("cycles", "generation")

    def __init__(self) -> None:
        self.generation: tuple[int, int] | None = None
        self.cycles = 0  # cycles finished


class _Record(Parked):
    __slots__ = ("cycle", "entry", "line", "order")

    def __init__(self, line: str, entry: tuple[Any, ...], cycle: int) -> None:
        self.line = line
        self.entry = entry
        # The walk order, without the job at the end of the entry: equal order keys are the
        # same job, of which at most one record is live. Kept (one tuple per parked job), not
        # sliced at each comparison: a heap's compaction compares hundreds of thousands.
        self.order = entry[:-1]
        self.cycle = cycle  # the cycle that parked it

    def __lt__(self, other: _Record) -> bool:
        """Walk order, so heaps hold the records themselves (a tuple per heap entry would cost
        about 200 bytes per parked job)."""
        return self.order < other.order

    @property
    def live(self) -> bool:
        """Whether its job is still parked by it (heaps keep records of woken jobs until they
        are popped or compacted away)."""
        return self.entry[-1].park is self


class _Capacity(_Record):
    __slots__ = ("count", "due", "shape", "stamp")

    def __init__(
        self,
        line: str,
        entry: tuple[Any, ...],
        cycle: int,
        stamp: _Stamp,
        shape: _Shape,
        count: int,
    ) -> None:
        # (The base's three fields set here, not through super().__init__: one call less per
        # parked job, and a first cycle parks every job of the queue.)
        self.line = line
        self.entry = entry
        self.order = entry[:-1]
        self.cycle = cycle
        self.stamp = stamp
        self.shape = shape
        self.count = count
        self.due = False  # in its line's due list (its explanation is stale)

    def failed_at(self, own: tuple[int, int] | None) -> tuple[int, int] | None:
        # Until the cycle that parked it is over, the job's own value is the current one.
        stamp = self.stamp
        return stamp.generation if stamp.cycles >= self.cycle else own


class _Quota(_Record):
    __slots__ = ("group", "stale")

    def __init__(
        self, line: str, entry: tuple[Any, ...], cycle: int, group: tuple[str, object]
    ) -> None:
        super().__init__(line, entry, cycle)
        self.group = group  # (queue, ledger version it was refused at)
        self.stale = False  # the version moved after the walk passed it: wakes next cycle


class _Silent(_Record):
    __slots__ = ("never_fits",)

    def __init__(self, line: str, entry: tuple[Any, ...], cycle: int, never_fits: bool) -> None:
        super().__init__(line, entry, cycle)
        self.never_fits = never_fits


@dataclass(slots=True, eq=False)
class _Bound:
    """One pod shape (pod request and node constraints: the cycle's shape id, never reused) and
    an upper bound on how many of its pods fit in the whole cluster now: a fact about the
    cluster, the same in every line, so one bound serves the parked jobs of the shape in all
    lines (a fit that fails in one line lowers it for all)."""

    kind: int  # the shape id (admission/fit_memo.py)
    request: Resources
    constraints: NodeConstraints
    room: int
    lines: dict[str, _Shape]  # per line with parked jobs of the shape, those jobs


@dataclass(slots=True, eq=False)
class _Shape:
    """The capacity-parked jobs of one pod shape in one line."""

    key: _ShapeKey
    bound: _Bound
    # pod count -> how many jobs of it are parked (a count per bucket, not a dict of its jobs:
    # about a thousand shapes with a few counts each would hold that many small dicts)
    jobs: dict[int, int]
    counts: list[int]  # the pod counts present, ascending
    # pod count -> heap of the records, to find the first parked job of a count in walk order;
    # records of jobs woken since stay until popped (``not record.live``).
    order: dict[int, list[_Capacity]]


# (line, the cycle's shape id): the first of a line's jobs of the shape in walk order is the
# one with the smallest entry.
_ShapeKey = tuple[str, int]


class Parking:
    def __init__(self, queue: JobQueue) -> None:
        self.queue = queue
        self._reset()

    def _reset(self) -> None:
        """Nothing parked (jobs parked by whoever had the queue before would never be visited
        again)."""
        self.queue.wake_all()
        self.queue.on_wake = self._forget
        # Capacity parks the walk decided, made after it (``settle``), in the order decided:
        # job -> (job, room, nodes generation) as park_capacity was called. A job that changes
        # or leaves meanwhile drops out (it is judged again).
        self._pending: dict[JobKey, tuple[QueuedJob, int | None, int]] = {}
        self.queue.on_change = self._changed
        self._stamp = _Stamp()
        self._cycle = 1  # the cycle running, or the next one
        self._walking = False
        self._shapes: dict[_ShapeKey, _Shape] = {}
        self._bounds: dict[int, _Bound] = {}  # shape id -> its bound, shared by all lines
        self._by_constraints: dict[NodeConstraints, dict[int, _Bound]] = {}
        # Per line and shape, the first parked job the bound reaches (job -> its line's shape):
        # its entry is in the walk, the job still parked until the walk reaches it and finds
        # the bound still reaching it (``follow``); then, or once the walk has passed it, the
        # next of the shape is (``_wake_next``). And those picked before the walk, whose
        # entries go into it when it starts.
        self._chain: dict[JobKey, _ShapeKey] = {}
        self._probes: list[_Capacity] = []
        # Per shape whose bound grew at the start of the cycle: the bound before, and the nodes
        # freed since the last cycle that its constraints allow (``_reaches``).
        self._gained: dict[int, tuple[int, list[NodeState]]] = {}
        # Jobs woken for their explanation that the walk has not visited yet (job -> its line),
        # and how many of them each line has (``_wake_due``).
        self._explaining: dict[JobKey, str] = {}
        self._ahead: dict[str, int] = {}
        # Capacity and quota records per line (to wake the jobs behind a blocking one).
        self._lines: dict[str, dict[JobKey, QueuedJob]] = {}
        # Per line, a heap of the records of the parked jobs whose explanation is
        # stale, in walk order; entries of jobs woken since stay until popped.
        self._due: dict[str, list[_Capacity]] = {}
        self._fresh: list[tuple[float, _Capacity]] = []  # by explained_at
        self._quota: dict[tuple[str, object], dict[JobKey, QueuedJob]] = {}
        self._stale: list[tuple[QueuedJob, _Quota]] = []
        self._starving: list[tuple[float, _Record]] = []  # by created_epoch
        self._never_fits: dict[JobKey, QueuedJob] = {}
        self.capacity_parked = 0
        self.quota_parked = 0
        self.silent = 0
        self._new_capacity = 0  # parked by the cycle running (visited, so counted already)
        self._new_quota = 0
        # What the records were made under: when it changes they may no longer hold.
        self._freed_gen: int | None = None
        self._nodes_gen: int | None = None
        self._setting: tuple[object, ...] | None = None
        # The running cycle's inputs.
        self._now = 0.0
        self._interval = 0.0
        self._starved_before: float | None = None
        self._ledger: QuotaLedger | None = None

    def __len__(self) -> int:
        return self.capacity_parked + self.quota_parked + self.silent

    # ----------------------------------------------------------------- cycle start / end
    def start_steps(
        self,
        cache: CapacityCache,
        ledger: QuotaLedger,
        generation: tuple[int, int],
        *,
        now: float,
        report_interval: float,
        budget: int,
        starved_before: float | None,
        setting: tuple[object, ...],
    ) -> Iterator[None]:
        """Before the walk: wake every parked job whose visit this cycle might differ from the
        one recorded. ``setting`` covers what decides which lines may park at all (the Queue
        tree, the implicit queue's strategy and preemption, the starvation guard). Stops
        (yield) where a slicing cycle may let the event loop go on: between the groups of
        shapes the capacity freed is weighed against (thousands of freed nodes times tens of
        groups: tens of milliseconds at 8,000 nodes)."""
        self.settle()  # what the last walk decided to park, as it would be at its end
        self._walking = True
        self._cycle = self._stamp.cycles + 1
        self._new_capacity = self._new_quota = 0
        self._now = now
        self._interval = report_interval
        self._starved_before = starved_before
        self._ledger = ledger
        if setting != self._setting:
            self._setting = setting
            self._wake_all()
        if cache.nodes_generation != self._nodes_gen:
            self._nodes_changed(cache.nodes_generation)
        yield from self._capacity_freed(cache)
        self._quota_moved(ledger)
        if starved_before is not None:
            heap = self._starving
            while heap and heap[0][0] < starved_before:
                record = heapq.heappop(heap)[1]
                if record.live:
                    self._unpark(record.entry[-1])
        self._expire(now, report_interval)
        if generation != self._stamp.generation and budget > 0:
            for line in list(self._due):
                self._wake_due(line, min(budget, DUE_AHEAD), None)

    def suspend(self) -> None:
        """A cycle is about to visit every job (it cannot tell which visits are foregone):
        every parked job wakes, and parking starts afresh with the next cycle."""
        self._reset()

    def finish(self, generation: tuple[int, int]) -> tuple[int, int]:
        """After the walk: (evaluated, waiting) the parked jobs add, as visited; from now on
        capacity-parked jobs failed at ``generation``."""
        stamp = self._stamp
        capacity = self.capacity_parked - self._new_capacity
        quota = self.quota_parked - self._new_quota
        evaluated = capacity if generation != stamp.generation else 0
        stamp.generation = generation
        stamp.cycles += 1
        self._chain.clear()  # woken jobs the walk did not reach are visited next cycle
        self._probes.clear()
        self._gained.clear()
        self._explaining.clear()
        self._ahead.clear()
        self._cycle = stamp.cycles + 1
        self._walking = False
        self._ledger = None
        return evaluated, capacity + quota

    # ----------------------------------------------------------------- parking (in the walk)
    def park_capacity(self, job: QueuedJob, room: int | None, nodes_generation: int) -> None:
        """The job was visited and does not fit (in a line that may park): out of the walk
        while its shape's room stays below its pod count. ``room``: a bound on the pods of its
        shape that fit now, if known.

        In a walk the job is only noted (and its shape's bound lowered at once, which is what
        keeps the walk from waking the rest of the shape); the bookkeeping is done by
        ``settle``, which the admission loop runs while it waits for the next change (and the
        next cycle runs first in any case). A first cycle after start-up or failover parks the
        whole queue: its admissions are not held up by that."""
        if self._walking:
            pod_sets = job.pod_sets
            memo = job.shape
            if len(pod_sets) == 1 and memo is not None and memo[0] is pod_sets:
                known = self._bounds.get(memo[1])
                if known is not None:
                    known.room = min(known.room, _bound(pod_sets[0].count, room))
            self._pending[job.key] = (job, room, nodes_generation)
            return
        self._park_capacity(job, room, nodes_generation)

    @property
    def unsettled(self) -> int:
        """Capacity parks decided by the last walk and not made yet."""
        return len(self._pending)

    def settle(self, limit: int | None = None) -> None:
        """Make the capacity parks the last walk decided (at most ``limit`` of them). Exactly
        what parking them at the end of that walk would have done: nothing a later cycle
        decides has run since, and a job that changed or left meanwhile is not parked."""
        pending = self._pending
        if not pending:
            return
        if limit is None or limit >= len(pending):
            batch = list(pending.values())
            pending.clear()
        else:
            batch = [pending.pop(key) for key in list(itertools.islice(pending, limit))]
        # The records are the last walk's (its cycle number): for the next cycle they are parked
        # jobs like any other, counted in bulk and not as parked by that cycle.
        cycle, self._cycle = self._cycle, self._stamp.cycles
        try:
            for job, room, nodes_generation in batch:
                self._park_capacity(job, room, nodes_generation)
        finally:
            self._cycle = cycle

    def _changed(self, key: JobKey) -> None:
        self._pending.pop(key, None)

    def _park_capacity(self, job: QueuedJob, room: int | None, nodes_generation: int) -> bool:
        if not self._may_park(job):
            return False
        pod_sets = job.pod_sets
        if len(pod_sets) != 1 or pod_sets[0].count <= 0:
            return False
        memo = job.shape  # set by the visit that found it does not fit
        if memo is None or memo[0] is not pod_sets:
            return False
        ps = pod_sets[0]
        entry = self.queue.entry(job)
        if entry is None:
            return False
        kind = memo[1]
        key = (job.queue, kind)
        shape = self._shapes.get(key)
        bound = _bound(ps.count, room)
        if shape is None:
            known = self._bounds.get(kind)
            if known is None:
                known = self._bounds[kind] = _Bound(kind, ps.request, ps.constraints, bound, {})
                self._by_constraints.setdefault(ps.constraints, {})[kind] = known
            elif bound < known.room:
                known.room = bound
            shape = self._shapes[key] = known.lines[job.queue] = _Shape(key, known, {}, [], {})
        elif bound < shape.bound.room:
            shape.bound.room = bound
        record = _Capacity(job.queue, entry, self._cycle, self._stamp, shape, ps.count)
        parked = shape.jobs.get(ps.count)
        if parked is None:
            parked = 0
            shape.order[ps.count] = []
            _insort(shape.counts, ps.count)
        shape.jobs[ps.count] = parked = parked + 1
        self._lines.setdefault(job.queue, {})[job.key] = job
        # Parked before its heap entries are pushed: a compaction keeps only parked jobs' ones.
        self.queue.park(job, record)
        order = shape.order[ps.count]
        heapq.heappush(order, record)
        if len(order) > COMPACT_FACTOR * parked + COMPACT_SLACK:
            shape.order[ps.count] = _live(order)
        self.capacity_parked += 1
        self._new_capacity += 1
        if (
            job.never_fits_generation != nodes_generation
            or not job.wait_reason
            or job.explained_at is None
            or self._now - job.explained_at >= self._interval
        ):
            self._make_due(record, job)
        else:
            heapq.heappush(self._fresh, (job.explained_at, record))
            if len(self._fresh) > COMPACT_FACTOR * self.capacity_parked + COMPACT_SLACK:
                self._fresh = _live(self._fresh)
        self._starve_later(job, record)
        return True

    def park_quota(self, job: QueuedJob, version: object) -> bool:
        """The job's queue refused it at ``version`` (in a line that may park): out of the walk
        until that version moves."""
        if not self._may_park(job):
            return False
        entry = self.queue.entry(job)
        if entry is None:
            return False
        group = (job.queue, version)
        record = _Quota(job.queue, entry, self._cycle, group)
        self._quota.setdefault(group, {})[job.key] = job
        self._lines.setdefault(job.queue, {})[job.key] = job
        self.queue.park(job, record)
        self.quota_parked += 1
        self._new_quota += 1
        self._starve_later(job, record)
        return True

    def park_silent(self, job: QueuedJob, *, never_fits: bool) -> None:
        """The walk skips this job without a trace (a reported problem, or it can never fit on
        the nodes as they are): out of the walk until it changes (or nodes do)."""
        entry = self.queue.entry(job)
        if entry is None:
            return
        record = _Silent(job.queue, entry, self._cycle, never_fits)
        if never_fits:
            self._never_fits[job.key] = job
        self.queue.park(job, record)
        self.silent += 1

    def _may_park(self, job: QueuedJob) -> bool:
        if job.requeues:
            return False  # its backoff is judged by the wall clock on every visit
        starved_before = self._starved_before
        return starved_before is None or job.created_epoch >= starved_before

    def _starve_later(self, job: QueuedJob, record: _Record) -> None:
        if self._starved_before is not None:
            heapq.heappush(self._starving, (job.created_epoch, record))
            if (
                len(self._starving)
                > COMPACT_FACTOR * (self.capacity_parked + self.quota_parked) + COMPACT_SLACK
            ):
                self._starving = _live(self._starving)

    # ----------------------------------------------------------------- waking (in the walk)
    def ledger_moved(self, walk: Walk) -> None:
        """Quota usage may have moved (an admission or a preemption attempt): quota-parked jobs
        of a moved tree that the walk has not reached go back into it; those it passed were
        visited at the old version and wake for the next cycle."""
        if not self._quota:
            return
        ledger = self._ledger
        assert ledger is not None
        for group in [g for g in self._quota if ledger.version(g[0]) != g[1]]:
            jobs = self._quota.pop(group)
            for job in jobs.values():
                record = job.park
                assert isinstance(record, _Quota)
                position = walk.position(record.line)
                if isinstance(position, _End) or (
                    position is not None and record.entry <= position
                ):
                    record.stale = True
                    self._stale.append((job, record))
                    continue
                self._unpark(job)
                walk.insert(record.line, record.entry)

    def blocked(self, job: QueuedJob) -> None:
        """``job`` blocks its line: the walk will not reach the parked jobs behind it."""
        parked = self._lines.get(job.queue)
        entry = self.queue.entry(job)
        if not parked or entry is None:
            return
        for other in [o for o in parked.values() if _entry(o) > entry]:
            self._unpark(other)

    # ----------------------------------------------------------------- waking (cycle start)
    def _nodes_changed(self, nodes_generation: int) -> None:
        """Nodes changed: jobs that could never fit may now; every explanation is stale."""
        self._nodes_gen = nodes_generation
        for job in list(self._never_fits.values()):
            self._unpark(job)
        for jobs in self._lines.values():
            for job in jobs.values():
                record = job.park
                if isinstance(record, _Capacity) and not record.due:
                    self._make_due(record, job)
        self._fresh.clear()

    def _capacity_freed(self, cache: CapacityCache) -> Iterator[None]:
        """Grow each shape's bound by what the nodes freed since fit of it now; wake the jobs
        the bound reaches. Stops (yield) after each group of shapes."""
        since = self._freed_gen
        self._freed_gen = cache.freed_generation
        gained = self._gained
        gained.clear()
        if since is None or since == cache.freed_generation or not self._shapes:
            return
        distinct = cache.freed_nodes_since(since, FREED_COUNT_MAX)
        if distinct is None:
            # So many nodes that counting the copies of every shape on them costs more than
            # the fits it would spare: every bound is void, and the first job of each shape in
            # each line runs the fit (which sets the bound again).
            # Nothing can be checked against the freed nodes then (``_reaches``): unless other
            # lines share the shape (whose failed fits would lower its bound first), the job
            # picked would be visited in any case, and is woken at once (cheaper: it goes into
            # the walk's snapshot instead of being put into it).
            for known in list(self._bounds.values()):
                known.room = _NO_LIMIT
                shared = len(known.lines) > 1
                for shape in list(known.lines.values()):
                    self._wake_next(shape, None, lazy=shared)
            return
        nodes = cache.nodes
        for constraints, bounds in list(self._by_constraints.items()):
            feasible = cache.feasible(constraints)
            states = [nodes[name] for name in distinct if name in feasible]
            if not states:
                continue
            # Per resource, the most any of these nodes has free: a shape asking more of one
            # gains nothing here, known without trying each node (most shapes, when small pods
            # end).
            peak: dict[str, int] = {}
            for state in states:
                for name, amount in state.free.items():
                    if amount > peak.get(name, 0):
                        peak[name] = amount
            for known in list(bounds.values()):
                request = known.request
                if any(amount > peak.get(name, 0) for name, amount in request.items()):
                    continue
                # Once the bound reaches the biggest pod count parked (in any line), every job
                # of the shape may be woken: counting further would change nothing.
                lines = known.lines
                top = max(shape.counts[-1] for shape in lines.values())
                enough = top - known.room
                gain = 0
                for state in states:
                    gain += max_copies(request, state.free, enough - gain)
                    if gain >= enough:
                        break
                if gain:
                    gained[known.kind] = (known.room, states)
                    known.room += gain
                    room = known.room
                    for shape in list(lines.values()):
                        if room >= shape.counts[0]:
                            self._wake_next(shape, None)
            yield

    def _quota_moved(self, ledger: QuotaLedger) -> None:
        for job, record in self._stale:
            if job.park is record:
                self._unpark(job)
        self._stale = []
        for group in [g for g in self._quota if ledger.version(g[0]) != g[1]]:
            for job in list(self._quota[group].values()):
                self._unpark(job)

    def _expire(self, now: float, interval: float) -> None:
        """Explanations that went stale since: their jobs are due."""
        heap = self._fresh
        while heap and now - heap[0][0] >= interval:
            record = heapq.heappop(heap)[1]
            if record.live and not record.due:
                self._make_due(record, record.entry[-1])

    def _make_due(self, record: _Capacity, job: QueuedJob) -> None:
        record.due = True
        due = self._due.get(record.line)
        if due is None:
            due = self._due[record.line] = []
        heapq.heappush(due, record)
        if len(due) > COMPACT_FACTOR * self.capacity_parked + COMPACT_SLACK:
            self._due[record.line] = _live(due)

    def _wake_next(self, shape: _Shape, walk: Walk | None, *, lazy: bool = True) -> None:
        """Put the entry of the first parked job of the shape in its line (in walk order) whose
        pod count the bound reaches into the walk, the job still parked: when the walk reaches
        it, it is visited if the bound still reaches it (``follow``). Only that one: its visit
        either admits it (then the next one may fit too: it is picked once the walk has passed
        this one) or runs the fit, whose room tightens the bound (usually below every other job
        of the shape, in every line). Waking every job the bound reaches would visit and park
        again all of them after each freed node.

        Why the first is enough: the walk has already passed every parked job of the shape in
        its line whose count the bound reaches that comes before it in walk order (there are
        none at the start of a walk; in the walk, each one was picked in its turn, and a job
        parked during the walk has a count above the bound, which only falls during a walk).
        Before the walk (``walk`` None), the entry goes in when the walk starts; or, not
        ``lazy``, the job is woken at once (as a job woken for a visit it will have anyway).
        """
        record: _Capacity | None = None
        room = shape.bound.room
        for count in shape.counts:
            if count > room:
                break
            order = shape.order[count]
            while order and not order[0].live:
                heapq.heappop(order)
            if order and (record is None or order[0] < record):
                record = order[0]
        if record is None:
            return
        entry = record.entry
        job = entry[-1]
        self._chain[job.key] = shape.key
        if walk is None:
            if lazy:
                self._probes.append(record)
            else:
                self._unpark(job)
            return
        position = walk.position(record.line)
        if isinstance(position, _End) or (position is not None and entry <= position):
            # Cannot happen (see above); were it to, the job wakes and is visited next cycle.
            log.error("parking.woken_behind_walk", job="/".join(job.key))
            del self._chain[job.key]
            self._unpark(job)
            return
        walk.insert(record.line, entry)

    def _wake_due(self, line: str, budget: int, walk: Walk | None) -> None:
        """Wake the next due jobs of the line, in walk order, until ``budget`` (what the
        explanation budget has left) of its jobs woken for their explanation are ahead of the
        walk. Before the walk (``walk`` None) that is the first ``budget``; in it, after each
        visit of one: a visit that did not spend the budget (the job was admitted, refused by
        its quota, or fitted and waits) leaves it to the next due job, which must be awake when
        the walk reaches it. Due jobs behind the woken ones stay parked: the walk reaches them
        only after the woken ones have spent the budget or woken them in turn."""
        due = self._due.get(line)
        ahead = self._ahead.get(line, 0)
        while due and ahead < budget:
            record = heapq.heappop(due)
            if not record.live:
                continue
            entry = record.entry
            job = entry[-1]
            self._unpark(job)
            if walk is not None and job.key not in self._chain:
                # (A job the bound reached has its entry in the walk already.)
                position = walk.position(line)
                if isinstance(position, _End) or (position is not None and entry <= position):
                    # Cannot happen (no job is made due during a walk, and the walk has not
                    # passed the due jobs behind a woken one); were it to, the job is visited
                    # next cycle.
                    log.error("parking.woken_behind_walk", job="/".join(job.key))
                    continue
                walk.insert(line, entry)
            self._explaining[job.key] = line
            ahead += 1
        self._ahead[line] = ahead

    def follow(
        self, walk: Walk, jobs: Iterable[QueuedJob], budget: Callable[[], int]
    ) -> Iterator[QueuedJob]:
        """The walk's jobs. First the entries of the jobs the bound reached before the walk go
        into it (``_wake_next``). When the walk reaches one of those still parked, the job is
        woken and visited if the bound (shared by all lines, lowered by every fit that failed
        since) still reaches its pod count, and left parked otherwise: it does not fit, so its
        visit would only count it, as parking does. Either way the next job of its shape in its
        line the bound reaches is picked in turn (after the visit, if any). After each job
        woken for its explanation, the next due jobs of its line are woken as the explanation
        budget left now (``budget()``) requires (``_wake_due``)."""
        chain = self._chain
        explaining = self._explaining
        gained = self._gained
        if self._probes:
            for record in self._probes:
                if record.live:  # (not woken since by something else: then it is in the walk)
                    walk.insert(record.line, record.entry)
            self._probes = []
        for job in jobs:
            parked = job.park
            if parked is not None:
                # Parked: a job the bound reached (nothing else puts a parked job's entry in
                # the walk).
                assert isinstance(parked, _Capacity)
                if parked.count > parked.shape.bound.room or (gained and not self._reaches(parked)):
                    del chain[job.key]
                    self._wake_next(parked.shape, walk)
                    continue
                self._unpark(job)
            yield job
            if chain:
                key = chain.pop(job.key, None)
                if key is not None:
                    shape = self._shapes.get(key)
                    if shape is not None:
                        self._wake_next(shape, walk)
            if explaining:
                line = explaining.pop(job.key, None)
                if line is not None:
                    self._ahead[line] -= 1
                    self._wake_due(line, min(budget(), DUE_AHEAD), walk)

    def _reaches(self, record: _Capacity) -> bool:
        """Whether the job's shape may still have room for its pods, as far as the nodes freed
        since the last cycle tell (its bound reaches its count: see ``follow``). The bound grew
        at the start by the copies that fitted on them then; admissions since may have taken
        that room (usually the very node whose pod ended). The bound before the gain, plus the
        copies that fit on those nodes *now*, is also an upper bound (the other nodes have only
        lost capacity since it was established): if it falls short of the count, the job does
        not fit, and the bound falls to it."""
        known = record.shape.bound
        gained = self._gained.get(known.kind)
        if gained is None:
            return True
        base, states = gained
        need = record.count - base
        if need <= 0:
            return True
        request = known.request
        got = 0
        for state in states:
            got += max_copies(request, state.free, need - got)
            if got >= need:
                return True
        known.room = base + got  # below the count, which the bound reached
        return False

    def _wake_all(self) -> None:
        for jobs in list(self._lines.values()):
            for job in list(jobs.values()):
                self._unpark(job)

    # ----------------------------------------------------------------- bookkeeping
    def _unpark(self, job: QueuedJob) -> None:
        record = job.park
        if record is None:
            return
        self._forget(job)
        self.queue.unpark(job)

    def _forget(self, job: QueuedJob) -> None:
        """Drop the job from every index (it is being woken; JobQueue clears its mark)."""
        record = job.park
        if not isinstance(record, _Record):
            return
        new = record.cycle == self._cycle and self._walking
        if isinstance(record, _Silent):
            if record.never_fits:
                self._never_fits.pop(job.key, None)
            self.silent -= 1
            return
        jobs = self._lines[record.line]
        del jobs[job.key]
        if not jobs:
            del self._lines[record.line]
        if isinstance(record, _Capacity):
            shape = record.shape
            left = shape.jobs[record.count] - 1
            shape.jobs[record.count] = left
            if not left:
                del shape.jobs[record.count]
                del shape.order[record.count]
                shape.counts.remove(record.count)
                if not shape.jobs:
                    del self._shapes[shape.key]
                    known = shape.bound
                    del known.lines[record.line]
                    if not known.lines:
                        del self._bounds[known.kind]
                        bounds = self._by_constraints[known.constraints]
                        del bounds[known.kind]
                        if not bounds:
                            del self._by_constraints[known.constraints]
            self.capacity_parked -= 1
            if new:
                self._new_capacity -= 1
        elif isinstance(record, _Quota):
            # Not there if stale, or if ledger_moved took its group out to wake it.
            members = self._quota.get(record.group)
            if members is not None and members.pop(job.key, None) is not None and not members:
                del self._quota[record.group]
            self.quota_parked -= 1
            if new:
                self._new_quota -= 1

    def parked(self) -> Iterable[QueuedJob]:
        """Every capacity- and quota-parked job (for tests and debugging)."""
        for jobs in self._lines.values():
            yield from jobs.values()


def _bound(count: int, room: int | None) -> int:
    """How many pods of its shape fit at most, as a visit that did not fit a job of ``count``
    pods proves: fewer than its count, and no more than the room its fit found, if known."""
    return count - 1 if room is None or room >= count - 1 else room


def _live(heap: list[Any]) -> list[Any]:
    """The heap without the entries of jobs woken since (they are skipped when popped; this
    keeps them from piling up while they wait for their turn)."""
    kept = [item for item in heap if (item if isinstance(item, _Record) else item[1]).live]
    heapq.heapify(kept)
    return kept


def _entry(job: QueuedJob) -> tuple[Any, ...]:
    record = job.park
    assert isinstance(record, _Record)
    return record.entry


def _insort(values: list[int], value: int) -> None:
    i = len(values)
    while i and values[i - 1] > value:
        i -= 1
    values.insert(i, value)
