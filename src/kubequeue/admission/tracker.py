"""Turns what the job informers see into queue entries and reservations, level-triggered.

Every observation of a job object is judged from the object alone:

- opted out, owned by a parent, or finished     -> forgotten (nothing queued, nothing held)
- suspended                                     -> queued (again, if a user re-suspended it)
- running with kube-queue's admitted annotation -> admitted: its missing pods stay reserved
- running without it                            -> not ours; its pods are ordinary capacity users

Because the verdict depends only on the current object, replaying a relist after a watch gap or a
restart rebuilds exactly the same state; no event has to be seen for the state to be right.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import structlog

from kubequeue.capacity.cache import CapacityCache
from kubequeue.capacity.fit import Assignment
from kubequeue.capacity.reservations import Reservations
from kubequeue.demand import DemandError, PodSet
from kubequeue.identity import JobKey
from kubequeue.kinds.common import annotations_of, dig
from kubequeue.kinds.protocol import FollowsUp, HasPodAliases, JobAdapter, Obj
from kubequeue.labels import ADMITTED_AT
from kubequeue.queueing.queue import JobQueue, QueuedJob

__all__ = ["JobTracker", "job_key"]

log = structlog.get_logger(__name__)


def job_key(adapter: JobAdapter, obj: Obj) -> JobKey:
    return (
        adapter.info.kind,
        str(dig(obj, "metadata", "namespace") or ""),
        str(dig(obj, "metadata", "name") or ""),
    )


class JobTracker:
    def __init__(
        self,
        cache: CapacityCache,
        queue: JobQueue,
        reservations: Reservations,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self.cache = cache
        self.queue = queue
        self.reservations = reservations
        self._on_change = on_change
        self.adapters: dict[str, JobAdapter] = {}
        self.priorities: dict[str, int] = {}
        self.default_priority = 0
        # Jobs with an admission patch in flight: not admitted again, reservation kept.
        self.inflight: dict[JobKey, QueuedJob] = {}
        # Queued jobs waiting on a missing PriorityClass, to re-judge when it appears.
        self._priority_of: dict[JobKey, str | None] = {}
        # In-flight jobs that were deleted or finished meanwhile: never re-queued on failure.
        self._gone: set[JobKey] = set()
        # Other names pods of a job are attributed under (HasPodAliases kinds):
        # (kind, namespace, name) -> (job, pod set or None to keep the pod's own).
        self.aliases: dict[JobKey, tuple[JobKey, str | None]] = {}
        self._aliases_of: dict[JobKey, list[JobKey]] = {}
        # Admitted jobs that need one more write (FollowsUp kinds): key -> (resourceVersion, patch).
        self.follow_ups: dict[JobKey, tuple[str, dict[str, Any]]] = {}
        # In-flight jobs whose admission write may or may not have been applied (see
        # admission_unknown): key -> (resourceVersion it was conditioned on, whom to tell).
        self.unknown: dict[JobKey, tuple[str, Callable[[bool], None]]] = {}

    def register(self, adapter: JobAdapter) -> None:
        self.adapters[adapter.info.kind] = adapter

    # ----------------------------------------------------------------- job observations
    def observe(self, adapter: JobAdapter, obj: Obj) -> None:
        key = job_key(adapter, obj)
        if key in self.unknown:
            self._settle(key, adapter, obj)
        if adapter.skip_reason(obj) is not None or adapter.is_finished(obj):
            self.forget(key)
            return
        if isinstance(adapter, HasPodAliases):
            self._set_aliases(key, adapter.pod_aliases(obj))
        if adapter.is_suspended(obj):
            self._gone.discard(key)
            if key not in self.inflight:
                self.reservations.release(key)
            self._enqueue(adapter, key, obj)
            return
        self.queue.remove(key)
        self._priority_of.pop(key, None)
        if ADMITTED_AT in annotations_of(obj):
            self._note_follow_up(adapter, key, obj)
            try:
                pod_sets = adapter.pod_sets(obj)
            except DemandError as exc:
                # Keep whatever is held: the job runs, so its capacity is in use either way.
                log.warning("job.admitted_unreadable", job="/".join(key), error=str(exc))
                return
            self.reservations.track(key, pod_sets)
        elif key not in self.inflight:
            self.reservations.release(key)

    def _note_follow_up(self, adapter: JobAdapter, key: JobKey, obj: Obj) -> None:
        patch = adapter.follow_up_patch(obj) if isinstance(adapter, FollowsUp) else None
        if patch is None:
            self.follow_ups.pop(key, None)
            return
        rv = str(dig(obj, "metadata", "resourceVersion") or "")
        self.follow_ups[key] = (rv, patch)
        self._changed()

    def _set_aliases(self, key: JobKey, aliases: list[tuple[str, str, str | None]]) -> None:
        for old in self._aliases_of.pop(key, []):
            self.aliases.pop(old, None)
        keys = []
        for kind, name, pod_set in aliases:
            alias = (kind, key[1], name)
            self.aliases[alias] = (key, pod_set)
            keys.append(alias)
        if keys:
            self._aliases_of[key] = keys

    def owner_of(
        self, kind: str, namespace: str, name: str, pod_set: str | None
    ) -> tuple[JobKey, str | None]:
        """The job a pod belongs to, following aliases (see HasPodAliases)."""
        key = (kind, namespace, name)
        alias = self.aliases.get(key)
        if alias is None:
            return key, pod_set
        return alias[0], alias[1] or pod_set

    def forget(self, key: JobKey) -> None:
        """The job is gone, finished or not ours: drop it from the queue and free its hold."""
        if key in self.unknown:
            self._settle(key, None, None)
        self._set_aliases(key, [])
        self.follow_ups.pop(key, None)
        self.queue.remove(key)
        self._priority_of.pop(key, None)
        if key in self.inflight:
            self._gone.add(key)
        else:
            self.reservations.release(key)

    def _enqueue(self, adapter: JobAdapter, key: JobKey, obj: Obj) -> None:
        meta = obj.get("metadata") or {}
        previous = self.queue.get(key) or self.inflight.get(key)
        job = QueuedJob(
            key=key,
            uid=str(meta.get("uid", "")),
            resource_version=str(meta.get("resourceVersion", "")),
            priority=self.default_priority,
            created=str(meta.get("creationTimestamp", "")),
            created_epoch=_epoch(str(meta.get("creationTimestamp", ""))),
            admission_patch=adapter.admission_patch(obj),
        )
        class_name = adapter.priority_class_name(obj)
        self._priority_of[key] = class_name
        self._judge_priority(job, class_name)
        try:
            job.pod_sets = adapter.pod_sets(obj)
        except DemandError as exc:
            job.problem = f"cannot compute resource demand: {exc}"
            job.problem_reason = exc.reason
        if previous is not None:
            job.reported = previous.reported
            if _same_demand(previous.pod_sets, job.pod_sets) and previous.problem == job.problem:
                # Nothing that decides the fit changed: keep the verdicts, skip re-evaluation.
                job.failed_at = previous.failed_at
                job.wait_reason = previous.wait_reason
                job.explained_at = previous.explained_at
                job.never_fits = previous.never_fits
                job.never_fits_generation = previous.never_fits_generation
        self.queue.upsert(job)
        self._changed()

    def _judge_priority(self, job: QueuedJob, class_name: str | None) -> None:
        if class_name is None:
            job.priority = self.default_priority
            return
        value = self.priorities.get(class_name)
        if value is None:
            job.problem = (
                f"priorityClassName {class_name!r} does not exist; create the PriorityClass or "
                "fix the name (the job's pods could not be created either)"
            )
            job.problem_reason = "UnknownPriorityClass"
            return
        job.priority = value

    # ----------------------------------------------------------------- priority classes
    def set_priority_classes(self, classes: Mapping[str, int], default: int) -> None:
        """Re-judge queued jobs when PriorityClasses change (rare; the queue re-sorts)."""
        self.priorities = dict(classes)
        self.default_priority = default
        for job in self.queue.ordered():
            class_name = self._priority_of.get(job.key)
            was_problem = job.problem_reason == "UnknownPriorityClass"
            if was_problem:
                job.problem = None
                job.problem_reason = ""
            self._judge_priority(job, class_name)
            self.queue.upsert(job)
        self._changed()

    # ----------------------------------------------------------------- pods
    def pod_changed(self, job: JobKey | None) -> None:
        if job is not None and job in self.reservations:
            self.reservations.reconcile(job)

    # ----------------------------------------------------------------- admission outcomes
    def begin_admission(
        self, job: QueuedJob, pod_sets: Sequence[PodSet], placed: Sequence[Assignment]
    ) -> None:
        self.reservations.hold(job.key, pod_sets, placed)
        self.queue.remove(job.key)
        self.inflight[job.key] = job

    def admission_succeeded(self, key: JobKey, adapter: JobAdapter, obj: Obj) -> None:
        self.inflight.pop(key, None)
        self._gone.discard(key)
        self.observe(adapter, obj)

    def admission_failed(self, key: JobKey) -> None:
        """Undo the hold; the job waits again (the informer has its latest state)."""
        job = self.inflight.pop(key, None)
        self.reservations.release(key)
        if key in self._gone:
            self._gone.discard(key)
        elif job is not None and key not in self.queue:
            job.failed_at = None
            self.queue.upsert(job)
        self._changed()

    def admission_unknown(
        self, key: JobKey, resource_version: str, on_settled: Callable[[bool], None]
    ) -> None:
        """The admission write for an in-flight job got no answer: it may have been applied.

        Releasing the hold now could hand the same capacity to another job while this one
        starts, so the job stays in flight, holding, until an observation settles it: the object
        at ``resource_version`` (the one the write was conditioned on, replayed by a relist)
        says nothing; any newer version says what happened, since the precondition means the
        write can no longer apply after it; deletion ends it. The observation is then judged as
        usual (suspended: queued, hold released; admitted: hold tracked) and ``on_settled``
        is told whether the job was admitted.
        """
        if key in self.inflight:
            self.unknown[key] = (resource_version, on_settled)

    def _settle(self, key: JobKey, adapter: JobAdapter | None, obj: Obj | None) -> None:
        resource_version, on_settled = self.unknown[key]
        if obj is not None and str(dig(obj, "metadata", "resourceVersion")) == resource_version:
            return
        del self.unknown[key]
        self.inflight.pop(key, None)
        self._gone.discard(key)
        admitted = (
            adapter is not None
            and obj is not None
            and not adapter.is_suspended(obj)
            and ADMITTED_AT in annotations_of(obj)
        )
        on_settled(admitted)

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change()


def _epoch(rfc3339: str) -> float:
    try:
        return datetime.datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return time.time()


def _same_demand(a: Sequence[PodSet], b: Sequence[PodSet]) -> bool:
    return len(a) == len(b) and all(
        x.name == y.name
        and x.count == y.count
        and x.request is y.request
        and x.constraints == y.constraints
        for x, y in zip(a, b, strict=True)
    )
