"""Requeue of admitted jobs that never start: when an admitted job's pods are not all Running
and Ready within the pods-ready timeout (--pods-ready-timeout, or its Queue's
podsReadyTimeoutSeconds), kube-queue suspends it again (its kind's suspend patch), it waits in
its queue again (behind the jobs of its priority: in line as if submitted at its requeue,
admission/tracker.py) and may be admitted again only after a backoff
that doubles with each attempt (1 min, 2, 4, ... at most 30 min); after ``limit`` attempts it
stays suspended (GaveUp) until a user edits its spec or re-creates it.

A job whose pods cannot start for a reason kube-queue can see is not kept waiting for the
timeout: when the scheduler bound other pods where its pods were planned (it scores nodes its own
way) and no node has room for them now (its held pods are owed room, capacity/reservations.py),
and the scheduler agrees (a pod of it is Unschedulable), it is suspended again after
``unplaceable`` seconds. Meanwhile its bound pods hold GPUs that a gang cannot use; back in
line, it keeps its place by creation time and is admitted again when all of it fits. That
requeue counts no attempt and has no backoff.

The reason users see comes from the pods' own state (a pod the scheduler cannot place says
Unschedulable, an image that cannot be pulled says ErrImagePull), read when the job is requeued.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from kubequeue.admission.tracker import AdmittedJob
from kubequeue.objects import PodDiagnosis

__all__ = ["Requeue", "RequeuePolicy", "not_running", "unschedulable"]


@dataclass(frozen=True, slots=True)
class RequeuePolicy:
    timeout: float = 600.0  # seconds from admission until every pod must have started (0: off)
    # Seconds a starting job's pods may be owed room (the scheduler bound other pods where
    # they were planned, and no node can take them now) before it is requeued at once, without
    # counting an attempt or backing off (0: such jobs wait for ``timeout`` like any other).
    unplaceable: float = 5.0
    limit: int = 5  # attempts before GaveUp
    backoff: float = 60.0  # before the first re-admission; doubles each time
    backoff_max: float = 1800.0

    def delay(self, attempts: int) -> float:
        """How long a job requeued ``attempts`` times waits before it may be admitted again."""
        if attempts <= 0:
            return 0.0
        return float(min(self.backoff_max, self.backoff * 2 ** min(attempts - 1, 30)))


@dataclass(slots=True)
class Requeue:
    """A decision: suspend ``job`` again, this being attempt ``attempt``; or, ``unplaceable``,
    because its pods have no room (attempt and backoff unchanged: the scheduler's placement,
    not the job, is why it did not start)."""

    job: AdmittedJob
    attempt: int
    gave_up: bool
    started: int
    expected: int
    unplaceable: bool = False


def unschedulable(pods: Sequence[PodDiagnosis]) -> int:
    """How many of these pods the scheduler has tried and found no node for."""
    return sum(1 for pod in pods if pod.why_not_running().startswith("Unschedulable"))


def not_running(pods: Sequence[PodDiagnosis], expected: int) -> tuple[str, str]:
    """(the most common reason, a short text) for the job's pods that are not running: what
    the Requeued Event says. ``pods`` are the job's pods as listed at requeue time."""
    reasons: Counter[str] = Counter()
    shown: list[str] = []
    running = 0
    for pod in pods:
        why = pod.why_not_running()
        if not why:
            running += 1
            continue
        reason = why.partition(":")[0]
        reasons[reason] += 1
        if len(shown) < 3:
            shown.append(f"{pod.metadata.name} {why}")
    missing = max(0, expected - len(pods))
    if missing:
        reasons["NotCreated"] += missing
        shown.append(f"{missing} pod(s) not created")
    top = reasons.most_common(1)[0][0] if reasons else "NotReady"
    text = f"{running} of {expected} pods running and ready"
    if shown:
        text += "; " + "; ".join(shown)
    return top, text[:900]
