"""One admission cycle, in numbered steps (the shape of Kueue's scheduler.schedule):

0. relocate: move reservations off nodes that cannot take them (capacity/reservations.py);
1. heads:    walk queued jobs in order (priority, age, name), skipping those in flight;
2. skip:     jobs with bad input, and jobs that already failed at this capacity generation
             (nothing was freed since, so the answer cannot change);
3. fit:      simulate gang placement on current free capacity (capacity/fit.py);
4. assume:   reserve the placement in the cache *before* any API write, so the next job in this
             very cycle already sees the capacity as taken (undone if the write fails);
5. explain:  for a bounded number of jobs that do not fit, compute a human reason (and whether
             they can ever fit here) and emit it once; explanations are the slow path.

The cycle is synchronous and never awaits: informer updates cannot interleave with a decision.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

from kubequeue.admission.notices import Notice
from kubequeue.admission.tracker import JobTracker
from kubequeue.capacity.fit import Assignment, explain, place
from kubequeue.queueing.queue import QueuedJob

log = structlog.get_logger(__name__)

__all__ = ["Admission", "AdmissionCycle", "CycleResult"]


@dataclass(frozen=True, slots=True)
class Admission:
    job: QueuedJob
    assignments: list[Assignment]


@dataclass(slots=True)
class CycleResult:
    admitted: list[Admission] = field(default_factory=list)
    notices: list[Notice] = field(default_factory=list)
    evaluated: int = 0
    waiting: int = 0


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
    ) -> None:
        self.tracker = tracker
        self.strict_fifo = strict_fifo
        self.starvation_seconds = starvation_seconds
        self._wall_clock = wall_clock
        self.blocked_by: QueuedJob | None = None
        self.explain_budget = explain_budget
        self.report_interval = report_interval
        self._clock = clock

    def run(self) -> CycleResult:
        tracker = self.tracker
        cache = tracker.cache
        result = CycleResult()
        tracker.reservations.relocate()
        budget = self.explain_budget
        generation = (cache.freed_generation, cache.nodes_generation)
        starved_before = self._wall_clock() - self.starvation_seconds
        blocked_by: QueuedJob | None = None
        for job in tracker.queue.ordered():  # step 1
            if job.key in tracker.inflight:
                continue
            if job.problem is not None:  # step 2
                self._report(result, job, "Warning", job.problem_reason, job.problem)
                continue
            if job.never_fits and job.never_fits_generation == cache.nodes_generation:
                continue
            if job.failed_at == generation:
                result.waiting += 1
                if self._blocks(job, starved_before):
                    blocked_by = job
                    break
                continue
            result.evaluated += 1
            placed = place(job.pod_sets, cache)  # step 3
            if placed is not None:
                tracker.begin_admission(job, job.pod_sets, placed)  # step 4
                result.admitted.append(Admission(job, placed))
                continue
            job.failed_at = generation
            result.waiting += 1
            if budget > 0 and self._explain(result, job):  # step 5
                budget -= 1
            if not job.never_fits and self._blocks(job, starved_before):
                blocked_by = job
                break
        self._note_blocking(blocked_by)
        return result

    def _blocks(self, job: QueuedJob, starved_before: float) -> bool:
        """Whether a job that does not fit stops the jobs behind it from being admitted.

        Always under StrictFIFO. Under BestEffortFIFO only once it has waited longer than
        ``starvation_seconds``: until then smaller jobs may fill the gaps it cannot use, after
        that the gaps are left to grow until it fits, so a big gang job cannot starve forever
        behind a stream of small ones.
        """
        if self.strict_fifo:
            return True
        return bool(self.starvation_seconds) and job.created_epoch < starved_before

    def _note_blocking(self, job: QueuedJob | None) -> None:
        if job is self.blocked_by:
            return
        if job is not None and not self.strict_fifo:
            log.info(
                "queue.holding_for_starved_job",
                job="/".join(job.key),
                waited_s=round(self._wall_clock() - job.created_epoch),
                why="it has waited longer than the starvation timeout; jobs behind it wait "
                "until it fits",
            )
        self.blocked_by = job

    def _explain(self, result: CycleResult, job: QueuedJob) -> bool:
        """Refresh the job's reasons if they are stale; True if work was spent."""
        cache = self.tracker.cache
        now = self._clock()
        spent = False
        if job.never_fits_generation != cache.nodes_generation:
            job.never_fits = explain(job.pod_sets, cache, empty_cluster=True)
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
        job.wait_reason = explain(job.pod_sets, cache) or "capacity was just taken by another job"
        job.explained_at = now
        self._report(result, job, "Normal", "Queued", f"waiting for capacity: {job.wait_reason}")
        return True

    def _report(
        self, result: CycleResult, job: QueuedJob, type_: str, reason: str, msg: str
    ) -> None:
        if job.reported.get(reason) == msg:
            return
        job.reported[reason] = msg
        result.notices.append(Notice(job.key, job.uid, type_, reason, msg))
