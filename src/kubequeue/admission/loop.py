"""THE admission loop: wait for a change, run a cycle, write its admissions, report, repeat.

It wakes when the queue changes (a job arrived or changed) or capacity is freed (a pod ended, a
node appeared), and at least every ``tick`` seconds as a safety net. Bursts coalesce: a thousand
pod deletions while a cycle runs cause one more cycle, not a thousand.

Writes happen concurrently (bounded) inside this loop's task group, after the cycle has already
reserved their capacity; the next cycle can run while they are in flight. What happens after a
write depends on what is known about it:

- applied (2xx): the job is admitted, its hold tracked;
- refused by the server (a failed precondition, 404, 4xx, most 5xx): undone - hold released,
  job back in line;
- never sent (the connection could not be made, or leadership was lost before sending): the job
  keeps its hold and the same write is sent again after a jittered backoff, or, if leadership
  was lost, it is undone;
- outcome unknown (the connection broke after sending, a timeout, or leadership lost mid-write):
  the write may have been applied, so the job keeps its hold and stays in flight (no cycle
  considers it) until an observation settles it: admitted, or changed so that the write's
  precondition can no longer pass (JobTracker.admission_unknown). If none arrives within
  ``settle_timeout`` (plus jitter), a fresh read decides: such an object settles it the same
  way, no object means it is gone, and a still-suspended object the precondition matches means
  the write was not applied (yet), so it is sent again - safe, because the precondition tests
  that the job is not admitted already, which lets at most one copy apply (precondition.py).
  A read that fails is retried with
  backoff, the hold kept meanwhile. Unknown outcomes left by a previous term as leader are
  resumed when the loop starts.

No transport failure ends the loop; each is logged, counted and retried. The same holds for the
follow-up writes, whose patch is kept for another attempt until the server has answered it.
"""

from __future__ import annotations

import datetime
import random
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
import structlog

from kubequeue.admission.cycle import Admission, AdmissionCycle, CycleResult
from kubequeue.admission.notices import Notice
from kubequeue.admission.preemption import Preemption
from kubequeue.admission.requeue import Requeue, not_running, unschedulable
from kubequeue.admission.tracker import AdmittedJob, JobTracker
from kubequeue.identity import JobKey
from kubequeue.kinds.common import spec_hash
from kubequeue.kube import writer
from kubequeue.kube.client import ApiError, KubeClient, KubeError, TransportError, backoff
from kubequeue.kube.events import EventRecorder, InvolvedObject
from kubequeue.kube.gate import DecisionGate
from kubequeue.kube.pods import list_pods
from kubequeue.labels import GAVE_UP, PREEMPTED_BY, REQUEUED_AT, REQUEUES, STOPPED
from kubequeue.objects import Pod, PodDiagnosis
from kubequeue.observability import metrics
from kubequeue.status import IMPLICIT_QUEUE_NAME, queue_rows

__all__ = ["AdmissionLoop"]

log = structlog.get_logger(__name__)

# Jobs parked between two looks at the clock while parking between cycles (a park costs
# 5-50 us, more with more parked jobs); parking goes on for SLICE_SECONDS at a time.
SETTLE_SLICE = 256
# A cycle's slice, seconds: short against a webhook's timeout (seconds) and the loop's other
# work (a watch chunk, a metrics scrape), long against the cost of pausing (one checkpoint).
SLICE_SECONDS = 0.02
# Admission writes started per turn of the event loop (the limiter lets max_inflight of them
# send at once; more only wait): during a cycle, between two slices; after it, the rest.
WRITES_PER_TURN = 64
# Reasons for waiting jobs written per slice after a cycle (each a scan of the nodes); those
# left when a change comes are written first by the next cycle.
REASONS_SLICE = 1


