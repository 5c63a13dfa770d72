"""One admission cycle, in numbered steps (the shape of Kueue's scheduler.schedule):

0. relocate: move reservations off nodes that cannot take them (capacity/reservations.py);
   what cannot be moved is a debt (``Reservations.debt``): while there is one, a job is
   admitted only if the cluster's free capacity, less the debt, still covers all of it;
1. heads:    walk queued jobs in order (priority, age, name), skipping those in flight; jobs
             whose visit is known to change nothing are parked out of the walk and counted
             in bulk (admission/parking.py), so a cycle costs what changed;
2. skip:     jobs with bad input, and jobs that already failed at this capacity generation
             (nothing was freed since, so the answer cannot change);
3. fit:      simulate gang placement on current free capacity (capacity/fit.py), unless it is
             already certain not to fit (admission/fit_memo.py: the capacity freed since it,
             or a job of its shape, last failed cannot make up the difference); either way it
             counts as evaluated and takes the same path on;
4. assume:   reserve the placement in the cache *before* any API write, so the next job in this
             very cycle already sees the capacity as taken (undone if the write fails); unless
             the binding guard (capacity/binding.py) says that with its pods in flight too, the
             scheduler could leave some admitted pod without a node: then it, and every job
             after it that fits, wait for pods in flight to be bound (at most binding_wait);
5. explain:  for a bounded number of jobs that do not fit, decide whether they can ever fit
             here (that decides whether they hold their line back) and mark a human reason
             due; the reasons are written after the cycle (``explain_deferred``), once its
             admissions' writes are on their way: each is a scan of the feasible nodes, a
             courtesy to the user that must not delay an admission.

The cycle never awaits. The loop runs it in slices of a few milliseconds (``slices``) so the
event loop goes on between them, and keeps the state still meanwhile (kube/gate.py): no informer
update can interleave with a decision, and a sliced cycle decides exactly what an uninterrupted
one does.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass, field

import structlog

from kubequeue import resources
from kubequeue.admission.fit_memo import FitShortcuts
from kubequeue.admission.node_hold import NodeHold, blocking_node, plan_hold
from kubequeue.admission.notices import Notice
from kubequeue.admission.parking import Parking
from kubequeue.admission.preemption import Preemption, PreemptionPolicy, plan_preemption
from kubequeue.admission.requeue import Requeue, RequeuePolicy
from kubequeue.admission.tracker import JobTracker
from kubequeue.admission.walk import OneLine, Walk
from kubequeue.capacity.binding import BindingGuard
from kubequeue.capacity.cache import CapacityCache
from kubequeue.capacity.fit import Assignment, without_amounts
from kubequeue.capacity.topology import Chosen, Placement, explain_together
from kubequeue.queueing.queue import QueuedJob
from kubequeue.queueing.quota import QuotaLedger
from kubequeue.queueing.spec import STRICT_FIFO
from kubequeue.queueing.tree import QueueTree

log = structlog.get_logger(__name__)

_perf = time.perf_counter
# Parks made between two looks at the clock when a slicing cycle makes the last walk's first.
_SETTLE_STEP = 256
# Reasons written between two looks at the clock (each scans the nodes).
_REASONS_STEP = 1

__all__ = ["Admission", "AdmissionCycle", "CycleResult"]


@dataclass(frozen=True, slots=True)
class Admission:
    job: QueuedJob
    assignments: list[Assignment]
    # The topology domains the placement chose (capacity/topology.py), as chosen: the Admitted
    # Event and the job's kube-queue.io/topology-domain annotation say them.
    domains: tuple[Chosen, ...] = ()


@dataclass(slots=True)
class CycleResult:
    admitted: list[Admission] = field(default_factory=list)
    preemptions: list[Preemption] = field(default_factory=list)
    requeues: list[Requeue] = field(default_factory=list)
    notices: list[Notice] = field(default_factory=list)
    evaluated: int = 0
    waiting: int = 0
    # Seconds until a decision comes due without any change (None: the loop's tick will do).
    wake_in: float | None = None


class AdmissionCycle:
    def __init__(
        self,
        tracker: JobTracker,
        *,
        strict_fifo: bool = False,
        starvation_seconds: float = 0.0,
        explain_budget: int = 25,
        report_interval: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        preemption: PreemptionPolicy | None = None,
        preemption_timeout: float = 300.0,
        requeue: RequeuePolicy | None = None,
        parking: bool = True,
        binding_wait: float = 0.0,
    ) -> None:
        self.tracker = tracker
        # How long a job that fits may wait for the pods admitted before it to be bound, when
        # admitting it now could let the scheduler leave one of them without room
        # (capacity/binding.py); 0 (the default) turns the guard off.
        self.binding_wait = binding_wait
        reservations = tracker.reservations
        self._binding = BindingGuard(
            cache=tracker.cache,
            inflight=reservations.inflight,
            held_nodes=reservations.held_nodes,
            version=lambda: reservations.inflight_version,
        )
        self._binding_holder: tuple[str, ...] | None = None
        self.strict_fifo = strict_fifo
        # For the implicit queue (Queue objects carry their own spec.preemption).
        self.preemption = preemption or PreemptionPolicy()
        self.preemption_timeout = preemption_timeout
        self.requeue = requeue or RequeuePolicy()
        tracker.pods_ready_timeout = self.requeue.timeout
        self.starvation_seconds = starvation_seconds
        self._wall_clock = wall_clock
        # Per queue, the job that held the rest of its line back in the last cycle.
        self.blocked: dict[str, QueuedJob] = {}
        # Nodes held across queues for one starved job (admission/node_hold.py), and per job,
        # when no nodes could be found for it (demand, node set generation, wall clock): not
        # tried again until one of them moves on.
        self.hold: NodeHold | None = None
        self._no_hold: dict[tuple[str, str, str], tuple[object, int, float]] = {}
        self.explain_budget = explain_budget
        self.report_interval = report_interval
        self._clock = clock
        self._shortcuts = FitShortcuts()
        self._debt_logged: resources.Resources = {}
        # Jobs whose visit is a foregone conclusion sit out of the walk (admission/parking.py);
        # off, every queued job is visited (the reference the tests compare against).
        self._parking = Parking(tracker.queue) if parking else None
        # Reasons marked due by the last walk, with its instant (see explain_deferred), and the
        # notices of reasons written but not handed out yet.
        self._due: list[tuple[QueuedJob, float]] = []
        self._late: list[Notice] = []

    def run(self) -> CycleResult:
        """One whole cycle: its decisions and the reasons they left due."""
        result = self.decide()
        result.notices.extend(self.explain_deferred())
        return result

    def decide(self) -> CycleResult:
        """The cycle's decisions; the reasons for the jobs that wait are left due (the loop
        writes them with explain_deferred once it has started the admissions' writes)."""
        steps = self.slices(None)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]

    def slices(self, budget: float | None) -> Generator[CycleResult, None, CycleResult]:
        """The same cycle, stopping (yield) each time it has run ``budget`` seconds since it
        started or last resumed; None: it never stops. The caller resumes it with next() until
        StopIteration carries the result; each stop yields the result so far, whose admissions
        are final (their writes may start). Between two slices nothing may change the state it
        decides on (kube/gate.py): it then decides exactly what one uninterrupted cycle does,
        and the same code runs either way."""
        check = budget is not None
        step = budget if budget is not None else 0.0
        deadline = _perf() + step
        tracker = self.tracker
        cache = tracker.cache
        result = CycleResult()
        # Reasons a previous cycle left due are written first: they describe its state.
        if not check:
            result.notices.extend(self.explain_deferred())
        while check and (self._due or self._late):
            result.notices.extend(self.explain_deferred(_REASONS_STEP))
            if _perf() > deadline:
                yield result
                deadline = _perf() + step
        tracker.reservations.relocate()
        if check and _perf() > deadline:
            yield result
            deadline = _perf() + step
        debt = tracker.reservations.debt()
        headroom = _headroom(cache, debt)
        if debt != self._debt_logged:
            self._debt_logged = debt
            log.warning(
                "admission.owed" if debt else "admission.owed_paid",
                owed=resources.describe(debt),
                why="admitted pods the scheduler placed elsewhere than planned have no room; "
                "only what fits besides them is admitted",
            )
        if tracker.preempting:
            self._preemptors(result)
        now = self._wall_clock()
        if self.requeue.timeout:
            self._requeues(result, now)
            if self.requeue.unplaceable:
                self._unplaceable(result, now)
        if check and _perf() > deadline:
            yield result
            deadline = _perf() + step
        budget = self.explain_budget
        generation = (cache.freed_generation, cache.nodes_generation)
        starved_before = self._wall_clock() - self.starvation_seconds
        hold = self._current_hold()
        # One instant for the whole cycle: whether an explanation is stale must not depend on
        # how long the jobs before it took (parking decides it for the jobs it leaves out).
        instant = self._clock()
        blocked: dict[str, QueuedJob] = {}
        shortcuts = self._shortcuts
        shortcuts.start(cache)
        guard = self._binding if self.binding_wait > 0 else None
        if guard is not None:
            guard.start()
        # The job that fits but waits for pods in flight to be bound: the jobs after it wait
        # too, so a stream of small jobs cannot keep it waiting.
        holder: QueuedJob | None = None
        # The starved job nodes are held for does not stop its own line as other starved jobs
        # do: the jobs behind it may start where none of their pods can land on a held node
        # and its queue's quota has room for them and for it together (backfill), as other
        # queues' jobs may. Without a node hold there is no telling which room it will take,
        # so a starved job stops its line.
        backfill: QueuedJob | None = None
        # Loop invariants, read once: this walk visits every queued job, so it is kept lean.
        inflight = tracker.inflight
        nodes_generation = cache.nodes_generation
        ledger = tracker.ledger
        tree = ledger.tree
        parking = self._parking
        if parking is not None and headroom is not None:
            # While capacity is owed to displaced pods, jobs that fit are refused for the debt
            # and it is paid without any generation moving: every job is visited (parking
            # resumes once the debt is gone).
            parking.suspend()
            parking = None
        if parking is not None:
            # Parks the last walk decided and the loop's idle time did not make (a change cut
            # it short: in a busy drain, most) are made first, in slices too; start_steps would
            # make them all at once.
            while check and parking.unsettled:
                parking.settle(_SETTLE_STEP)
                if _perf() > deadline:
                    yield result
                    deadline = _perf() + step
            for _ in parking.start_steps(
                cache,
                ledger,
                generation,
                now=instant,
                report_interval=self.report_interval,
                budget=budget,
                starved_before=starved_before if self.starvation_seconds else None,
                setting=(ledger.epoch, self.strict_fifo, self.preemption),
            ):
                if check and _perf() > deadline:
                    yield result
                    deadline = _perf() + step
        lines = tracker.queue.lines()
        # One line (always so without Queue objects): walk it in order. Several: the line whose
        # head has the better fair-share claim goes next (Walk).
        walk: Walk | OneLine | None = (
            Walk(tracker.queue, lines, ledger)
            if len(lines) > 1
            else OneLine(tracker.queue, lines[0])
            if lines
            else None
        )
        jobs: Iterable[QueuedJob] = ()
        if walk is not None:
            # Parking reads the explanation budget as the walk has left it: a job it woke for
            # its explanation that does not spend it leaves it to the next due job of its line.
            jobs = walk if parking is None else parking.follow(walk, walk, lambda: budget)
        may_block = bool(self.starvation_seconds) or self.strict_fifo or bool(tree)
        lines_info = self._lines_info(tree)
        # One line: every job is in it, so its info is looked up once, not once per job.
        only = lines_info(lines[0]) if isinstance(walk, OneLine) else None
        evaluated = waiting = 0  # counted here, written to the result once
        for job in jobs:  # step 1
            # (A clock read is ~60 ns, a visit microseconds to a millisecond: read at each.)
            if check and _perf() > deadline:
                yield result
                deadline = _perf() + step
            if inflight and job.key in inflight:
                continue
            if job.problem is not None:  # step 2
                self._report(result, job, "Warning", job.problem_reason, job.problem)
                if parking is not None:
                    parking.park_silent(job, never_fits=False)
                continue
            if job.never_fits and job.never_fits_generation == nodes_generation:
                if parking is not None:
                    parking.park_silent(job, never_fits=True)
                continue
            if job.requeues and now < job.requeued_epoch + self.requeue.delay(job.requeues):
                self._backing_off(result, job)
                continue
            line = only if only is not None else lines_info(job.queue)
            stop = False
            if job.failed_at == generation or (
                job.quota_checked is not None and self._still_refused(job)
            ):
                waiting += 1
                if hold is None and job.failed_at == generation:
                    hold = self._take_hold(result, job, starved_before)
                stop = may_block and not job.over_quota and self._blocks(line, job, starved_before)
                if stop and hold is not None and job.key == hold.key and not line.strict:
                    stop, backfill = False, job
                if not stop and line.parks and parking is not None and job is not backfill:
                    memo = job.quota_checked
                    if memo is not None and self._still_refused(job):
                        parking.park_quota(job, memo[0])
                    else:
                        room = shortcuts.room(job, cache)
                        parking.park_capacity(job, room, nodes_generation)
            else:
                evaluated += 1
                # Step 3, physical fit first: it is cheap for jobs that cannot fit (fit_memo.py),
                # and the quota verdict matters only for jobs that do.
                owed = headroom is not None and not _affordable(job.demand, headroom)
                # A pod of it could land on a node held for a starved job: it is not admitted
                # whether or not it fits, so a fit of its shape found earlier in this cycle (at
                # the same capacity) answers for it.
                held_on = (
                    blocking_node(hold, job.pod_sets, cache)
                    if hold is not None and job.key != hold.key
                    else None
                )
                placed = (
                    None
                    if owed
                    else _FITS
                    if (holder is not None or held_on is not None) and shortcuts.known_to_fit(job)
                    else shortcuts.place(job, cache)
                )
                quota_ok = True
                if placed is not None and job.queue:  # step 4: policy
                    quota_ok = self._quota_allows(result, job)
                if placed is None or not quota_ok:
                    held_on = None  # it waits for capacity or quota, as without the hold
                # Behind the starved job nodes are held for: its queue keeps quota for it.
                kept = (
                    placed is not None
                    and quota_ok
                    and held_on is None
                    and backfill is not None
                    and job.queue == backfill.queue
                    and bool(job.queue)
                    and bool(self._quota_kept(job, backfill))
                )
                if (
                    placed is not None
                    and quota_ok
                    and held_on is None
                    and not kept
                    and guard is not None
                    and (holder is not None or self._waits_for_binding(guard, job, instant))
                ):
                    # It, and every job behind it that fits, waits for the next cycle (a pod
                    # bound frees its hold and wakes the loop); from here on nothing is
                    # admitted, so one fit per shape tells the rest of the shape.
                    if holder is None:
                        holder = job
                    shortcuts.fitted(job)
                    waiting += 1
                    self._report_binding(result, job)
                    continue
                if placed is not None and quota_ok and held_on is None and not kept:
                    shortcuts.taken()
                    if hold is not None and job.key == hold.key:
                        self._release_hold("admitted")
                        hold = None
                    borrowing = bool(job.queue) and _borrows(ledger, job)
                    if guard is not None:
                        guard.holding()
                    tracker.begin_admission(  # step 5
                        job, job.pod_sets, placed.assignments, borrowing, placed.domains
                    )
                    if guard is not None:
                        guard.admitted(job.pod_sets)
                    if headroom is not None:
                        _spend(job.demand, headroom)
                    result.admitted.append(Admission(job, placed.assignments, placed.domains))
                    if walk is not None:
                        walk.admitted()
                    if parking is not None and walk is not None and job.queue:
                        parking.ledger_moved(walk)
                    continue
                if placed is None and not owed:
                    # (A job refused for the debt is judged again next cycle: the debt can be
                    # paid by a relocation, which changes no generation.)
                    job.failed_at = generation
                policy = line.policy
                if policy is not None and held_on is None and not kept:  # step 6: make room
                    preempting = self._preempt(result, job, policy, quota=not quota_ok)
                    if preempting:
                        shortcuts.taken()
                    if preempting and walk is not None:
                        walk.admitted()
                    if parking is not None and walk is not None:
                        # Even an attempt moves ledger versions (it weighs the victims' absence).
                        parking.ledger_moved(walk)
                    if preempting:
                        continue
                waiting += 1
                if owed:
                    self._owed(result, job)
                elif held_on is not None and hold is not None:
                    # Its Event counts against the reasons' budget: a hold can keep thousands
                    # of jobs waiting at once, and Events share the API server with admissions.
                    if self._report_held(result, job, hold, held_on, budget > 0):
                        budget -= 1
                elif kept:  # like the held jobs', its Event counts against the budget
                    if budget > 0 and self._report(
                        result, job, "Normal", "Queued", f"waiting: {KEPT}"
                    ):
                        budget -= 1
                elif placed is None and budget > 0 and self._explain(result, job, instant):
                    budget -= 1  # step 7
                if hold is None and placed is None and not owed:
                    hold = self._take_hold(result, job, starved_before)
                stop = (
                    may_block
                    and not job.never_fits
                    and not job.over_quota
                    and self._blocks(line, job, starved_before)
                )
                if stop and hold is not None and job.key == hold.key and not line.strict:
                    stop, backfill = False, job
                if not stop and line.parks and parking is not None and job is not backfill:
                    if placed is None:
                        if job.never_fits and job.never_fits_generation == nodes_generation:
                            parking.park_silent(job, never_fits=True)
                        else:
                            room = shortcuts.room(job, cache)
                            parking.park_capacity(job, room, nodes_generation)
                    elif not quota_ok and job.quota_checked is not None:
                        parking.park_quota(job, job.quota_checked[0])
            if stop:
                blocked[job.queue] = job
                if parking is not None:
                    parking.blocked(job)
                if walk is None or isinstance(walk, OneLine):
                    break
                walk.block(job.queue)
        if check and _perf() > deadline:
            yield result
        if parking is not None:
            parked_evaluated, parked_waiting = parking.finish(generation)
            evaluated += parked_evaluated
            waiting += parked_waiting
        result.evaluated += evaluated
        result.waiting += waiting
        self._note_blocking(blocked)
        self._note_binding(holder)
        return result

    def _current_hold(self) -> NodeHold | None:
        """The hold carried over from the last cycle, if it still stands: its job still waits
        as it was planned for, on the same nodes, and has not waited out another starvation
        timeout on them (then its nodes are planned again from the cluster as it is)."""
        hold = self.hold
        if hold is None:
            return None
        if not self.starvation_seconds:
            self._release_hold("the starvation guard is off")
            return None
        job = self.tracker.queue.get(hold.key)
        if job is None or job.key in self.tracker.inflight:
            self._release_hold("its job left the queue")
            return None
        why = self._idle_hold(job)
        if why:
            self._release_hold(why)
            return None
        now = self._wall_clock()
        if (
            job.pod_sets is hold.pod_sets
            and hold.nodes_generation == self.tracker.cache.nodes_generation
            and now - hold.since < self.starvation_seconds
        ):
            return hold
        planned = plan_hold(self.tracker, job, now)
        if planned is None:
            self._release_hold("no nodes can drain enough for it any more")
            return None
        if planned.nodes != hold.nodes:
            log.info(
                "queue.node_hold_moved",
                job="/".join(hold.key),
                nodes=list(planned.nodes),
                was=list(hold.nodes),
                why="nodes or its demand changed, or the held nodes did not drain in another "
                "starvation timeout",
            )
        self.hold = planned
        return planned

    def _take_hold(
        self, result: CycleResult, job: QueuedJob, starved_before: float
    ) -> NodeHold | None:
        """Hold nodes for a starved job that does not fit though its quota would allow it
        (admission/node_hold.py); None if it is not starved or no nodes would do."""
        if (
            not self.starvation_seconds
            or job.created_epoch >= starved_before
            or self._idle_hold(job)
        ):
            return None
        tracker = self.tracker
        now = self._wall_clock()
        generation = tracker.cache.nodes_generation
        memo = self._no_hold.get(job.key)
        if (
            memo is not None
            and memo[0] is job.pod_sets
            and memo[1] == generation
            and now - memo[2] < self.report_interval
        ):
            return None
        hold = plan_hold(tracker, job, now)
        if hold is None:
            if len(self._no_hold) > 10_000:
                self._no_hold.clear()
            self._no_hold[job.key] = (job.pod_sets, generation, now)
            return None
        self._no_hold.pop(job.key, None)
        self.hold = hold
        waited = now - job.created_epoch
        log.info(
            "queue.node_hold",
            job="/".join(job.key),
            queue=job.queue or None,
            nodes=list(hold.nodes),
            waited_s=round(waited),
            why="it has waited longer than the starvation timeout and does not fit; nothing "
            "else starts on these nodes until it does",
        )
        self._report(
            result,
            job,
            "Normal",
            "NodesHeld",
            f"waited longer than the starvation timeout ({self.starvation_seconds:.0f}s): "
            f"node(s) {hold.describe()} are held for it; no other job starts there until "
            "it fits",
        )
        return hold

    def _idle_hold(self, job: QueuedJob) -> str:
        """Why nodes held for the job would only idle ("" if they would not): it cannot be
        admitted as it is, or its queue's quota refuses it now (its tree used the quota; a
        hold is taken again once the quota allows it)."""
        if job.problem is not None or job.never_fits or job.over_quota:
            return "its job cannot be admitted as it is"
        if job.queue and not self.tracker.ledger.check(job.queue, job.demand).allowed:
            return "its queue's quota no longer allows it"
        return ""

    def _release_hold(self, why: str) -> None:
        hold = self.hold
        if hold is not None:
            log.info("queue.node_hold_released", job="/".join(hold.key), why=why)
        self.hold = None

    def _quota_kept(self, job: QueuedJob, head: QueuedJob) -> str:
        """Why ``job``'s queue path cannot take its demand and ``head``'s together, or "" if it
        can. Not remembered in ``quota_checked``: the answer depends on the hold, which may end
        without the ledger moving."""
        both = dict(job.demand)
        resources.add_into(both, head.demand)
        verdict = self.tracker.ledger.check(job.queue, both)
        if verdict.allowed:
            return ""
        holder = f"{head.key[0]} {head.key[1]}/{head.key[2]}"
        job.wait_reason = (
            f"it fits, but its queue's quota is kept for {holder}, ahead of it, which has "
            f"waited past the starvation timeout and has nodes held for it: {verdict.reason}"
        )
        return verdict.reason

    def _report_held(
        self, result: CycleResult, job: QueuedJob, hold: NodeHold, node: str, event: bool
    ) -> bool:
        """Say why it waits (``kube-queue status``), and with an Event if ``event``; True if
        an Event was due (one per job while the text stays the same)."""
        holder = f"{hold.key[0]} {hold.key[1]}/{hold.key[2]}"
        job.wait_reason = (
            f"it fits, but a pod could land on node {node}, held for {holder} (waited past "
            "the starvation timeout)"
        )
        if not event:
            return False
        return self._report(result, job, "Normal", "Queued", f"waiting: {HELD}")

    def _waits_for_binding(self, guard: BindingGuard, job: QueuedJob, instant: float) -> bool:
        """Whether a job that fits waits for pods in flight to be bound first (see
        capacity/binding.py), for at most ``binding_wait`` seconds: pods that are never bound
        (a reason the scheduler has and we do not model) must not stop the queue."""
        if guard.admits(job.pod_sets):
            job.binding_since = None
            return False
        since = job.binding_since
        if since is None:
            job.binding_since = since = instant
        if instant - since < self.binding_wait:
            return True
        job.binding_since = None
        log.warning(
            "admission.binding_wait_over",
            job="/".join(job.key),
            waited_s=round(instant - since, 1),
            inflight_pods=self.tracker.reservations.inflight_pods(),
            why="pods admitted before it are still not bound; admitted without the margin that "
            "keeps room for all of them whatever order the scheduler binds them in",
        )
        return False

    def _report_binding(self, result: CycleResult, job: QueuedJob) -> None:
        job.wait_reason = BINDING
        self._report(result, job, "Normal", "Queued", f"waiting: {BINDING}")

    def _note_binding(self, holder: QueuedJob | None) -> None:
        """Log when the job holding admissions for pods in flight changes (not every cycle)."""
        key = holder.key if holder is not None else None
        if key == self._binding_holder:
            return
        self._binding_holder = key
        if holder is not None:
            log.info(
                "admission.waits_for_binding",
                job="/".join(holder.key),
                inflight_pods=self.tracker.reservations.inflight_pods(),
                why=BINDING,
            )

    @property
    def unsettled(self) -> int:
        """Parks the last cycle decided and has not made yet (admission/parking.py)."""
        return self._parking.unsettled if self._parking is not None else 0

    def settle(self, limit: int | None = None) -> None:
        """Make (up to ``limit`` of) them: the loop does this while it waits for a change; the
        next cycle makes the rest first. The reasons due are written before (whether a parked
        job's reason is fresh decides when it wakes); their notices wait for explain_deferred."""
        if self._due:
            self._late.extend(self.explain_deferred())
        if self._parking is not None:
            self._parking.settle(limit)

    @property
    def reasons_due(self) -> int:
        return len(self._due)

    def settle_for(self, seconds: float, batch: int) -> None:
        """Make parks for about ``seconds`` (``batch`` at least, then batches until the time is
        up): one turn of the loop's idle time."""
        started = _perf()
        self.settle(batch)
        while self.unsettled and _perf() - started < seconds:
            self.settle(batch)

    def explain_deferred(self, limit: int | None = None) -> list[Notice]:
        """Write the reasons the last walk marked due (at most its budget; at most ``limit`` of
        them in this call) and return the notices to publish. The loop calls this once the
        cycle's writes have started, so an admission never waits for them; each reason
        describes the capacity as it is now (a scan of the nodes: at 65,000 nodes, milliseconds
        each, so the loop writes a few at a time)."""
        late, self._late = self._late, []
        due = self._due
        if limit is not None and len(due) > limit:
            due, self._due = due[:limit], due[limit:]
        else:
            self._due = []
        if not due:
            return late
        result = CycleResult(notices=late)
        queue = self.tracker.queue
        inflight = self.tracker.inflight
        for job, instant in due:
            current = queue.get(job.key)
            if current is None or current.key in inflight or current.explained_at != instant:
                continue  # admitted, gone, or replaced by a version judged afresh since
            self._write_reason(result, current)
        return result.notices

    def _lines_info(self, tree: QueueTree) -> Callable[[str], _Line]:
        """Per queue, what the walk asks of it for every job (strategy, preemption policy),
        looked up once per cycle."""
        known: dict[str, _Line] = {}

        def info(queue: str) -> _Line:
            found = known.get(queue)
            if found is None:
                found = known[queue] = self._line(tree, queue)
            return found

        return info

    def _line(self, tree: QueueTree, queue: str) -> _Line:
        node = tree.nodes.get(queue) if queue else None
        if node is None:
            policy = self.preemption if not queue else PreemptionPolicy()
            return _Line(self.strict_fifo, policy or None)
        spec = node.spec
        policy = PreemptionPolicy(spec.reclaim, spec.preempt_lower_priority)
        return _Line(spec.strategy == STRICT_FIFO, policy or None)

    def _still_refused(self, job: QueuedJob) -> bool:
        """The job's quota was refused at exactly the current usage of its tree: it still is."""
        memo = job.quota_checked
        return (
            memo is not None and not memo[1] and memo[0] == self.tracker.ledger.version(job.queue)
        )

    def _preempt(
        self, result: CycleResult, job: QueuedJob, policy: PreemptionPolicy, *, quota: bool
    ) -> bool:
        """Step 6: a job that does not fit (or, preempting within its queue, is over quota) may
        take capacity from others if its queue allows it: the fewest jobs whose removal lets
        every pod of it fit on real nodes (admission/preemption.py). Its capacity is held at
        once; it is admitted when the victims' pods are gone."""
        if quota and not policy.lower_priority:
            return False
        plan = plan_preemption(self.tracker, job, policy)
        if plan is None:
            return False
        borrowing = bool(job.queue) and self.tracker.ledger.needs_to_borrow(job.queue, job.demand)
        self.tracker.begin_preemption(
            job,
            plan.placement,
            [v.key for v in plan.victims],
            plan.reason,
            self._clock(),
            borrowing,
            plan.domains,
        )
        result.preemptions.append(plan)
        log.info(
            "job.preempting",
            job="/".join(job.key),
            victims=["/".join(v.key) for v in plan.victims],
            why=plan.reason,
        )
        if plan.victims:
            victims = ", ".join(f"{v.key[0]} {v.key[1]}/{v.key[2]}" for v in plan.victims)
            message = f"{plan.reason}: stopping {victims}; admitted once their pods are gone"
            self._report(result, job, "Normal", "Preempting", message)
        return True

    def _preemptors(self, result: CycleResult) -> None:
        """Preemptors whose victims are gone are admitted where their capacity is held; those
        that waited too long go back to their queue."""
        tracker = self.tracker
        for state in tracker.ready_preemptors():
            job = state.job
            placement = tracker.reservations.assignments(job.key)
            tracker.finish_preemption(job.key)
            result.admitted.append(Admission(job, placement, state.domains))
        now = self._clock()
        for key, state in list(tracker.preempting.items()):
            if now - state.started > self.preemption_timeout:
                tracker.abandon_preemption(key, "its victims did not stop in time")
                self._report(
                    result,
                    state.job,
                    "Warning",
                    "PreemptionTimedOut",
                    f"the jobs it preempted did not stop within {self.preemption_timeout:.0f}s; "
                    "it waits in its queue again",
                )

    def _requeues(self, result: CycleResult, now: float) -> None:
        """Admitted jobs whose pods did not all start in time are suspended again (the loop
        writes it; admission/requeue.py), unless their kind cannot be suspended once running."""
        for job, started, expected in self.tracker.never_started(now):
            attempt = job.requeues + 1
            if self._take_for_requeue(
                result,
                Requeue(job, attempt, attempt >= self.requeue.limit, started, expected),
                "job.not_started",
                "its kind cannot be suspended once running (or it is marked preemptible: "
                "false), so it is not requeued",
            ):
                continue
            # Left running, its owner must still hear of it, as a requeued job's owner does:
            # a log line reaches only the admin. Once: never_started yields a job once per
            # admission.
            timeout = self.tracker.ready_timeout(job.queue)
            result.notices.append(
                Notice(
                    job.key,
                    job.uid,
                    "Warning",
                    "NotStarted",
                    f"its pods did not all start within {timeout:.0f}s of admission ({started} "
                    f"of {expected} running and ready); its kind cannot be suspended once "
                    "running (or it is marked preemptible: false), so kube-queue leaves it "
                    "running",
                )
            )

    def _unplaceable(self, result: CycleResult, now: float) -> None:
        """Starting jobs whose pods have been owed room for too long are suspended again at
        once (admission/requeue.py), once the loop has confirmed it from their pods."""
        due, next_due = self.tracker.unplaceable(now, self.requeue.unplaceable)
        for job, started, expected in due:
            self._take_for_requeue(
                result,
                Requeue(job, job.requeues, False, started, expected, unplaceable=True),
                "job.unplaceable",
                "its pods have no node with room, but its kind cannot be suspended once "
                "running (or it is marked preemptible: false): it waits for room",
            )
        if next_due is not None:
            result.wake_in = max(0.0, next_due - now)

    def _take_for_requeue(
        self, result: CycleResult, requeue: Requeue, event: str, why_not: str
    ) -> bool:
        """Hand a requeue to the loop, the job marked so that nobody preempts it meanwhile;
        or, when its kind cannot be suspended once running, only log it (False)."""
        job = requeue.job
        if job.preemption_patch is None:
            log.warning(
                event,
                job="/".join(job.key),
                started=requeue.started,
                expected=requeue.expected,
                why=why_not,
            )
            return False
        result.requeues.append(requeue)
        self.tracker.victims[job.key] = job.key
        return True

    def _backing_off(self, result: CycleResult, job: QueuedJob) -> None:
        until = job.requeued_epoch + self.requeue.delay(job.requeues)
        when = time.strftime("%H:%M:%S", time.gmtime(until))
        job.wait_reason = (
            f"backing off after {job.requeues} failed start(s): may be admitted again at {when} UTC"
        )
        result.waiting += 1

    def _quota_allows(self, result: CycleResult, job: QueuedJob) -> bool:
        """Step 3: may the job's queue path take its demand now? If not, say why: the Event
        names the queue and the limit (stable text); the numbers go to ``quota_reason`` for
        ``kube-queue status``. A job above a limit even with its queue empty never blocks."""
        ledger = self.tracker.ledger
        version = ledger.version(job.queue)
        memo = job.quota_checked
        if memo is not None and memo[0] == version:
            if memo[1]:
                return True
            if job.quota_reason:  # refused at this very usage: already reported
                return False
        verdict = ledger.check(job.queue, job.demand)
        job.quota_checked = (version, verdict.allowed, verdict.borrowing)
        if verdict.allowed:
            job.quota_reason = ""
            return True
        job.quota_reason = verdict.reason
        job.over_quota = ledger.beyond_limits(job.queue, job.demand)
        if job.over_quota:
            self._report(
                result,
                job,
                "Warning",
                "QuotaExceeded",
                f"can never be admitted into queue {job.queue}: {job.over_quota}; it stays "
                "queued until the Queue's limits change",
            )
        else:
            self._report(result, job, "Normal", "Queued", f"waiting for quota: {verdict.cause}")
        return False

    def _blocks(self, line: _Line, job: QueuedJob, starved_before: float) -> bool:
        """Whether a job that cannot be admitted stops the jobs behind it *in its queue*.

        Always under StrictFIFO (the queue's strategy; ``--strict-fifo`` for the implicit
        queue). Under BestEffortFIFO only once it has waited longer than
        ``starvation_seconds``: until then smaller jobs may fill the gaps it cannot use, after
        that the gaps are left to grow until it fits, so a big gang job cannot starve forever
        behind a stream of small ones.
        """
        if line.strict:
            return True
        return bool(self.starvation_seconds) and job.created_epoch < starved_before

    def _note_blocking(self, blocked: dict[str, QueuedJob]) -> None:
        for line, job in blocked.items():
            if self.blocked.get(line) is job:
                continue
            if not self.tracker.ledger.tree.strict(line, self.strict_fifo):
                log.info(
                    "queue.holding_for_starved_job",
                    job="/".join(job.key),
                    queue=line or None,
                    waited_s=round(self._wall_clock() - job.created_epoch),
                    why="it has waited longer than the starvation timeout; jobs behind it in "
                    "its queue wait until it is admitted",
                )
        self.blocked = blocked

    def _explain(self, result: CycleResult, job: QueuedJob, now: float) -> bool:
        """Refresh the job's reasons if they are stale (at ``now``, the cycle's instant); True
        if work was spent."""
        cache = self.tracker.cache
        spent = False
        if job.never_fits_generation != cache.nodes_generation:
            job.never_fits = explain_together(job.pod_sets, cache, empty_cluster=True)
            job.never_fits_generation = cache.nodes_generation
            spent = True
            if job.never_fits:
                message = (
                    "cannot run on this cluster as it is, even if it were empty: "
                    f"{job.never_fits}; it stays queued until nodes change"
                )
                self._report(result, job, "Warning", "NeverFits", message)
                job.wait_reason = job.never_fits
                return spent
        last = job.explained_at
        if job.wait_reason and last is not None and now - last < self.report_interval:
            return spent
        job.explained_at = now
        self._due.append((job, now))
        return True

    def _write_reason(self, result: CycleResult, job: QueuedJob) -> None:
        why = explain_together(job.pod_sets, self.tracker.cache)
        if not why:
            # It fits now: capacity was freed since the walk (the change that freed it has
            # woken the loop, and the next cycle judges the job). Due again if it still waits.
            job.explained_at = None
            return
        job.wait_reason = why
        where = f" in queue {job.queue}" if job.queue else ""
        self._report(
            result,
            job,
            "Normal",
            "Queued",
            f"waiting for capacity{where}: {why}",
            same_as=f"capacity{where}: {without_amounts(why)}",
        )

    def _owed(self, result: CycleResult, job: QueuedJob) -> None:
        # One stable text (the amount owed is logged once per change, in run()): every queued
        # job gets this Event once, not once per change of the debt.
        job.wait_reason = OWED
        self._report(result, job, "Normal", "Queued", f"waiting for capacity: {OWED}")

    def _report(
        self,
        result: CycleResult,
        job: QueuedJob,
        type_: str,
        reason: str,
        msg: str,
        *,
        same_as: str | None = None,
    ) -> bool:
        """Queue a notice unless the job's last one of this reason said the same (``same_as``:
        what the message says without amounts that change while the job waits for the same
        thing; the message itself by default); True if queued."""
        said = msg if same_as is None else same_as
        reported = job.reported
        if reported is None:
            reported = job.reported = {}
        elif reported.get(reason) == said:
            return False
        reported[reason] = said
        result.notices.append(Notice(job.key, job.uid, type_, reason, msg))
        return True


