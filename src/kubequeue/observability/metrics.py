"""Prometheus metrics, one registry, names prefixed ``kube_queue_``.

Chosen to answer operators' questions directly: how deep is the queue (per kind), how fast are
jobs admitted and how long did they wait, how long does a decision cycle take, and are the watches
healthy (restarts, relists) and how big are the caches.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = [
    "ADMISSIONS",
    "ADMISSION_ERRORS",
    "ADMISSION_WAIT",
    "CACHED_OBJECTS",
    "CYCLE_SECONDS",
    "EVENTS_DROPPED",
    "HANDLER_ERRORS",
    "IS_LEADER",
    "PENDING",
    "PREEMPTIONS",
    "QUEUE_ADMISSION_WAIT",
    "QUEUE_ADMITTED",
    "QUEUE_BORROWED",
    "QUEUE_PENDING",
    "QUEUE_USED",
    "REGISTRY",
    "RELISTS",
    "REQUEUES",
    "RESERVED_JOBS",
    "TRANSPORT_ERRORS",
    "UNREADABLE_JOBS",
    "WATCH_EVENTS",
    "WATCH_RESTARTS",
]

REGISTRY = CollectorRegistry(auto_describe=True)

PENDING = Gauge(
    "kube_queue_pending_jobs",
    "Jobs waiting for admission, by kind and state (active: can be admitted when capacity frees; "
    "inadmissible: invalid input or can never fit as the cluster is).",
    ["kind", "state"],
    registry=REGISTRY,
)
ADMISSIONS = Counter(
    "kube_queue_admitted_jobs_total", "Jobs admitted (set running).", ["kind"], registry=REGISTRY
)
ADMISSION_ERRORS = Counter(
    "kube_queue_admission_errors_total",
    "Admission patches that failed, by reason (Conflict is normal: the job changed meanwhile; "
    "Transport: no answer, retried with the job's capacity held).",
    ["kind", "reason"],
    registry=REGISTRY,
)
ADMISSION_WAIT = Histogram(
    "kube_queue_admission_wait_seconds",
    "Time from job creation to admission.",
    ["kind"],
    buckets=(0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400),
    registry=REGISTRY,
)
CYCLE_SECONDS = Histogram(
    "kube_queue_admission_cycle_seconds",
    "Duration of one admission cycle (walk the queue, fit, reserve).",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
    registry=REGISTRY,
)
RESERVED_JOBS = Gauge(
    "kube_queue_reserved_jobs",
    "Admitted jobs still holding capacity for pods that are not bound yet.",
    registry=REGISTRY,
)
HELD_NODES = Gauge(
    "kube_queue_held_nodes",
    "Nodes held for a job that waited past the starvation timeout (no other job starts there "
    "until it does); 0 when no node is held.",
    registry=REGISTRY,
)
WATCH_EVENTS = Counter(
    "kube_queue_watch_events_total",
    "Watch events received.",
    ["resource", "type"],
    registry=REGISTRY,
)
WATCH_RESTARTS = Counter(
    "kube_queue_watch_restarts_total",
    "Watch streams restarted, by reason (gone: resourceVersion expired; error: anything else).",
    ["resource", "reason"],
    registry=REGISTRY,
)
RELISTS = Counter(
    "kube_queue_relists_total",
    "Full lists (initial and after 410 Gone).",
    ["resource"],
    registry=REGISTRY,
)
CACHED_OBJECTS = Gauge(
    "kube_queue_cached_objects", "Objects held by each informer.", ["resource"], registry=REGISTRY
)
HANDLER_ERRORS = Counter(
    "kube_queue_handler_errors_total",
    "Objects whose handling raised (a bug; the object was skipped, the watch went on).",
    ["resource"],
    registry=REGISTRY,
)
UNREADABLE_JOBS = Counter(
    "kube_queue_unreadable_jobs_total",
    "Job observations an adapter could not read (a field of an unexpected type or size): the job "
    "got an InvalidJob event and waits; also a gap in that adapter worth reporting.",
    ["kind"],
    registry=REGISTRY,
)
EVENTS_DROPPED = Counter(
    "kube_queue_events_dropped_total",
    "Kubernetes Events not written because the event buffer was full or the write failed.",
    registry=REGISTRY,
)
IS_LEADER = Gauge(
    "kube_queue_leader",
    "1 while this replica holds the leader Lease and admits.",
    registry=REGISTRY,
)
TRANSPORT_ERRORS = Counter(
    "kube_queue_transport_errors_total",
    "Requests to the API server that got no complete answer (connection refused, reset or "
    "dropped, timeout), by operation. Each is retried or, for Events, dropped; none ends the "
    "process. Watches count theirs in kube_queue_watch_restarts_total.",
    ["operation"],
    registry=REGISTRY,
)

# Per queue ("default" is the implicit queue of jobs that name none).
QUEUE_PENDING = Gauge(
    "kube_queue_queue_pending_jobs",
    "Jobs waiting in each queue (for a parent queue: in its subtree).",
    ["queue"],
    registry=REGISTRY,
)
QUEUE_ADMITTED = Gauge(
    "kube_queue_queue_admitted_jobs",
    "Admitted, unfinished jobs counted in each queue (for a parent queue: in its subtree).",
    ["queue"],
    registry=REGISTRY,
)
QUEUE_USED = Gauge(
    "kube_queue_queue_used",
    "Quota in use per queue and resource (whole units: GPUs, cores, bytes).",
    ["queue", "resource"],
    registry=REGISTRY,
)
QUEUE_BORROWED = Gauge(
    "kube_queue_queue_borrowed",
    "Usage above the queue's guaranteed min, per resource (what a reclaim may take back).",
    ["queue", "resource"],
    registry=REGISTRY,
)
QUEUE_ADMISSION_WAIT = Histogram(
    "kube_queue_queue_admission_wait_seconds",
    "Time from job creation to admission, per queue.",
    ["queue"],
    buckets=(0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400),
    registry=REGISTRY,
)
PREEMPTIONS = Counter(
    "kube_queue_preemptions_total",
    "Admitted jobs suspended again to make room for another (reason: reclaim | priority).",
    ["kind", "reason"],
    registry=REGISTRY,
)
PODS_UNGATED = Counter(
    "kube_queue_pods_ungated_total",
    "Pods whose kube-queue scheduling gate was removed, by outcome: planned (pinned to room its "
    "job held), replanned (pinned to room found then), unpinned (left to the scheduler).",
    ["outcome"],
    registry=REGISTRY,
)
PODS_PINNED_AT_CREATION = Counter(
    "kube_queue_pods_pinned_at_creation_total",
    "Pods the leader's webhook pinned to their planned node as they were created (no gate, "
    "no PATCH); the others are gated and pinned by kube_queue_pods_ungated_total.",
    registry=REGISTRY,
)
PODS_UNPINNED_CREATED = Counter(
    "kube_queue_pods_created_ungated_total",
    "Pods of admitted jobs created without kube-queue's gate (webhook not installed or "
    "unreachable, or pinning off): they run where the scheduler puts them.",
    registry=REGISTRY,
)
REQUEUES = Counter(
    "kube_queue_requeues_total",
    "Admitted jobs suspended again because their pods did not all start in time, by the most "
    "common reason of their pods (Unschedulable, ErrImagePull, NotCreated, ...).",
    ["kind", "reason"],
    registry=REGISTRY,
)
LOOP_LATENESS = Histogram(
    "kube_queue_event_loop_lateness_seconds",
    "How late a 50 ms timer on the controller's event loop fired: the time a synchronous step "
    "(an admission cycle, a large watch batch) kept the loop from everything else, the "
    "webhook's answers and the Lease renewal included.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
    registry=REGISTRY,
)
