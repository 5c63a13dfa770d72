"""Every queued job, in one ordered line per queue: priority, then age, then name.

Order key: (-priority, creationTimestamp, namespace, name, kind). Creation time (not the moment
kube-queue saw the job) keeps the order stable across controller restarts; the name tie-break
makes it total, so two replicas would walk the queue identically.

A job waits in the line of its queue (``QueuedJob.queue``; "" is the implicit default queue, the
only line when no Queue objects exist). Upsert and remove are O(log n) (a sorted list per line
plus a dict from job to its entry); walking a line in order is a snapshot so the admission cycle
may remove jobs while it walks. Which line goes next is the cycle's business (fair sharing).

A job may be *parked* (admission/parking.py): it stays in its line (order, position, status
tables see it) but not among the line's *active* entries, which are what the admission walk
visits. Any change to a parked job (upsert, remove) wakes it first, so a job is never left out
of the walk with a verdict made for an older version of it.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from sortedcontainers import SortedList

from kubequeue.demand import PodSet, total_demand
from kubequeue.identity import JobKey
from kubequeue.precondition import NO_GUARD, Guard
from kubequeue.resources import Resources

__all__ = ["JobQueue", "Parked", "QueuedJob", "order_key"]

OrderKey = tuple[int, str, str, str, str]
_NO_ANNOTATIONS: Mapping[str, str] = MappingProxyType({})


class Parked:
    """Why a job sits out of the admission walk; the admission cycle's parking subclasses it.

    A parked job is still visited by every cycle *in effect* (its outcome is known and counted
    in bulk), so a field such a visit would set may move while the job is parked: ``failed_at``
    asks the record for its current value instead of reading the job's own.
    """

    __slots__ = ()

    def failed_at(self, own: tuple[int, int] | None) -> tuple[int, int] | None:
        return own


@dataclass(slots=True)
class QueuedJob:
    """A job waiting for admission, with what the last evaluation found."""

    key: JobKey
    uid: str
    resource_version: str
    priority: int
    created: str  # RFC 3339, which sorts correctly as text
    created_epoch: float = 0.0  # the same instant as seconds, for "how long has it waited"
    pod_sets: Sequence[PodSet] = ()
    # The admission write, made from the very object this entry was made from, so precondition
    # and change always match: what the decision read (precondition.py), the kind's change as
    # JSON-patch ops (shared between jobs whose ops are equal: never modified, only replaced)
    # and the annotations of ours it adds besides admitted-at (the queue, set on admission).
    guard: Guard = NO_GUARD
    admission_ops: Sequence[Mapping[str, Any]] = ()
    admission_annotations: Mapping[str, str] = field(default_factory=lambda: _NO_ANNOTATIONS)
    # Why the job cannot be considered at all (bad input); None when it can be.
    problem: str | None = None
    problem_reason: str = ""
    # The (freed_generation, nodes_generation) at which it last failed to fit: until capacity is
    # freed or nodes change, evaluating it again cannot give a different answer. Read and set
    # through ``failed_at`` (a parked job's record may know a newer value).
    _failed_at: tuple[int, int] | None = None
    wait_reason: str = ""
    never_fits: str = ""  # non-empty when even the empty cluster cannot hold it
    never_fits_generation: int = -1
    explained_at: float | None = None  # clock time of the last "Queued" explanation
    # Event reason -> last message sent; None until the first (most jobs are admitted without
    # ever being told to wait, and 10,000 empty dicts are 0.6 MiB).
    reported: dict[str, str] | None = None
    # The admission cycle's number for this job's demand shape (pod requests and constraints;
    # see admission/fit_memo.py), with the pod_sets it was computed for.
    shape: tuple[Sequence[PodSet], int] | None = None
    # The queue it waits in ("": the implicit default queue), the queue its label names (None:
    # no label), and the last quota refusal.
    queue: str = ""
    queue_label: str | None = None
    quota_reason: str = ""
    # The ledger version (QuotaLedger.version) the quota verdict below was made at, and it:
    # (allowed, borrows). Until the version moves, the same check gives the same answer.
    quota_checked: tuple[tuple[int, str, int], bool, bool] | None = None
    over_quota: str = ""  # non-empty when its queue's limits refuse it even with nothing running
    # Times kube-queue suspended it again because its pods never all started, and when it did
    # last (epoch seconds): it may be admitted again only after a backoff (admission/requeue.py).
    requeues: int = 0
    requeued_epoch: float = 0.0
    # Clock time since which it fits but waits for pods admitted before it to be bound
    # (capacity/binding.py); None when it does not.
    binding_since: float | None = None

    # Set while the job is parked (see JobQueue.park); None while the walk visits it.
    park: Parked | None = None

    # Total demand, computed when first needed (only jobs in Queue objects need it).
    _demand: Resources | None = None

    @property
    def failed_at(self) -> tuple[int, int] | None:
        park = self.park
        return self._failed_at if park is None else park.failed_at(self._failed_at)

    @failed_at.setter
    def failed_at(self, value: tuple[int, int] | None) -> None:
        self._failed_at = value

    @property
    def kind(self) -> str:
        return self.key[0]

    @property
    def demand(self) -> Resources:
        """Every pod of every pod set, summed: what the job counts against its queue's quota."""
        found = self._demand
        if found is None:
            found = self._demand = total_demand(self.pod_sets)
        return found


