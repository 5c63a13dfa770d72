"""The one queue every job kind feeds: ordered by priority, then age, then name.

Order key: (-priority, creationTimestamp, namespace, name, kind). Creation time (not the moment
kube-queue saw the job) keeps the order stable across controller restarts; the name tie-break
makes it total, so two replicas would walk the queue identically.

Upsert and remove are O(log n) (a sorted list plus a dict from job to its key); walking the queue
in order is a snapshot so the admission cycle may remove jobs while it walks.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from sortedcontainers import SortedList

from kubequeue.demand import PodSet
from kubequeue.identity import JobKey

__all__ = ["JobQueue", "QueuedJob", "order_key"]

OrderKey = tuple[int, str, str, str, str]


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
    # The kind's admission patch, computed from the very object this entry was made from (the
    # write carries that object's resourceVersion, so patch and precondition always match).
    admission_patch: dict[str, Any] = field(default_factory=dict)
    # Why the job cannot be considered at all (bad input); None when it can be.
    problem: str | None = None
    problem_reason: str = ""
    # The (freed_generation, nodes_generation) at which it last failed to fit: until capacity is
    # freed or nodes change, evaluating it again cannot give a different answer.
    failed_at: tuple[int, int] | None = None
    wait_reason: str = ""
    never_fits: str = ""  # non-empty when even the empty cluster cannot hold it
    never_fits_generation: int = -1
    explained_at: float | None = None  # clock time of the last "Queued" explanation
    reported: dict[str, str] = field(default_factory=dict)  # event reason -> last message sent
    # The admission cycle's number for this job's demand shape (pod requests and constraints;
    # see admission/cycle.py), with the pod_sets it was computed for.
    shape: tuple[Sequence[PodSet], int] | None = None

    @property
    def kind(self) -> str:
        return self.key[0]


def order_key(job: QueuedJob) -> OrderKey:
    kind, namespace, name = job.key
    return (-job.priority, job.created, namespace, name, kind)


class JobQueue:
    def __init__(self) -> None:
        # Entries are (*order key, job): the key alone decides the order (it is unique: it ends
        # with the job's identity), and carrying the job lets ordered() read it off directly.
        self._order: SortedList = SortedList()
        self._jobs: dict[JobKey, tuple[Any, ...]] = {}

    def __len__(self) -> int:
        return len(self._jobs)

    def __contains__(self, key: object) -> bool:
        return key in self._jobs

    def get(self, key: JobKey) -> QueuedJob | None:
        found = self._jobs.get(key)
        return found[-1] if found else None

    def upsert(self, job: QueuedJob) -> None:
        entry = (*order_key(job), job)
        old = self._jobs.get(job.key)
        if old is not None:
            if old[-1] is job and old == entry:
                return
            self._order.remove(old)
        self._order.add(entry)
        self._jobs[job.key] = entry

    def remove(self, key: JobKey) -> QueuedJob | None:
        old = self._jobs.pop(key, None)
        if old is None:
            return None
        self._order.remove(old)
        job: QueuedJob = old[-1]
        return job

    def ordered(self) -> list[QueuedJob]:
        """Every queued job in admission order (a snapshot)."""
        return [entry[-1] for entry in self._order]

    def __iter__(self) -> Iterator[QueuedJob]:
        return iter(self.ordered())

    def position(self, key: JobKey) -> int | None:
        """0-based place in line, for users asking "how far back am I"."""
        found = self._jobs.get(key)
        return None if found is None else int(self._order.index(found))

    def depth_by_kind(self) -> Counter[str]:
        return Counter(k[0] for k in self._jobs)