@dataclass(frozen=True, slots=True)
class _Line:
    strict: bool
    policy: PreemptionPolicy | None  # None: this queue never preempts

    @property
    def parks(self) -> bool:
        """Whether the walk may leave its waiting jobs out (admission/parking.py): a job that
        may preempt, or that blocks the line behind it whenever it does not fit, never is."""
        return self.policy is None and not self.strict


def _borrows(ledger: QuotaLedger, job: QueuedJob) -> bool:
    """Whether admitting the job would borrow: take guarantee that is not its path's to take
    (QuotaLedger.needs_to_borrow; memoised like the quota verdict: it changes only with the
    usage of the job's tree)."""
    version = ledger.version(job.queue)
    memo = job.quota_checked
    if memo is not None and memo[0] == version and memo[1]:
        return memo[2]
    return ledger.needs_to_borrow(job.queue, job.demand)


# A placement that is known to exist but was not computed (the job is not admitted this cycle).
_FITS = Placement([])

BINDING = (
    "pods admitted before it are not bound to nodes yet and room is tight: admitted now, the "
    "scheduler could bind them where another admitted pod needs room; admitted as they are bound"
)

HELD = (
    "it fits, but a node it could start on is held for a job that has waited past the "
    "starvation timeout; it starts once that job does, or where other room frees"
)