def order_key(job: QueuedJob) -> OrderKey:
    kind, namespace, name = job.key
    return (-job.priority, job.created, namespace, name, kind)


class JobQueue:
    def __init__(self) -> None:
        # Per line, entries (*order key, job): the key alone decides the order (it is unique: it
        # ends with the job's identity), and carrying the job lets ordered() read it off.
        self._lines: dict[str, SortedList] = {}
        # Per line, the entries of the jobs that are not parked: what the admission walk visits.
        self._active: dict[str, SortedList] = {}
        # Per line, jobs parked since ``active`` last ran whose entries are still in ``_active``:
        # taking them out one by one costs a sorted-list removal each (a cycle that parks a
        # whole queue of 100,000), so ``active`` filters them out in one pass instead.
        self._leaving: dict[str, set[JobKey]] = {}
        # job -> (its entry, the line it is in)
        self._jobs: dict[JobKey, tuple[tuple[Any, ...], str]] = {}
        # Told when a parked job wakes because it changed or left (before the change), so
        # whoever parked it can forget it.
        self.on_wake: Callable[[QueuedJob], None] | None = None
        # Told when a job already queued is handed in again or removed, parked or not (a park
        # decided but not made yet must not be made for what changed).
        self.on_change: Callable[[JobKey], None] | None = None
        # Per line, its entries (parked or not) by demand class: the job's demand in
        # ``_class_resources`` (the resources Queue trees pool). Whether a job would borrow
        # depends on its demand only in those, so the multi-queue walk finds where in a line
        # that answer changes without reading every job (admission/walk.py). Kept only while
        # some tree pools a resource.
        self._class_resources: tuple[str, ...] = ()
        self._classes: dict[str, dict[tuple[int, ...], SortedList]] = {}
        # Per line, a stamp that moves whenever an entry joins or leaves it (from one counter,
        # so a line that empties and comes back never repeats an earlier stamp): ``edited``.
        self._edits = 0
        self._edited: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._jobs)

    def __contains__(self, key: object) -> bool:
        return key in self._jobs

    def get(self, key: JobKey) -> QueuedJob | None:
        found = self._jobs.get(key)
        return found[0][-1] if found else None

    def upsert(self, job: QueuedJob) -> None:
        entry = (*order_key(job), job)
        line = job.queue
        old = self._jobs.get(job.key)
        if old is not None:
            if self.on_change is not None:
                self.on_change(job.key)
            if old[0][-1].park is not None:
                self._wake(old[0][-1])  # whatever changed, it is judged again
            if old[0][-1] is job and old[0] == entry and old[1] == line:
                return
            self._discard(old)
        if job.park is not None:  # a parked object handed in again (not via this queue's get)
            self._wake(job)
        ordered = self._lines.get(line)
        if ordered is None:
            ordered = self._lines[line] = SortedList()
            self._active[line] = SortedList()
        ordered.add(entry)
        self._edits += 1
        self._edited[line] = self._edits
        self._active[line].add(entry)
        self._jobs[job.key] = (entry, line)
        if self._class_resources:
            self._classed(entry, line).add(entry)

    def remove(self, key: JobKey) -> QueuedJob | None:
        old = self._jobs.get(key)
        if old is None:
            return None
        if self.on_change is not None:
            self.on_change(key)
        job: QueuedJob = old[0][-1]
        if job.park is not None:
            self._wake(job)
        del self._jobs[key]
        self._discard(old)
        return job

    def _discard(self, old: tuple[tuple[Any, ...], str]) -> None:
        entry, line = old
        ordered = self._lines[line]
        ordered.remove(entry)
        self._edits += 1
        self._edited[line] = self._edits
        self._active[line].discard(entry)
        if self._class_resources:
            self._classed(entry, line).discard(entry)
        leaving = self._leaving.get(line)
        if leaving is not None:
            leaving.discard(entry[-1].key)
        if not ordered:
            del self._lines[line]
            del self._active[line]
            del self._edited[line]
            self._leaving.pop(line, None)
            self._classes.pop(line, None)

    # ----------------------------------------------------------------- demand classes
    def classify_by(self, resources: Sequence[str]) -> None:
        """Keep every line's entries by their demand in ``resources`` (none: keep nothing)."""
        wanted = tuple(resources)
        if wanted == self._class_resources:
            return
        self._class_resources = wanted
        self._classes = {}
        if wanted:
            for entry, line in self._jobs.values():
                self._classed(entry, line).add(entry)

    def _classed(self, entry: tuple[Any, ...], line: str) -> SortedList:
        demand = entry[-1].demand
        signature = tuple(demand.get(res, 0) for res in self._class_resources)
        by_class = self._classes.setdefault(line, {})
        found = by_class.get(signature)
        if found is None:
            found = by_class[signature] = SortedList()
        return found

    @property
    def class_resources(self) -> tuple[str, ...]:
        return self._class_resources

    def classes(self, line: str) -> Mapping[tuple[int, ...], SortedList]:
        """A line's entries, parked or not, by demand class (``classify_by``)."""
        return self._classes.get(line, {})

    def edited(self, line: str) -> int:
        """A stamp of the line's entries (parked or not): the same stamp, the same entries
        (0: the line has none)."""
        return self._edited.get(line, 0)

    def after(self, line: str, position: Any) -> tuple[Any, ...] | None:
        """The first entry of a line, parked or not, after ``position`` (None: from the start;
        an entry, or a key that sorts just before one)."""
        found = self._lines.get(line)
        if not found:
            return None
        index = 0 if position is None else found.bisect_right(position)
        return found[index] if index < len(found) else None

    def before(self, line: str, entry: tuple[Any, ...]) -> tuple[Any, ...] | None:
        """The entry of a line, parked or not, just before ``entry`` (None: it is the first)."""
        found = self._lines.get(line)
        if not found:
            return None
        index = found.bisect_left(entry)
        return found[index - 1] if index > 0 else None

    # ----------------------------------------------------------------- parking
    def park(self, job: QueuedJob, record: Parked) -> None:
        """Leave the job out of the admission walk (``active``) until ``unpark``."""
        line = self._jobs[job.key][1]
        if job.park is None:
            self._leaving.setdefault(line, set()).add(job.key)
        job.park = record

    def unpark(self, job: QueuedJob) -> tuple[Any, ...] | None:
        """Back into the walk; its record's view of ``failed_at`` becomes the job's own.
        Returns its entry (None if it was not parked here)."""
        found = self._jobs.get(job.key)
        record = job.park
        if record is None or found is None or found[0][-1] is not job:
            return None
        job._failed_at = record.failed_at(job._failed_at)
        job.park = None
        self._back(job.key, found)
        return found[0]

    def _back(self, key: JobKey, found: tuple[tuple[Any, ...], str]) -> None:
        """An unparked job's entry into its line's active entries (unless still there)."""
        entry, line = found
        leaving = self._leaving.get(line)
        if leaving is not None and key in leaving:
            leaving.discard(key)
        else:
            self._active[line].add(entry)

    def _wake(self, job: QueuedJob) -> None:
        if self.on_wake is not None:
            self.on_wake(job)
        record = job.park
        if record is not None:
            job._failed_at = record.failed_at(job._failed_at)
            job.park = None
            found = self._jobs.get(job.key)
            if found is not None and found[0][-1] is job:
                self._back(job.key, found)

    def wake_all(self) -> None:
        """Every parked job back into the walk, without telling ``on_wake`` (whoever parked
        them is being replaced)."""
        self.on_wake = None
        for entry, _ in self._jobs.values():
            if entry[-1].park is not None:
                self._wake(entry[-1])

    def active(self, line: str) -> list[tuple[Any, ...]]:
        """A snapshot of the entries of one line's jobs that are not parked, in order."""
        found = self._active.get(line)
        if found is None:
            return []
        if self._leaving.pop(line, None):
            kept = [entry for entry in found if entry[-1].park is None]
            self._active[line] = SortedList(kept)
            return kept
        return list(found)

    def last(self, line: str) -> tuple[Any, ...] | None:
        """The last entry of a line, parked or not."""
        found = self._lines.get(line)
        return found[-1] if found else None

    def entry(self, job: QueuedJob) -> tuple[Any, ...] | None:
        found = self._jobs.get(job.key)
        return found[0] if found is not None and found[0][-1] is job else None

    def keys(self) -> list[JobKey]:
        return list(self._jobs)

    def entries(self, line: str) -> list[tuple[Any, ...]]:
        """A snapshot of one line's entries, ``(*order key, job)``, in order."""
        found = self._lines.get(line)
        return list(found) if found is not None else []

    def lines(self) -> list[str]:
        """The queues that have jobs waiting, by name."""
        return sorted(self._lines)

    def ordered(self, line: str | None = None) -> list[QueuedJob]:
        """The jobs of one line in admission order, or of all lines merged in priority order
        (a snapshot either way)."""
        if line is not None:
            found = self._lines.get(line)
            return [entry[-1] for entry in found] if found is not None else []
        if len(self._lines) == 1:
            return [entry[-1] for entry in next(iter(self._lines.values()))]
        merged = heapq.merge(*self._lines.values(), key=lambda entry: entry[:-1])
        return [entry[-1] for entry in merged]

    def __iter__(self) -> Iterator[QueuedJob]:
        return iter(self.ordered())

    def position(self, key: JobKey) -> int | None:
        """0-based place in its queue's line, for users asking "how far back am I"."""
        found = self._jobs.get(key)
        return None if found is None else int(self._lines[found[1]].index(found[0]))

    def depth_by_kind(self) -> Counter[str]:
        return Counter(k[0] for k in self._jobs)

    def depth_by_queue(self) -> dict[str, int]:
        return {line: len(entries) for line, entries in self._lines.items()}
