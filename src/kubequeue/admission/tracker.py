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

import dataclasses
import datetime
import heapq
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, TypeVar, cast

import msgspec
import structlog

from kubequeue import resources
from kubequeue.capacity.cache import CapacityCache
from kubequeue.capacity.fit import Assignment
from kubequeue.capacity.reservations import Reservations
from kubequeue.capacity.topology import (
    Chosen,
    domain_annotation,
    recorded_domains,
    request_of,
    within_recorded,
)
from kubequeue.demand import DemandError, PodSet, topology_of, topology_whole_job, total_demand
from kubequeue.identity import JobKey, PodOwner
from kubequeue.kinds.common import annotations_of, dig, labels_of, spec_hash
from kubequeue.kinds.protocol import FollowsUp, HasPodAliases, JobAdapter, Obj, Preemptible
from kubequeue.labels import (
    ADMITTED_AT,
    BORROWING,
    GAVE_UP,
    PREEMPTIBLE,
    QUEUE_ANNOTATION,
    QUEUE_LABEL,
    REQUEUED_AT,
    REQUEUES,
    TOPOLOGY_DOMAIN,
)
from kubequeue.observability import metrics
from kubequeue.precondition import Guard, JsonPatch, guard_of, merge_ops
from kubequeue.queueing.queue import JobQueue, QueuedJob
from kubequeue.queueing.quota import QuotaLedger
from kubequeue.queueing.spec import QueueSpec
from kubequeue.queueing.tree import QueueTree
from kubequeue.resources import Resources

__all__ = ["JobTracker", "job_key"]

log = structlog.get_logger(__name__)


def job_key(adapter: JobAdapter, obj: Obj) -> JobKey:
    return (
        adapter.info.kind,
        str(dig(obj, "metadata", "namespace") or ""),
        str(dig(obj, "metadata", "name") or ""),
    )


class AdmittedJob(msgspec.Struct, gc=False):
    """What preemption and requeue need to know of a running job kube-queue admitted. One per
    running job, so: C-level, and not tracked by the cyclic GC (it refers only to strings,
    numbers and plain dicts; no cycles)."""

    key: JobKey
    uid: str
    resource_version: str
    queue: str
    priority: int
    admitted_epoch: float
    demand: Resources
    # The kind's suspend patch (None: this job cannot be preempted: its kind cannot be
    # suspended once running, or it is marked kube-queue.io/preemptible: "false").
    preemption_patch: dict[str, Any] | None
    queue_label: str | None = None  # to find its queue if Queues appear after it was admitted
    requeues: int = 0  # times kube-queue already suspended it for pods that never started
    # The topology domain(s) it was placed in, as its admission recorded them (the
    # kube-queue.io/topology-domain annotation; None: none), for ``kube-queue status``.
    domain: str | None = None