class AdmissionLoop:
    def __init__(
        self,
        tracker: JobTracker,
        cycle: AdmissionCycle,
        client: KubeClient,
        events: EventRecorder,
        *,
        max_inflight: int = 16,
        tick: float = 5.0,
        settle_timeout: float = 5.0,
        retry_delay: float = 0.5,
        max_retry_delay: float = 10.0,
        rejected_pause: float = 1.0,
        slice_seconds: float | None = SLICE_SECONDS,
        gate: DecisionGate | None = None,
    ) -> None:
        self.tracker = tracker
        # A cycle runs this long at most before the event loop gets a turn (None: in one go).
        self.slice_seconds = slice_seconds
        # Closed while a cycle runs; shared with whatever could change the state (kube/gate.py).
        self.gate = gate if gate is not None else DecisionGate()
        self.cycle = cycle
        self.client = client
        self.events = events
        self.max_inflight = max_inflight
        self.tick = tick
        self.settle_timeout = settle_timeout
        self.retry_delay = retry_delay
        self.max_retry_delay = max_retry_delay
        self.rejected_pause = rejected_pause
        self._wakeup = anyio.Event()
        # Admissions of the cycle under way whose writes have started (``_decide``).
        self._started = 0
        self._gauges_at = 0.0
        self._queue_series: set[tuple[str, ...]] = set()
        self._following: set[JobKey] = set()
        self._follow_up_failures: dict[JobKey, int] = {}
        # Admissions whose outcome is unknown, kept across terms as leader so a new term can
        # resume settling them (the tracker keeps their holds meanwhile).
        self._unknown: dict[JobKey, Admission] = {}

    def wake(self) -> None:
        self._wakeup.set()

    async def run(self) -> None:
        limiter = anyio.CapacityLimiter(self.max_inflight)
        log.info("admission.loop_started", queued=len(self.tracker.queue))
        async with anyio.create_task_group() as tg:
            for key in list(self.tracker.unknown):
                resumed = self._unknown.get(key)
                if resumed is not None:
                    tg.start_soon(self._admit, resumed, limiter, True)
            wake_in: float | None = None
            while True:
                with anyio.move_on_after(self.tick if wake_in is None else min(self.tick, wake_in)):
                    await self._wakeup.wait()
                self._wakeup = anyio.Event()
                started = time.perf_counter()
                result, busy, slices = await self._decide(tg, limiter)
                wake_in = result.wake_in
                metrics.CYCLE_SECONDS.observe(busy)
                if result.evaluated or result.admitted:
                    log.debug(
                        "admission.cycle",
                        evaluated=result.evaluated,
                        admitted=len(result.admitted),
                        waiting=result.waiting,
                        ms=round(busy * 1000, 2),
                        slices=slices,
                        wall_ms=round((time.perf_counter() - started) * 1000, 2),
                    )
                for notice in result.notices:
                    self._publish(notice)
                await self._start_writes(tg, limiter, result.admitted[self._started :])
                for preemption in result.preemptions:
                    for victim in preemption.victims:
                        tg.start_soon(self._preempt, preemption, victim, limiter)
                for requeue in result.requeues:
                    tg.start_soon(self._requeue, requeue, limiter)
                for key in list(self.tracker.follow_ups):
                    if key not in self._following:
                        self._following.add(key)
                        tg.start_soon(self._follow_up, key, limiter)
                self._update_gauges()
                # Let informers run between cycles even under a constant stream of wake-ups,
                # and the writes just started send their requests before the reasons below.
                await anyio.lowlevel.checkpoint()
                # One at a time: each reason is a scan of the nodes (tens of ms at 65,000).
                for notice in self.cycle.explain_deferred(REASONS_SLICE):
                    self._publish(notice)
                while self.cycle.reasons_due and not self._wakeup.is_set():
                    await anyio.lowlevel.checkpoint()
                    for notice in self.cycle.explain_deferred(REASONS_SLICE):
                        self._publish(notice)
                # Park what the cycle found waiting in vain while nothing else needs the loop
                # (after a start-up, the whole queue), a slice at a time so the writes just
                # started and the informers go on; a change cuts it short.
                while self.cycle.unsettled and not self._wakeup.is_set():
                    self.cycle.settle_for(self.slice_seconds or 0.0, SETTLE_SLICE)
                    await anyio.lowlevel.checkpoint()

    async def _decide(
        self, tg: anyio.abc.TaskGroup, limiter: anyio.CapacityLimiter
    ) -> tuple[CycleResult, float, int]:
        """One cycle, in slices of at most about ``slice_seconds`` with the event loop let go
        on between them and the state kept still meanwhile (the gate): the Lease, the webhook,
        metrics and watch reads wait a slice, never a whole cycle. Returns the result, the
        cycle's own time (its slices' sum) and the number of slices.

        The writes of the admissions decided so far start between slices (up to
        WRITES_PER_TURN each time; ``_started`` of them in all): an admission is final once
        decided, and its write's answer waits at the gate like any other. After a start-up or
        failover the first jobs are written after a slice, not after the cycle over the whole
        queue.

        Cancellation (leadership lost, shutdown) is held off until the cycle is done: a cycle
        abandoned halfway would leave jobs begun (holds taken) that no write task will ever
        settle. Done, its admissions are started as always, into a cancelled group, where
        each undoes itself before sending (as any write not yet sent)."""
        steps = self.cycle.slices(self.slice_seconds)
        gate = self.gate
        busy = 0.0
        slices = 0
        self._started = 0
        gate.close()
        try:
            while True:
                slices += 1
                started = time.perf_counter()
                try:
                    so_far = next(steps)
                except StopIteration as done:
                    busy += time.perf_counter() - started
                    return done.value, busy, slices
                busy += time.perf_counter() - started
                new = so_far.admitted[self._started : self._started + WRITES_PER_TURN]
                for admission in new:
                    tg.start_soon(self._admit, admission, limiter)
                self._started += len(new)
                with anyio.CancelScope(shield=True):
                    await anyio.lowlevel.checkpoint()
        finally:
            gate.open()

    async def _start_writes(
        self, tg: anyio.abc.TaskGroup, limiter: anyio.CapacityLimiter, admissions: list[Admission]
    ) -> None:
        """Start the admissions' writes, WRITES_PER_TURN at a time: a first cycle after a
        failover admits thousands of jobs, and each new task's first step (up to the limiter)
        is work for the event loop. Cancellation waits until all are started (shielded): one
        never started would never undo its hold; started into a cancelled group, each does."""
        for i in range(0, len(admissions), WRITES_PER_TURN):
            if i:
                with anyio.CancelScope(shield=True):
                    await anyio.lowlevel.checkpoint()
            for admission in admissions[i : i + WRITES_PER_TURN]:
                tg.start_soon(self._admit, admission, limiter)

    async def _quiet(self) -> None:
        """A cancelled write task cleans up (undoes a hold, drops a victim) while the loop,
        shielded, may still be finishing a cycle: it waits for that cycle, shielded too."""
        if self.gate.closed:
            with anyio.CancelScope(shield=True):
                await self.gate.wait_open()

    async def _admit(
        self, admission: Admission, limiter: anyio.CapacityLimiter, resumed: bool = False
    ) -> None:
        job = admission.job
        kind, namespace, name = job.key
        adapter = self.tracker.adapters[kind]
        # Set when this attempt's outcome became unknown; an observation sets it once settled,
        # and from then on the tracker's verdict stands and this task touches nothing.
        settled: anyio.Event | None = None
        may_be_applied = resumed  # a write of ours may have been applied, unsettled so far
        done = False
        failures = 0
        try:
            if resumed:  # left unknown by the previous term
                settled = self._outcome_unknown(admission, None)
            while True:
                # Unknown: wait for it to settle; if the job reads back unchanged instead, the
                # write was not applied, and it is sent again.
                if settled is not None and await self._await_outcome(admission, settled, limiter):
                    done = True
                    return
                try:
                    async with limiter:
                        may_be_applied = True
                        obj = await writer.admit(
                            self.client,
                            adapter.info,
                            namespace,
                            name,
                            job.guard,
                            job.admission_ops,
                            job.admission_annotations,
                        )
                except KubeError as exc:
                    if settled is not None and settled.is_set():
                        done = True  # settled meanwhile; the write can no longer apply
                        return
                    if settled is not None and isinstance(exc, ApiError) and exc.conflict:
                        continue  # changed since - maybe by our own earlier write: observe it
                    if isinstance(exc, ApiError) and not exc.maybe_applied:
                        done = True
                        self._forget_unknown(job.key, settled)
                        await self._rejected(admission, exc)
                        return
                    failures += 1
                    self._retrying(admission, exc, failures)
                    if exc.maybe_applied:
                        settled = self._outcome_unknown(admission, settled)
                    elif settled is None:
                        may_be_applied = False
                        await self._backoff(failures)
                    continue
                if settled is not None and settled.is_set():
                    done = True  # an observation of this very write got there first
                    return
                done = True
                self._forget_unknown(job.key, settled)
                self.tracker.admission_succeeded(job.key, adapter, obj)
                self._report_admitted(admission)
                return
        finally:
            # Cancelled (leadership lost, shutdown) or an unexpected error, and not settled by an
            # observation: a write that may have been applied stays unknown (the next term
            # resumes it), one that cannot have been is undone.
            if not done and not (settled is not None and settled.is_set()):
                await self._quiet()
                if may_be_applied:
                    self._outcome_unknown(admission, settled)
                else:
                    self.tracker.admission_failed(job.key)
            self.wake()

    def _outcome_unknown(self, admission: Admission, settled: anyio.Event | None) -> anyio.Event:
        """Register (again) that this admission's outcome is unknown; returns the Event that an
        observation settling it will set."""
        key = admission.job.key
        event = settled if settled is not None else anyio.Event()
        self._unknown[key] = admission

        def on_settled(admitted: bool) -> None:
            self._unknown.pop(key, None)
            event.set()
            self._report_settled(admission, admitted)

        self.tracker.admission_unknown(key, admission.job.guard, on_settled)
        if key not in self.tracker.unknown:  # no longer in flight: the tracker has let it go
            self._unknown.pop(key, None)
            event.set()
        return event

    def _forget_unknown(self, key: JobKey, settled: anyio.Event | None) -> None:
        """This task learned the outcome from the server itself: no observation needs to."""
        if settled is not None:
            self.tracker.unknown.pop(key, None)
            self._unknown.pop(key, None)

    async def _await_outcome(
        self, admission: Admission, settled: anyio.Event, limiter: anyio.CapacityLimiter
    ) -> bool:
        """Wait for an observation to settle the outcome, or read the job after
        ``settle_timeout``: True once settled, False if the job is still exactly the object the
        write was conditioned on (so the write was not applied)."""
        job = admission.job
        kind, namespace, name = job.key
        adapter = self.tracker.adapters[kind]
        # Jittered: writes cut off by one broken connection must not all read back at once.
        with anyio.move_on_after(self.settle_timeout * random.uniform(1.0, 1.5)):
            await settled.wait()
        failures = 0
        while not settled.is_set():
            try:
                async with limiter:
                    obj = await writer.read(self.client, adapter.info, namespace, name)
            except KubeError as exc:
                failures += 1
                if isinstance(exc, TransportError):
                    metrics.TRANSPORT_ERRORS.labels("admission_read").inc()
                log.warning(
                    "job.admission_read_failed",
                    job=f"{namespace}/{name}",
                    kind=kind,
                    error=str(exc),
                    attempt=failures,
                )
                await self._backoff(failures)
                continue
            if settled.is_set():
                break
            # Judged like any observation: a newer object (or none) settles the outcome.
            if obj is None:
                self.tracker.forget(job.key)
            else:
                self.tracker.observe(adapter, obj)
            if not settled.is_set():
                return False
        return True

    def _retrying(self, admission: Admission, exc: KubeError, attempt: int) -> None:
        job = admission.job
        kind, namespace, name = job.key
        info = self.tracker.adapters[kind].info
        if isinstance(exc, ApiError):
            reason = exc.reason or str(exc.status)
        else:
            reason = "Transport"
            metrics.TRANSPORT_ERRORS.labels("admission").inc()
        metrics.ADMISSION_ERRORS.labels(info.name, reason).inc()
        log.warning(
            "job.admission_outcome_unknown" if exc.maybe_applied else "job.admission_retry",
            job=f"{namespace}/{name}",
            kind=kind,
            error=str(exc),
            attempt=attempt,
            why="the write may have been applied: holding its capacity until the job is seen again"
            if exc.maybe_applied
            else "the write never reached the server: holding its capacity and sending it again",
        )

    async def _rejected(self, admission: Admission, exc: ApiError) -> None:
        """The server refused the write: undo the hold, the job waits again."""
        job = admission.job
        kind, namespace, name = job.key
        info = self.tracker.adapters[kind].info
        self.tracker.admission_failed(job.key)
        metrics.ADMISSION_ERRORS.labels(info.name, exc.reason or str(exc.status)).inc()
        if exc.conflict or exc.not_found:
            log.info(
                "job.admission_retry",
                job=f"{namespace}/{name}",
                kind=kind,
                why="the job changed or vanished since it was read; deciding again from "
                "its latest state",
            )
            return
        log.error("job.admission_failed", job=f"{namespace}/{name}", error=str(exc))
        self._publish(
            Notice(job.key, job.uid, "Warning", "AdmissionFailed", f"could not admit: {exc}")
        )
        await anyio.sleep(self.rejected_pause)  # do not hammer a rejecting webhook or sick server

    def _report_admitted(self, admission: Admission) -> None:
        job = admission.job
        kind, namespace, name = job.key
        info = self.tracker.adapters[kind].info
        waited = max(0.0, time.time() - job.created_epoch) if job.created else None
        metrics.ADMISSIONS.labels(info.name).inc()
        if waited is not None:
            metrics.ADMISSION_WAIT.labels(info.name).observe(waited)
            metrics.QUEUE_ADMISSION_WAIT.labels(job.queue or IMPLICIT_QUEUE_NAME).observe(waited)
        placement = _placement_text(admission)
        domain = _domain_text(admission)
        log.info(
            "job.admitted",
            job=f"{namespace}/{name}",
            kind=kind,
            queue=job.queue or None,
            placement=placement,
            domain=domain or None,
            waited_s=round(waited, 3) if waited is not None else None,
            priority=job.priority,
        )
        self._publish(
            Notice(
                job.key,
                job.uid,
                "Normal",
                "Admitted",
                f"capacity reserved {domain + ' ' if domain else ''}on {placement}",
            )
        )

    def _report_settled(self, admission: Admission, admitted: bool) -> None:
        """Told by the tracker (from an observation) how an unknown outcome ended."""
        if admitted:
            self._report_admitted(admission)
        else:
            kind, namespace, name = admission.job.key
            log.info(
                "job.admission_not_applied",
                job=f"{namespace}/{name}",
                kind=kind,
                why="seen again after the lost answer, not admitted; it waits again",
            )
        self.wake()

    async def _backoff(self, failures: int) -> None:
        await backoff(failures, self.retry_delay, self.max_retry_delay)

    async def _follow_up(self, key: JobKey, limiter: anyio.CapacityLimiter) -> None:
        """One post-admission write (e.g. resume Argo's kube-queue-suspend step), guarded by the
        resourceVersion it was judged on; a conflict just waits for the next observation. Until
        the server has answered, the patch is kept and tried again (after a backoff): repeating
        it is safe, since once one copy applies the precondition fails the rest."""
        entry = None
        answered = False
        try:
            entry = self.tracker.follow_ups.pop(key, None)
            if entry is None:
                answered = True
                return
            rv, patch = entry
            kind, namespace, name = key
            info = self.tracker.adapters[kind].info
            body = {**patch, "metadata": {"resourceVersion": rv}}
            try:
                async with limiter:
                    await self.client.merge_patch(info.object_path(namespace, name), body)
            except ApiError as exc:
                if exc.conflict or exc.not_found or not _transient(exc):
                    answered = True
                    if not (exc.conflict or exc.not_found):
                        log.warning("job.follow_up_failed", job="/".join(key), error=str(exc))
                    return
                await self._follow_up_failed(key, exc)
                return
            except TransportError as exc:
                metrics.TRANSPORT_ERRORS.labels("follow_up").inc()
                await self._follow_up_failed(key, exc)
                return
            answered = True
            log.info("job.followed_up", job=f"{namespace}/{name}", kind=kind, patch=patch)
        finally:
            await self._quiet()
            if answered:
                self._follow_up_failures.pop(key, None)
            elif entry is not None:
                # Not answered (failed, or cancelled mid-write): keep it for another attempt,
                # unless a newer observation has replaced it meanwhile.
                self.tracker.follow_ups.setdefault(key, entry)
            self._following.discard(key)
            if not answered:
                self.wake()

    async def _follow_up_failed(self, key: JobKey, exc: KubeError) -> None:
        failures = self._follow_up_failures.get(key, 0) + 1
        self._follow_up_failures[key] = failures
        log.warning("job.follow_up_retry", job="/".join(key), error=str(exc), attempt=failures)
        await self._backoff(failures)

    async def _stop(
        self,
        key: JobKey,
        annotations: dict[str, str | None],
        still_wanted: Callable[[], bool],
        limiter: anyio.CapacityLimiter,
        what: str,
        reason: str,
    ) -> dict[str, Any] | None:
        """Suspend an admitted job with its kind's stop patch plus ``annotations`` and the
        ``kube-queue.io/stopped`` stamp (``reason`` and the time: the object itself says the
        suspension was ours), guarded by its latest observed resourceVersion. A conflict
        means it changed (a status update, most likely): retry with the newer version the
        informer brings, as long as it is still admitted and ``still_wanted()``. The stopped
        object, or None when there is nothing (more) to do: it stopped or vanished meanwhile
        (maybe by our own earlier write), the caller no longer wants it, or eight attempts
        failed (logged as ``job.<what>_gave_up``)."""
        kind, namespace, name = key
        info = self.tracker.adapters[kind].info
        job = f"{namespace}/{name}"
        now = datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")
        stamped = {**annotations, STOPPED: f"{reason} {now.replace('+00:00', 'Z')}"}
        for attempt in range(8):
            current = self.tracker.admitted.get(key)
            if current is None or not still_wanted():
                return None
            assert current.preemption_patch is not None
            try:
                async with limiter:
                    return await writer.stop(
                        self.client,
                        info,
                        namespace,
                        name,
                        current.resource_version,
                        current.preemption_patch,
                        stamped,
                    )
            except ApiError as exc:
                if exc.not_found:
                    return None  # gone: its capacity is freed either way
                if not exc.conflict:
                    log.warning(f"job.{what}_failed", job=job, error=str(exc))
                    metrics.ADMISSION_ERRORS.labels(info.name, f"{what}:{exc.reason}").inc()
            except KubeError as exc:  # outcome unknown: the next observation (or retry) tells
                metrics.TRANSPORT_ERRORS.labels(what).inc()
                log.warning(f"job.{what}_retry", job=job, error=str(exc))
            await anyio.sleep(min(8.0, 0.25 * 2**attempt) * random.uniform(0.5, 1.0))
        log.error(f"job.{what}_gave_up", job=job)
        return None

    async def _preempt(
        self, preemption: Preemption, victim: AdmittedJob, limiter: anyio.CapacityLimiter
    ) -> None:
        """Suspend one victim while it is still this preemptor's victim."""
        preemptor = preemption.job.key
        by = "/".join(preemptor)
        kind, namespace, name = victim.key
        stopped = await self._stop(
            victim.key,
            {PREEMPTED_BY: by},
            lambda: self.tracker.victims.get(victim.key) == preemptor,
            limiter,
            "preemption",
            "Preempted",
        )
        if stopped is None:
            return
        metrics.PREEMPTIONS.labels(
            self.tracker.adapters[kind].info.name, _preemption_kind(preemption)
        ).inc()
        log.info("job.preempted", job=f"{namespace}/{name}", kind=kind, by=by)
        self._publish(
            Notice(
                victim.key,
                victim.uid,
                "Normal",
                "Preempted",
                f"stopped to make room for {preemptor[0]} {preemptor[1]}/{preemptor[2]} "
                f"({preemption.reason}); it waits in its queue again, in its place by "
                "creation time",
            )
        )

    async def _requeue(self, requeue: Requeue, limiter: anyio.CapacityLimiter) -> None:
        """Suspend an admitted job whose pods did not all start in time, saying why (from the
        pods' own state), and record the attempt on it (the backoff counts from it)."""
        if requeue.unplaceable:
            await self._requeue_unplaceable(requeue, limiter)
            return
        job = requeue.job
        kind, namespace, name = job.key
        adapter = self.tracker.adapters[kind]
        info = adapter.info
        try:
            why, detail = await self._why_not_started(job, requeue.expected)
            now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            annotations: dict[str, str | None] = {
                REQUEUES: str(requeue.attempt),
                REQUEUED_AT: now,
            }
            obj = await self._stop(
                job.key, annotations, lambda: True, limiter, "requeue", "Requeued"
            )
            if obj is None:
                return  # finished, deleted or suspended meanwhile, or the write gave up
            if requeue.gave_up:  # the spec as it stands now is what a user must change
                try:
                    async with limiter:
                        await writer.mark(
                            self.client,
                            info,
                            namespace,
                            name,
                            str(obj["metadata"]["resourceVersion"]),
                            {GAVE_UP: spec_hash(obj)},
                        )
                except KubeError as exc:
                    # It is suspended with its attempt count: at the next admission's timeout
                    # the limit is reached again and the mark is tried again.
                    log.warning(
                        "job.give_up_mark_failed", job=f"{namespace}/{name}", error=str(exc)
                    )
        finally:
            await self._quiet()
            if self.tracker.victims.get(job.key) == job.key:
                del self.tracker.victims[job.key]
        metrics.REQUEUES.labels(info.name, why).inc()
        delay = self.cycle.requeue.delay(requeue.attempt)
        limit = self.cycle.requeue.limit
        log.warning(
            "job.requeued",
            job=f"{namespace}/{name}",
            kind=kind,
            attempt=requeue.attempt,
            reason=why,
            detail=detail,
            gave_up=requeue.gave_up,
        )
        timeout = self.tracker.ready_timeout(job.queue)  # its Queue's own, if it has one
        self._publish(
            Notice(
                job.key,
                job.uid,
                "Warning",
                "Requeued",
                f"its pods did not all start within {timeout:.0f}s of admission ({detail}); "
                f"suspended and queued again behind the jobs of its priority (attempt "
                f"{requeue.attempt} of {limit})"
                + ("" if requeue.gave_up else f", admitted again no sooner than {delay:.0f}s"),
            )
        )
        # GaveUp itself is reported from the job as observed (its gave-up annotation), like
        # every other problem with a job, so it is said once and survives restarts.

    async def _requeue_unplaceable(self, requeue: Requeue, limiter: anyio.CapacityLimiter) -> None:
        """Suspend a starting job whose pods are owed room, once its pods confirm it (one of
        them is Unschedulable); otherwise let it be, to be looked at again after the grace."""
        job = requeue.job
        kind, namespace, name = job.key
        info = self.tracker.adapters[kind].info
        try:
            try:
                async with limiter:
                    pods = await self._pods_of(job)
            except KubeError as exc:
                log.warning("job.unplaceable_unread", job=f"{namespace}/{name}", error=str(exc))
                self.tracker.unplaceable_cleared(job.key, time.time())
                return
            stuck = unschedulable(pods)
            if not stuck:
                # Not created yet, or not tried by the scheduler yet: our count alone is not
                # enough to stop a job.
                log.info(
                    "job.unplaceable_unconfirmed",
                    job=f"{namespace}/{name}",
                    kind=kind,
                    why="its held pods are owed room, but none of its pods is Unschedulable",
                )
                self.tracker.unplaceable_cleared(job.key, time.time())
                return
            _, detail = not_running(pods, requeue.expected)
            reservations = self.tracker.reservations
            stopped = await self._stop(
                job.key,
                {},
                lambda: job.key in reservations.stranded_jobs(),  # room may have come back
                limiter,
                "requeue",
                "Unplaceable",
            )
            if stopped is None:
                return  # found room, finished, deleted or suspended meanwhile, or gave up
        finally:
            await self._quiet()
            if self.tracker.victims.get(job.key) == job.key:
                del self.tracker.victims[job.key]
        metrics.REQUEUES.labels(info.name, "Unplaceable").inc()
        log.warning(
            "job.requeued",
            job=f"{namespace}/{name}",
            kind=kind,
            reason="Unplaceable",
            detail=detail,
            unschedulable=stuck,
        )
        self._publish(
            Notice(
                job.key,
                job.uid,
                "Warning",
                "Requeued",
                f"{stuck} of its pods have no node with room: the scheduler bound other pods "
                f"where they were planned, and no node can take them now ({detail}); suspended "
                "and queued again at once, in its place by creation time, to start when all of "
                "it fits (no attempt counted, no backoff)",
            )
        )

    async def _why_not_started(self, job: AdmittedJob, expected: int) -> tuple[str, str]:
        """The job's pods as the API server has them now, and why they are not running."""
        try:
            mine = await self._pods_of(job)
        except KubeError as exc:
            return "Unknown", f"its pods could not be read: {exc}"
        return not_running(mine, expected)

    async def _pods_of(self, job: AdmittedJob) -> list[PodDiagnosis]:
        """The job's pods (under its name and its aliases) as the API server has them now."""
        _, namespace, _ = job.key
        pods = await list_pods(self.client, namespace)
        adapters = list(self.tracker.adapters.values())
        mine = []
        for diag in pods:
            pod = Pod(metadata=diag.metadata, spec=diag.spec)
            for adapter in adapters:
                found = adapter.pod_owner(pod)
                if found is not None:
                    owner = self.tracker.owner_of((adapter.info.kind, namespace, found[0]))
                    if owner == job.key:
                        mine.append(diag)
                    break
        return mine

    def _publish(self, notice: Notice) -> None:
        kind, namespace, name = notice.key
        adapter = self.tracker.adapters.get(kind)
        if adapter is None:
            return
        log_fn = log.warning if notice.type == "Warning" else log.info
        log_fn(
            "job.notice",
            job=f"{namespace}/{name}",
            kind=kind,
            reason=notice.reason,
            message=notice.message,
        )
        self.events.emit(
            InvolvedObject(adapter.info.api_version, kind, namespace, name, notice.uid),
            notice.type,
            notice.reason,
            notice.message,
        )

    def _update_gauges(self) -> None:
        now = time.monotonic()
        if now - self._gauges_at < 1.0:
            return
        self._gauges_at = now
        counts: Counter[tuple[str, str]] = Counter()
        for job in self.tracker.queue.ordered():
            state = "inadmissible" if job.problem or job.never_fits else "active"
            counts[(job.kind, state)] += 1
        for adapter in self.tracker.adapters.values():
            for state in ("active", "inadmissible"):
                metrics.PENDING.labels(adapter.info.name, state).set(
                    counts[(adapter.info.kind, state)]
                )
        metrics.RESERVED_JOBS.set(len(self.tracker.reservations))
        hold = self.cycle.hold
        metrics.HELD_NODES.set(len(hold.nodes) if hold is not None else 0)
        self._update_queue_gauges()

    def _update_queue_gauges(self) -> None:
        """Per queue: pending, admitted, used and borrowed per resource. Series of queues and
        resources that went away are removed, so dashboards do not show stale values."""
        seen: set[tuple[str, ...]] = set()
        for row in queue_rows(self.tracker, self.cycle.strict_fifo):
            name = row["name"]
            metrics.QUEUE_PENDING.labels(name).set(row["pending"])
            seen.add(("pending", name))
            if row["admitted"] is not None:
                metrics.QUEUE_ADMITTED.labels(name).set(row["admitted"])
                seen.add(("admitted", name))
            for gauge, field in (
                (metrics.QUEUE_USED, "used"),
                (metrics.QUEUE_BORROWED, "borrowed"),
            ):
                for res, amount in row[field + "_milli"].items():
                    gauge.labels(name, res).set(amount / 1000)
                    seen.add((field, name, res))
        for stale in self._queue_series - seen:
            gauge = {
                "pending": metrics.QUEUE_PENDING,
                "admitted": metrics.QUEUE_ADMITTED,
                "used": metrics.QUEUE_USED,
                "borrowed": metrics.QUEUE_BORROWED,
            }[stale[0]]
            gauge.remove(*stale[1:])
        self._queue_series = seen


def _preemption_kind(preemption: Preemption) -> str:
    return "reclaim" if preemption.reason.startswith("reclaiming") else "priority"


def _transient(exc: ApiError) -> bool:
    """Server-side trouble worth another try (overload, unavailable, timed out)."""
    return exc.status in (429, 500, 502, 503, 504) or exc.maybe_applied


def _domain_text(admission: Admission) -> str:
    """``in <level>=<domain>`` for a job placed in one topology domain, ``with <pod set> in
    <level>=<domain>, ...`` for pod sets placed each in its own, else "": the domains the
    placement chose, carried by the admission."""
    domains = admission.domains
    if not domains:
        return ""
    if len(domains) == 1:
        return f"in {domains[0].level}={domains[0].domain}"
    return "with " + ", ".join(f"{d.pod_set} in {d.level}={d.domain}" for d in domains)


def _placement_text(admission: Admission) -> str:
    per_node: Counter[str] = Counter()
    for a in admission.assignments:
        per_node[a.node] += a.count
    shown = [f"{node} ({n} pod{'s' if n != 1 else ''})" for node, n in per_node.items()]
    if len(shown) > 5:
        shown = [*shown[:5], f"and {len(shown) - 5} more nodes"]
    return ", ".join(shown)