KEPT = (
    "it fits, but its queue's quota is kept for a job ahead of it that has waited past the "
    "starvation timeout and has nodes held for it; it starts once that job does, or when the "
    "queue's usage leaves room for both"
)

OWED = (
    "the scheduler placed admitted pods elsewhere than planned and some have no room yet; "
    "nothing is admitted into the capacity they are owed until pods end or move"
)


def _headroom(cache: CapacityCache, debt: resources.Resources) -> resources.Resources | None:
    """Free capacity that is really free while admitted pods are owed room: per resource in
    debt, the sum over schedulable nodes of what they have free, less the debt. None: no debt,
    nothing to check (the usual case)."""
    if not debt:
        return None
    free = dict.fromkeys(debt, 0)
    for state in cache.nodes.values():
        if state.schedulable:
            for name in debt:
                amount = state.free.get(name, 0)
                if amount > 0:
                    free[name] += amount
    return {name: free[name] - owed for name, owed in debt.items()}


def _affordable(demand: resources.Resources, headroom: resources.Resources) -> bool:
    # A job that asks nothing of a resource in debt does not make the debt worse, even when the
    # debt is larger than what is free (headroom below zero).
    return all(demand.get(name, 0) <= max(left, 0) for name, left in headroom.items())


def _spend(demand: resources.Resources, headroom: resources.Resources) -> None:
    for name in headroom:
        headroom[name] -= demand.get(name, 0)