@dataclass(slots=True)
class Preempting:
    """A job whose capacity is held while the jobs it preempted stop (see plan_preemption)."""

    job: QueuedJob
    victims: list[JobKey]
    started: float
    reason: str
    borrowing: bool = False
    domains: tuple[Chosen, ...] = ()  # the topology domains of the capacity held


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
        reservations.bound_pods = self.bound_pods
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
        # Queue objects (as a validated tree) and what admitted jobs use of them; namespace
        # labels for Queue namespaceSelectors (None until Namespaces are listed).
        self.ledger = QuotaLedger()
        self.namespace_labels: dict[str, dict[str, str]] = {}
        # Running jobs kube-queue admitted (candidates for preemption and requeue).
        self.admitted: dict[JobKey, AdmittedJob] = {}
        # When each admitted job's pods must all have started (a heap; entries of jobs that
        # stopped or whose deadline moved are dropped when they come up). 0 turns it off;
        # queue_timeout gives a Queue's own podsReadyTimeoutSeconds.
        self.pods_ready_timeout = 600.0
        self._deadlines: list[tuple[float, JobKey]] = []
        self._deadline_of: dict[JobKey, float] = {}
        self._all_started: set[JobKey] = set()  # admitted jobs whose pods all ran at once
        # Admitted jobs, still starting, whose held pods are owed room (stranded_jobs): since
        # when (wall clock), for the requeue of jobs the scheduler cannot place (unplaceable).
        self._stranded_since: dict[JobKey, float] = {}
        # Jobs holding capacity while their victims stop, and victim -> its preemptor.
        self.preempting: dict[JobKey, Preempting] = {}
        self.victims: dict[JobKey, JobKey] = {}
        # In-flight jobs whose admission write may or may not have been applied (see
        # admission_unknown): key -> (resourceVersion it was conditioned on, whom to tell).
        self.unknown: dict[JobKey, tuple[Guard, Callable[[bool], None]]] = {}

    def register(self, adapter: JobAdapter) -> None:
        self.adapters[adapter.info.kind] = adapter

    # ----------------------------------------------------------------- job observations
    def observe(self, adapter: JobAdapter, obj: Obj) -> None:
        """Judge one observation of a job. The gate (skip / finished / suspended) is total by
        contract: an exception there is a kube-queue bug and propagates (the informer counts it
        and the periodic resync judges the object again). Everything else an adapter reads can
        fail on hostile input; such a failure is a verdict about the job (see _unreadable)."""
        key = job_key(adapter, obj)
        if key in self.unknown:
            self._settle(key, adapter, obj)
        if adapter.skip_reason(obj) is not None or adapter.is_finished(obj):
            self.forget(key)
            return
        aliased = cast(HasPodAliases, adapter) if _can(adapter, HasPodAliases) else None
        if aliased is not None:
            try:
                aliases = aliased.pod_aliases(obj)
            except Exception as exc:
                _unreadable(adapter, key, "pod aliases", exc)
            else:
                self._set_aliases(key, aliases)
        if adapter.is_suspended(obj):
            self._gone.discard(key)
            self._stopped(key)
            if key not in self.inflight and key not in self.preempting:
                self.reservations.release(key)
                self.ledger.release(key)
            self._enqueue(adapter, key, obj)
            return
        self.queue.remove(key)
        self._priority_of.pop(key, None)
        if key in self.preempting:  # a user let it run meanwhile: nothing to wait for
            self._abandon_preemption(key, "the job was started by someone else")
        if ADMITTED_AT in annotations_of(obj):
            self._note_follow_up(adapter, key, obj)
            try:
                pod_sets = adapter.pod_sets(obj)
            except DemandError as exc:
                # Keep whatever is held: the job runs, so its capacity is in use either way.
                log.warning("job.admitted_unreadable", job="/".join(key), error=str(exc))
                return
            except Exception as exc:
                _unreadable(adapter, key, "resource demand", exc)
                return
            recorded = recorded_domains(annotations_of(obj).get(TOPOLOGY_DOMAIN))
            self.reservations.track(key, within_recorded(pod_sets, recorded, self.cache))
            queue = self._admitted_queue(obj)
            demand = total_demand(pod_sets)
            self.ledger.charge(key, queue, demand)
            self._note_admitted(adapter, key, obj, queue, demand)
        elif key not in self.inflight:
            self._stopped(key)
            self.reservations.release(key)
            self.ledger.release(key)

    def _note_admitted(
        self, adapter: JobAdapter, key: JobKey, obj: Obj, queue: str, demand: Resources
    ) -> None:
        meta = obj.get("metadata") or {}
        patch = None
        marked = annotations_of(obj).get(PREEMPTIBLE) or labels_of(obj).get(PREEMPTIBLE)
        stoppable = cast(Preemptible, adapter) if _can(adapter, Preemptible) else None
        if stoppable is not None and marked != "false":
            try:
                patch = _shared(stoppable.preemption_patch(obj))
            except Exception as exc:
                _unreadable(adapter, key, "preemption patch", exc)
        try:
            class_name = adapter.priority_class_name(obj)
        except Exception:
            class_name = None
        priority = self.default_priority
        if class_name is not None:
            priority = self.priorities.get(class_name, self.default_priority)
        named = labels_of(obj).get(QUEUE_LABEL)
        requeues = _requeues(obj)
        admitted_epoch = _epoch(str(annotations_of(obj).get(ADMITTED_AT, "")))
        self._note_deadline(key, queue, admitted_epoch)
        domain = annotations_of(obj).get(TOPOLOGY_DOMAIN)
        self.admitted[key] = AdmittedJob(
            key=key,
            uid=str(meta.get("uid", "")),
            resource_version=str(meta.get("resourceVersion", "")),
            queue=queue,
            priority=priority,
            admitted_epoch=admitted_epoch,
            demand=demand,
            preemption_patch=patch,
            queue_label=named if isinstance(named, str) else None,
            requeues=requeues,
            domain=domain[:1024] if isinstance(domain, str) and domain else None,
        )

    def ready_timeout(self, queue: str) -> float:
        """The pods-ready timeout of jobs admitted into ``queue`` (0: off): the Queue's own
        podsReadyTimeoutSeconds, else --pods-ready-timeout. One rule, for the deadline and for
        what the Events say it was."""
        node = self.ledger.tree.nodes.get(queue) if queue else None
        own = node.spec.pods_ready_timeout if node is not None else None
        return own if own is not None else self.pods_ready_timeout

    def _note_deadline(self, key: JobKey, queue: str, admitted_epoch: float) -> None:
        timeout = self.ready_timeout(queue)
        if timeout <= 0:
            return
        deadline = admitted_epoch + timeout
        if self._deadline_of.get(key, -1.0) == deadline:
            return  # known (the usual case: another status update of a running job)
        self._deadline_of[key] = deadline
        heapq.heappush(self._deadlines, (deadline, key))

    def started_pods(self, key: JobKey) -> int:
        """The job's pods that are Running and Ready (under its name and its aliases)."""
        count = self.cache.started_pods(key)
        for alias in self._aliases_of.get(key, ()):
            count += self.cache.started_pods(alias)
        return count

    def never_started(self, now: float) -> list[tuple[AdmittedJob, int, int]]:
        """Admitted jobs past their pods-ready deadline with pods not all started:
        (job, pods started, pods expected). Each job comes up once per admission."""
        out = []
        for deadline, key in self._due_deadlines(now):
            if self._deadline_of.get(key) != deadline:
                continue  # it stopped, or was admitted again since (a newer deadline)
            job = self.admitted.get(key)
            if job is None or key in self.victims or key in self.inflight:
                continue
            if key in self._all_started:
                continue
            expected = self.reservations.expected(key)
            started = self.started_pods(key)
            if started < expected:
                out.append((job, started, expected))
        return out

    def _due_deadlines(self, now: float) -> list[tuple[float, JobKey]]:
        """The deadlines up to ``now``, taken off the heap, in order. A first cycle after
        start-up finds every running job's deadline passed: past _DUE_POPS of them, they are
        split off and sorted at once rather than popped one by one (the same order)."""
        heap = self._deadlines
        due: list[tuple[float, JobKey]] = []
        while heap and heap[0][0] <= now:
            if len(due) == _DUE_POPS:
                due += [item for item in heap if item[0] <= now]
                due.sort()
                heap[:] = [item for item in heap if item[0] > now]
                heapq.heapify(heap)
                break
            due.append(heapq.heappop(heap))
        return due

    def unplaceable(
        self, now: float, grace: float
    ) -> tuple[list[tuple[AdmittedJob, int, int]], float | None]:
        """Admitted jobs that are still starting (within their pods-ready window, not all
        pods started) and whose held pods have been owed room for ``grace`` seconds or more:
        (job, pods started, pods expected), and when the next one comes due (None: none is
        on its way). Each comes up once per spell of being owed room (see
        ``unplaceable_cleared``)."""
        stranded = self.reservations.stranded_jobs()
        since_of = self._stranded_since
        for key in [key for key in since_of if key not in stranded]:
            del since_of[key]
        due: list[tuple[AdmittedJob, int, int]] = []
        next_due: float | None = None
        for key in stranded:
            job = self.admitted.get(key)
            if (
                job is None
                or key not in self._deadline_of
                or key in self._all_started
                or key in self.victims
                or key in self.inflight
            ):
                continue
            since = since_of.setdefault(key, now)
            if since == -1.0:
                continue  # already reported in this spell
            if now - since < grace:
                at = since + grace
                next_due = at if next_due is None else min(next_due, at)
                continue
            expected = self.reservations.expected(key)
            started = self.started_pods(key)
            if started < expected:
                since_of[key] = -1.0
                due.append((job, started, expected))
        return due, next_due

    def unplaceable_cleared(self, key: JobKey, now: float) -> None:
        """A suspect was not confirmed (no pod of it is Unschedulable yet): it may come up
        again after another grace period, counted from now."""
        if key in self._stranded_since:
            self._stranded_since[key] = now

    def _stopped(self, key: JobKey) -> None:
        """The job no longer runs as admitted (suspended, finished, gone, not ours)."""
        self.admitted.pop(key, None)
        self._stranded_since.pop(key, None)
        self.victims.pop(key, None)
        self._deadline_of.pop(key, None)
        self._all_started.discard(key)

    def _admitted_queue(self, obj: Obj) -> str:
        """The queue an admitted job counts in: the one it was admitted into (annotation), else
        (admitted before queues existed) the one it would be assigned now."""
        recorded = annotations_of(obj).get(QUEUE_ANNOTATION)
        if isinstance(recorded, str) and recorded:
            return recorded
        namespace = str(dig(obj, "metadata", "namespace") or "")
        return self.ledger.tree.assign(labels_of(obj), self.namespace_labels.get(namespace)).queue

    def _note_follow_up(self, adapter: JobAdapter, key: JobKey, obj: Obj) -> None:
        patch = None
        following = cast(FollowsUp, adapter) if _can(adapter, FollowsUp) else None
        if following is not None:
            try:
                patch = following.follow_up_patch(obj)
            except Exception as exc:
                _unreadable(adapter, key, "follow-up", exc)
        if patch is None:
            self.follow_ups.pop(key, None)
            return
        rv = str(dig(obj, "metadata", "resourceVersion") or "")
        self.follow_ups[key] = (rv, patch)
        self._changed()

    def _set_aliases(self, key: JobKey, aliases: list[tuple[str, str, str | None]]) -> None:
        before = self._aliases_of.pop(key, [])
        for old in before:
            self.aliases.pop(old, None)
        keys = []
        for kind, name, pod_set in aliases:
            alias = (kind, key[1], name)
            self.aliases[alias] = (key, pod_set)
            keys.append(alias)
        if keys:
            self._aliases_of[key] = keys
        if keys != before and key in self.reservations:
            self.reservations.reconcile(key)  # its bound pods are counted differently now

    def owner_of(self, raw: JobKey) -> JobKey:
        """The job a pod attributed to ``raw`` belongs to, following aliases (HasPodAliases)."""
        alias = self.aliases.get(raw)
        return raw if alias is None else alias[0]

    def resolve_pod(self, owner: PodOwner) -> tuple[JobKey, str | None]:
        """A pod's job and pod set from its raw owner (capacity/cache.py's), aliases followed."""
        raw, pod_set = owner
        alias = self.aliases.get(raw)
        if alias is None:
            return raw, pod_set
        return alias[0], alias[1] or pod_set

    def is_admitted(self, key: JobKey) -> bool:
        """Admitted by kube-queue, or its admission write in flight (pods may come first)."""
        return key in self.admitted or key in self.inflight

    def bound_pods(self, job: JobKey) -> Counter[str | None]:
        """The job's bound pods by pod set, including pods attributed to its aliases.

        The cache counts each pod under the name its own labels and owner give (the *raw*
        owner), never under a resolved one, so the answer does not depend on whether the pod
        or the job's alias was seen first (after a restart pods are listed before job kinds).
        """
        counts = self.cache.bound_pods(job)
        aliases = self._aliases_of.get(job)
        if not aliases:
            return counts
        merged = Counter(counts)
        for alias in aliases:
            pod_set = self.aliases[alias][1]
            for name, n in self.cache.bound_pods(alias).items():
                merged[pod_set or name] += n
        return merged

    def forget(self, key: JobKey) -> None:
        """The job is gone, finished or not ours: drop it from the queue and free its hold."""
        if key in self.unknown:
            self._settle(key, None, None)
        self._set_aliases(key, [])
        self.follow_ups.pop(key, None)
        self.queue.remove(key)
        self._priority_of.pop(key, None)
        self._stopped(key)
        if key in self.preempting:
            self._abandon_preemption(key, "the job is gone")
        if key in self.inflight:
            self._gone.add(key)
        else:
            self.reservations.release(key)
            self.ledger.release(key)

    def _enqueue(self, adapter: JobAdapter, key: JobKey, obj: Obj) -> None:
        meta = obj.get("metadata") or {}
        previous = self.queue.get(key) or self.inflight.get(key)
        created = str(meta.get("creationTimestamp", ""))
        job = QueuedJob(
            key=key,
            uid=str(meta.get("uid", "")),
            resource_version=str(meta.get("resourceVersion", "")),
            priority=self.default_priority,
            created=created,
            created_epoch=_epoch(created),
        )
        label = labels_of(obj).get(QUEUE_LABEL)
        job.queue_label = label if isinstance(label, str) else None
        job.requeues = _requeues(obj)
        if job.requeues:
            stamp = str(annotations_of(obj).get(REQUEUED_AT, ""))
            job.requeued_epoch = _epoch(stamp)
            if job.requeued_epoch > job.created_epoch:
                # Its pods did not start in time: it goes behind the jobs of its priority, in
                # line (and for the starvation guard) as if submitted when it was requeued.
                # Never ahead of its creation: the annotation is on a user's object.
                job.created, job.created_epoch = stamp, job.requeued_epoch
        class_name: str | None = None
        try:
            job.guard = guard_of(obj)
            job.admission_ops = _shared_ops(merge_ops(obj, adapter.admission_patch(obj)))
            class_name = adapter.priority_class_name(obj)
            job.pod_sets = _with_job_topology(adapter.pod_sets(obj), obj, key)
        except DemandError as exc:
            job.problem = f"cannot compute resource demand: {exc}"
            job.problem_reason = exc.reason
        except Exception as exc:
            job.problem = _unreadable(adapter, key, "resource demand", exc)
            job.problem_reason = "InvalidJob"
        if job.problem is None and _gave_up(obj):
            job.problem = (
                f"its pods failed to start {job.requeues} times; kube-queue gave up. Edit the "
                "job's spec (or re-create it) to have it queued again"
            )
            job.problem_reason = "GaveUp"
        self._priority_of[key] = class_name
        self._judge_priority(job, class_name)
        self._judge_queue(job)
        if previous is not None:
            job.reported = previous.reported
            if (
                _same_demand(previous.pod_sets, job.pod_sets)
                and previous.problem == job.problem
                and previous.queue == job.queue
            ):
                # Nothing that decides the fit changed: keep the verdicts, skip re-evaluation.
                job.failed_at = previous.failed_at
                job.wait_reason = previous.wait_reason
                job.explained_at = previous.explained_at
                job.never_fits = previous.never_fits
                job.never_fits_generation = previous.never_fits_generation
                job.quota_reason = previous.quota_reason
                job.binding_since = previous.binding_since
        waiting = self.preempting.get(key)
        if waiting is not None:
            # Its capacity is held while its victims stop: keep it out of the queue, but admit
            # it with this newest version (and drop the plan if what it needs changed).
            if _same_demand(waiting.job.pod_sets, job.pod_sets) and job.problem is None:
                job.queue = waiting.job.queue
                waiting.job = job
                return
            self._abandon_preemption(key, "the job changed while it waited")
        self.queue.upsert(job)
        self._changed()

    def _judge_priority(self, job: QueuedJob, class_name: str | None) -> None:
        if class_name is None:
            job.priority = self.default_priority
            return
        value = self.priorities.get(class_name)
        if value is None:
            if job.problem is not None:
                return  # the job has a worse problem already; that one is what users must fix
            job.problem = (
                f"priorityClassName {class_name!r} does not exist; create the PriorityClass or "
                "fix the name (the job's pods could not be created either)"
            )
            job.problem_reason = "UnknownPriorityClass"
            return
        job.priority = value

    def _judge_queue(self, job: QueuedJob) -> None:
        """Which queue the job waits in, and whether it can wait there (UnknownQueue,
        InvalidQueue). Without Queue objects every job waits in the implicit queue ""."""
        if job.problem_reason in _QUEUE_PROBLEMS:
            job.problem = None
            job.problem_reason = ""
        tree = self.ledger.tree
        if not tree and job.queue_label is None:
            job.queue = ""
            return
        labels = {QUEUE_LABEL: job.queue_label} if job.queue_label is not None else {}
        found = tree.assign(labels, self.namespace_labels.get(job.key[1]))
        job.queue = found.queue
        if found.problem is not None and job.problem is None:
            job.problem = found.problem
            job.problem_reason = found.reason

    # ----------------------------------------------------------------- queues, namespaces
    def set_queues(self, specs: Iterable[QueueSpec]) -> None:
        """Queue objects changed: rebuild the tree, re-aggregate usage, re-assign queued jobs.
        Jobs admitted while there were no Queues (counted nowhere) are counted in the queue
        they would be assigned now."""
        self.ledger.set_tree(QueueTree(specs))
        tree = self.ledger.tree
        # The walk asks which queued jobs would borrow: that depends on the pooled resources.
        self.queue.classify_by(sorted({res for pool in tree.pools.values() for res in pool}))
        if tree:
            for job in self.admitted.values():
                if not job.queue:
                    labels = {QUEUE_LABEL: job.queue_label} if job.queue_label else {}
                    job.queue = tree.assign(labels, self.namespace_labels.get(job.key[1])).queue
                    self.ledger.charge(job.key, job.queue, job.demand)
        self._rejudge_queues(None)

    def set_namespace(self, name: str, labels: Mapping[str, str] | None) -> None:
        """A namespace's labels (None: it is gone), for Queue namespaceSelectors."""
        if labels is None:
            if self.namespace_labels.pop(name, None) is None:
                return
        else:
            new = dict(labels)
            if self.namespace_labels.get(name) == new:
                return
            self.namespace_labels[name] = new
        if self.ledger.tree:
            self._rejudge_queues(name)

    def _rejudge_queues(self, namespace: str | None) -> None:
        for job in self.queue.ordered():
            if namespace is not None and job.key[1] != namespace:
                continue
            before = (job.queue, job.problem)
            self._judge_queue(job)
            if (job.queue, job.problem) != before:
                job.quota_reason = ""
                job.quota_checked = None
                job.over_quota = ""
                self.queue.upsert(job)
        self._changed()

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
    def pod_changed(self, raw: JobKey | None) -> None:
        """A pod attributed to ``raw`` (as the cache counts it) changed."""
        if raw is None:
            return
        job = self.owner_of(raw)
        if job in self.reservations:
            self.reservations.reconcile(job)
        if job in self._deadline_of and job not in self._all_started:
            expected = self.reservations.expected(job)
            if expected and self.started_pods(job) >= expected:
                self._all_started.add(job)  # it started: pods that finish later are fine

    # ----------------------------------------------------------------- admission outcomes
    def begin_admission(
        self,
        job: QueuedJob,
        pod_sets: Sequence[PodSet],
        placed: Sequence[Assignment],
        borrowing: bool = False,
        domains: Sequence[Chosen] = (),
    ) -> None:
        self.reservations.hold(job.key, pod_sets, placed)
        self.queue.remove(job.key)
        self.inflight[job.key] = job
        if job.queue:
            self.ledger.charge(job.key, job.queue, job.demand)
        self._annotate_admission(job, borrowing, domains)

    def _annotate_admission(
        self, job: QueuedJob, borrowing: bool, domains: Sequence[Chosen]
    ) -> None:
        """Recorded on the job with the admission itself, so they survive restarts: where its
        usage counts and whether it is borrowed quota (what a reclaim may take back), and the
        topology domain(s) it was placed in. Set afresh each time: a job whose write failed is
        admitted again, perhaps into another queue or domain."""
        if not job.queue and not domains:
            if job.admission_annotations:
                job.admission_annotations = {}
            return
        annotations: dict[str, str] = {}
        if job.queue:
            annotations[QUEUE_ANNOTATION] = job.queue
            annotations[BORROWING] = "true" if borrowing else "false"
        domain = domain_annotation(domains)
        if domain is not None:
            annotations[TOPOLOGY_DOMAIN] = domain
        job.admission_annotations = annotations

    def admission_succeeded(self, key: JobKey, adapter: JobAdapter, obj: Obj) -> None:
        self.inflight.pop(key, None)
        self._gone.discard(key)
        self.observe(adapter, obj)

    def admission_failed(self, key: JobKey) -> None:
        """Undo the hold; the job waits again (the informer has its latest state)."""
        job = self.inflight.pop(key, None)
        self.reservations.release(key)
        self.ledger.release(key)
        if key in self._gone:
            self._gone.discard(key)
        elif job is not None and key not in self.queue:
            job.failed_at = None
            self.queue.upsert(job)
        self._changed()

    def admission_unknown(
        self, key: JobKey, guard: Guard, on_settled: Callable[[bool], None]
    ) -> None:
        """The admission write for an in-flight job got no answer: it may have been applied.

        Releasing the hold now could hand the same capacity to another job while this one
        starts, so the job stays in flight, holding, until an observation settles it. A
        still-suspended object that ``guard`` (the write's precondition) still matches says
        nothing: the write may yet apply to it. Anything else says what happened: admitted, or
        changed so that the write's tests can no longer pass (precondition.py); deletion ends
        it. The observation is then judged as usual (suspended: queued, hold released;
        admitted: hold tracked) and ``on_settled`` is told whether the job was admitted.
        """
        if key in self.inflight:
            self.unknown[key] = (guard, on_settled)

    def _settle(self, key: JobKey, adapter: JobAdapter | None, obj: Obj | None) -> None:
        guard, on_settled = self.unknown[key]
        if (
            obj is not None
            and adapter is not None
            and adapter.is_suspended(obj)
            and guard_of(obj) == guard
        ):
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

    # ----------------------------------------------------------------- preemption
    def preemptible(self) -> list[AdmittedJob]:
        """Admitted jobs that may be preempted now (not in flight, not already victims)."""
        return [
            job
            for key, job in self.admitted.items()
            if job.preemption_patch is not None
            and key not in self.victims
            and key not in self.inflight
        ]

    def footprint(self, key: JobKey) -> dict[str, Resources]:
        """What a job holds per node: its bound pods (under its own name and its aliases) and
        the capacity held for its missing pods."""
        out: dict[str, Resources] = {}
        self.cache.footprint(key, out)
        for alias in self._aliases_of.get(key, ()):
            self.cache.footprint(alias, out)
        for node, request, count in self.reservations.placed(key):
            resources.add_into(out.setdefault(node, {}), request, count)
        return out

    def leaving(self, nodes: set[str] | None = None) -> dict[str, Resources]:
        """Capacity that is on its way out: bound pods of jobs that are suspended (queued) or
        being preempted. Counting it as free lets a preemptor wait for it instead of
        preempting more (after a restart, too: the victims are suspended by then)."""
        return self.footprints((*self.victims, *self.queue.keys()), nodes)

    def footprints(
        self, keys: Iterable[JobKey], nodes: set[str] | None = None
    ) -> dict[str, Resources]:
        """What these jobs hold (``footprint``), summed per node, each job counted once
        however often it is named (a victim is also admitted until it stops); only ``nodes``
        if given."""
        out: dict[str, Resources] = {}
        for key in set(keys):
            for node, amounts in self.footprint(key).items():
                if nodes is None or node in nodes:
                    resources.add_into(out.setdefault(node, {}), amounts)
        return out

    def leaving_somewhere(self) -> bool:
        if self.victims:
            return True
        bound = self.cache.owners_with_pods()
        return any(key in bound for key in self.queue.keys())  # noqa: SIM118 - a snapshot

    def begin_preemption(
        self,
        job: QueuedJob,
        placement: Sequence[Assignment],
        victims: Sequence[JobKey],
        reason: str,
        now: float,
        borrowing: bool = False,
        domains: Sequence[Chosen] = (),
    ) -> None:
        """Hold the preemptor's capacity now (pinned: it stays on these nodes while the victims'
        pods leave, over-committing them until they are gone), and remember the victims."""
        self.reservations.hold(job.key, job.pod_sets, placement, pinned=True)
        self.queue.remove(job.key)
        if job.queue:
            self.ledger.charge(job.key, job.queue, job.demand)
        self.preempting[job.key] = Preempting(
            job, list(victims), now, reason, borrowing, tuple(domains)
        )
        for victim in victims:
            self.victims[victim] = job.key

    def ready_preemptors(self) -> list[Preempting]:
        """Preemptors whose victims are gone and whose held nodes are no longer over-committed:
        they can be admitted where their capacity is held."""
        ready = []
        for key, state in self.preempting.items():
            if any(v in self.admitted for v in state.victims):
                continue
            if self.reservations.overcommits(key):
                continue
            ready.append(state)
        return ready

    def finish_preemption(self, key: JobKey) -> None:
        """The preemptor's admission write is about to be sent: it is in flight like any
        admission, with the capacity it held."""
        state = self.preempting.pop(key)
        self.reservations.unpin(key)
        for victim in state.victims:
            if self.victims.get(victim) == key:
                del self.victims[victim]
        self.inflight[key] = state.job
        self._annotate_admission(state.job, state.borrowing, state.domains)

    def _abandon_preemption(self, key: JobKey, why: str) -> None:
        state = self.preempting.pop(key, None)
        if state is None:
            return
        log.info("preemption.abandoned", job="/".join(key), why=why)
        self.reservations.release(key)
        self.ledger.release(key)
        for victim in state.victims:
            if self.victims.get(victim) == key:
                del self.victims[victim]

    def abandon_preemption(self, key: JobKey, why: str) -> None:
        """Give up waiting (victims would not stop in time): the job waits in its queue again."""
        state = self.preempting.get(key)
        self._abandon_preemption(key, why)
        if state is not None:
            state.job.failed_at = None
            self.queue.upsert(state.job)
            self._changed()

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change()


_QUEUE_PROBLEMS = frozenset({"UnknownQueue", "InvalidQueue"})
# Deadlines popped off the heap one by one before the rest that are due are sorted at once.
_DUE_POPS = 64
_CAPABLE: dict[tuple[type, Any], bool] = {}


def _can(adapter: JobAdapter, capability: Any) -> bool:
    """isinstance() against a runtime-checkable Protocol, memoised per adapter class: that
    check walks the protocol's members every time, and it runs on every job observation."""
    key = (type(adapter), capability)
    found = _CAPABLE.get(key)
    if found is None:
        found = _CAPABLE[key] = isinstance(adapter, capability)
    return found


# Identical patches (a kind's suspend patch is the same for every job of it) shared, not copied
# once per running job.
_T = TypeVar("_T")
_SHARED: dict[bytes, Any] = {}


def _interned(value: Any, make: Callable[[], _T]) -> _T:
    """One object per distinct JSON value (kept for the first 2,048 such values)."""
    key = msgspec.json.encode(value, order="sorted")
    found = _SHARED.get(key)
    if found is None:
        found = make()
        if len(_SHARED) < 2048:
            _SHARED[key] = found
    return cast(_T, found)


def _shared(patch: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if patch is None else _interned(patch, lambda: patch)


def _shared_ops(ops: JsonPatch) -> tuple[Mapping[str, Any], ...]:
    """Identical JSON-patch ops likewise (a kind's admission change is one of a handful), made
    read-only: they are shared."""
    return _interned(ops, lambda: tuple(MappingProxyType(op) for op in ops))


def _with_job_topology(pod_sets: Sequence[PodSet], obj: Obj, key: JobKey) -> Sequence[PodSet]:
    """A topology asked for on the job itself applies to every pod set (one on a pod template,
    read by the adapter, to its own); with ``kube-queue.io/topology-scope: job`` the job's
    topology (capacity/topology.py ``request_of``) is every pod set's, marked ``whole_job``:
    all of the job in one domain. DemandError for a malformed one."""
    annotations = annotations_of(obj)
    where = f"{key[0]} {key[1]}/{key[2]}"
    asked = topology_of(annotations, where)
    whole = topology_whole_job(annotations, where)
    if asked is not None:
        pod_sets = [dataclasses.replace(ps, topology=asked) for ps in pod_sets]
    if whole and len(pod_sets) > 1:  # (one pod set: the same thing already)
        request = request_of(pod_sets)
        if request is not None:
            together = dataclasses.replace(request, whole_job=True)
            pod_sets = [dataclasses.replace(ps, topology=together) for ps in pod_sets]
    return pod_sets


def _unreadable(adapter: JobAdapter, key: JobKey, what: str, exc: Exception) -> str:
    """An adapter failed on this object with something other than DemandError: a field holds a
    value of a type or size the adapter did not expect. That is hostile or broken input, so it is
    a verdict on the job (InvalidJob: queued, never admitted, judged again on its next change),
    and also a gap in the adapter, so it is logged with its traceback and counted."""
    metrics.UNREADABLE_JOBS.labels(adapter.info.name).inc()
    log.warning(
        "job.unreadable",
        job="/".join(key),
        kind=adapter.info.kind,
        reading=what,
        error=f"{type(exc).__name__}: {str(exc)[:200]}",
        exc_info=exc,
    )
    detail = str(exc)[:120]
    return (
        f"kube-queue could not read this {adapter.info.kind}'s {what} ({type(exc).__name__}"
        f"{': ' + detail if detail else ''}); some field holds a value of the wrong type or size. "
        "Fix the object; it is judged again on its next change"
    )


def _gave_up(obj: Obj) -> bool:
    """GaveUp stands while the spec is what it was when kube-queue gave up."""
    marked = annotations_of(obj).get(GAVE_UP)
    return isinstance(marked, str) and bool(marked) and marked == spec_hash(obj)


def _requeues(obj: Obj) -> int:
    """Times kube-queue requeued the job so far; a job a user edited after GaveUp (its spec no
    longer matches) starts again from zero."""
    annotations = annotations_of(obj)
    raw = annotations.get(REQUEUES)
    if not isinstance(raw, str) or not raw.isdigit() or len(raw) > 4:
        return 0
    marked = annotations.get(GAVE_UP)
    if isinstance(marked, str) and marked and marked != spec_hash(obj):
        return 0
    return int(raw)


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
        and x.topology == y.topology
        for x, y in zip(a, b, strict=True)
    )
