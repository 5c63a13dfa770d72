"""What users see of the queue, as plain data: one row per waiting job (``kube-queue status``),
one per admitted job (``kube-queue status --admitted``: where it runs), one row per Queue
(``kube-queue queues``), and the ``.status`` of each Queue object.

Built from the tracker's state on request (the HTTP endpoints, the Queue status writer); never on
the admission path.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from kubequeue.admission.cycle import AdmissionCycle
from kubequeue.admission.tracker import JobTracker
from kubequeue.demand import PodSet
from kubequeue.quantity import format_milli
from kubequeue.queueing.queue import QueuedJob
from kubequeue.queueing.spec import BEST_EFFORT_FIFO, STRICT_FIFO
from kubequeue.resources import GPU

__all__ = [
    "IMPLICIT_QUEUE_NAME",
    "admitted_rows",
    "job_rows",
    "nodes_text",
    "queue_rows",
    "queue_status",
    "topology_text",
    "why",
]

# How the implicit queue (no Queue object) is shown.
IMPLICIT_QUEUE_NAME = "default"


def _quantities(vector: Mapping[str, int]) -> dict[str, str]:
    return {res: format_milli(res, amount) for res, amount in sorted(vector.items()) if amount}


def demand_text(vector: Mapping[str, int]) -> str:
    """GPUs, CPU and memory in human units: ``4 GPU, 16 CPU, 64Gi``."""
    parts = []
    if vector.get(GPU):
        parts.append(f"{format_milli(GPU, vector[GPU])} GPU")
    if vector.get("cpu"):
        parts.append(f"{format_milli('cpu', vector['cpu'])} CPU")
    if vector.get("memory"):
        parts.append(format_milli("memory", vector["memory"]))
    return ", ".join(parts) or "-"


def why(job: QueuedJob, cycle: AdmissionCycle | None, head: QueuedJob | None) -> str:
    """The first thing that holds the job, in the order a user must deal with them."""
    if job.problem:
        return f"{job.problem_reason}: {job.problem}"
    if job.never_fits:
        return f"never fits: {job.never_fits}"
    if job.over_quota:
        return f"above its queue's limits: {job.over_quota}"
    if job.quota_reason:
        return job.quota_reason
    if head is not None and head is not job:
        queue = job.queue or IMPLICIT_QUEUE_NAME
        strict = cycle is not None and cycle.tracker.ledger.tree.strict(
            job.queue, cycle.strict_fifo
        )
        strategy = "StrictFIFO" if strict else "its head has waited past the starvation timeout"
        return f"behind {queue}'s head {head.key[1]}/{head.key[2]} ({strategy})"
    hold = cycle.hold if cycle is not None else None
    if hold is not None and hold.key == job.key:
        held = f"node(s) {hold.describe()} held for it (waited past the starvation timeout)"
        return f"{job.wait_reason}; {held}" if job.wait_reason else held
    return job.wait_reason or "not evaluated yet"


def topology_text(pod_sets: Sequence[PodSet]) -> str:
    """What the job asks of topology: ``example.com/rack (required)`` when all its pod sets ask
    the same (``, whole job`` when they go in one domain together: topology-scope job), else
    per pod set that asks (``workers: example.com/rack (required), ps: ...``); ``-`` when none
    asks."""
    asking = [ps for ps in pod_sets if ps.topology is not None]
    if not asking:
        return "-"

    def one(ps: PodSet) -> str:
        t = ps.topology
        assert t is not None
        return f"{t.level} ({'required' if t.required else 'preferred'})"

    asks = {one(ps) for ps in asking}
    if len(asks) == 1 and len(asking) == len(pod_sets):
        whole = len(pod_sets) > 1 and any(t.whole_job for ps in asking if (t := ps.topology))
        return asks.pop() + (", whole job" if whole else "")
    return ", ".join(f"{ps.name}: {one(ps)}" for ps in asking)


def nodes_text(nodes: Sequence[str], shown: int = 2) -> str:
    """``n1, n2 (+3 more)``; ``-`` for none."""
    if not nodes:
        return "-"
    more = f" (+{len(nodes) - shown} more)" if len(nodes) > shown else ""
    return ", ".join(nodes[:shown]) + more


def admitted_rows(
    tracker: JobTracker,
    *,
    queue: str | None = None,
    namespace: str | None = None,
    limit: int = 1000,
) -> list[dict[str, Any]]:
    """Running jobs kube-queue admitted, by queue and name: the topology domain(s) their
    admission recorded and the nodes they hold or run on (bound pods and room held for the
    rest)."""
    rows: list[dict[str, Any]] = []
    for job in sorted(tracker.admitted.values(), key=lambda j: (j.queue, j.key)):
        shown_queue = job.queue or IMPLICIT_QUEUE_NAME
        if queue is not None and shown_queue != queue:
            continue
        kind, ns, name = job.key
        if namespace is not None and ns != namespace:
            continue
        nodes = sorted(n for n in tracker.footprint(job.key) if n)
        rows.append(
            {
                "queue": shown_queue,
                "kind": kind,
                "namespace": ns,
                "name": name,
                "priority": job.priority,
                "demand": demand_text(job.demand),
                "domain": job.domain or "-",
                "nodes": nodes,
                "nodes_text": nodes_text(nodes),
            }
        )
        if len(rows) >= limit:
            break
    return rows


def job_rows(
    tracker: JobTracker,
    cycle: AdmissionCycle | None = None,
    *,
    queue: str | None = None,
    namespace: str | None = None,
    limit: int = 1000,
    now: float | None = None,
) -> list[dict[str, Any]]:
    """Waiting jobs, queue by queue in line order (position is within the job's queue)."""
    now = time.time() if now is None else now
    blocked = cycle.blocked if cycle is not None else {}
    rows: list[dict[str, Any]] = []
    lines = tracker.queue.lines()
    if queue is not None:
        implicit = queue == IMPLICIT_QUEUE_NAME and queue not in tracker.ledger.tree.nodes
        wanted = "" if implicit else queue
        lines = [line for line in lines if line == wanted]
    for line in lines:
        head = blocked.get(line)
        passed_head = False
        for position, job in enumerate(tracker.queue.ordered(line)):
            shown_head = head if passed_head else None
            if job is head:
                passed_head = True
            if namespace is not None and job.key[1] != namespace:
                continue
            kind, ns, name = job.key
            rows.append(
                {
                    "position": position,
                    "queue": line or IMPLICIT_QUEUE_NAME,
                    "kind": kind,
                    "namespace": ns,
                    "name": name,
                    "priority": job.priority,
                    "demand": demand_text(job.demand),
                    "demand_raw": _quantities(job.demand),
                    "age_s": max(0, round(now - job.created_epoch)) if job.created else None,
                    "topology": topology_text(job.pod_sets),
                    "why": why(job, cycle, shown_head),
                }
            )
            if len(rows) >= limit:
                return rows
    return rows


def _ready(tracker: JobTracker, name: str) -> tuple[bool, str, str]:
    node = tracker.ledger.tree.nodes[name]
    if node.problem is not None:
        return False, "InvalidSpec", node.problem
    if node.unusable is not None:
        return False, "ParentInvalid", node.unusable
    if node.ignored is not None:
        return True, "SpecIgnored", f"the queue admits jobs, but {node.ignored}"
    return True, "Ready", "the queue admits jobs"


def queue_rows(tracker: JobTracker, strict_default: bool = False) -> list[dict[str, Any]]:
    """One row per Queue (and the implicit queue when jobs wait in it; its strategy is the
    controller's ``--strict-fifo``)."""
    ledger = tracker.ledger
    pending = tracker.queue.depth_by_queue()
    rows = []
    for name, node in sorted(ledger.tree.nodes.items()):
        ready, reason, message = _ready(tracker, name)
        waiting = sum(pending.get(leaf, 0) for leaf in node.leaves)
        admitted = sum(ledger.admitted(leaf) for leaf in node.leaves)
        rows.append(
            {
                "name": name,
                "parent": node.spec.parent,
                "strategy": node.spec.strategy,
                "weight": node.spec.weight,
                "min": _quantities(node.spec.guaranteed),
                "max": _quantities(node.spec.ceiling),
                "used": _quantities(ledger.used(name)),
                "borrowed": _quantities(ledger.borrowed(name)),
                "used_milli": ledger.used(name),
                "borrowed_milli": ledger.borrowed(name),
                "pending": waiting,
                "admitted": admitted,
                "ready": ready,
                "reason": reason,
                "message": message,
            }
        )
    if pending.get(""):
        rows.append(
            {
                "name": IMPLICIT_QUEUE_NAME,
                "parent": None,
                "strategy": STRICT_FIFO if strict_default else BEST_EFFORT_FIFO,
                "weight": 1.0,
                "min": {},
                "max": {},
                "used": {},
                "borrowed": {},
                "used_milli": {},
                "borrowed_milli": {},
                "pending": pending[""],
                "admitted": None,
                "ready": True,
                "reason": "Implicit",
                "message": "jobs that name no queue and match no Queue's namespaceSelector",
            }
        )
    return rows


def _gpu_summary(row: Mapping[str, Any]) -> str:
    def amount(vector: Mapping[str, str]) -> str:
        return vector.get(GPU, "0")

    maximum = row["max"].get(GPU, "-")
    return f"{amount(row['used'])}/{amount(row['min'])}/{maximum}"


def queue_status(row: Mapping[str, Any]) -> dict[str, Any]:
    """The ``.status`` of a Queue object from its row (conditions without timestamps: the
    writer keeps lastTransitionTime from the object when the condition did not change)."""
    return {
        "pending": row["pending"],
        "admitted": row["admitted"],
        "used": dict(row["used"]),
        "borrowed": dict(row["borrowed"]),
        "gpu": _gpu_summary(row),
        "conditions": [
            {
                "type": "Ready",
                "status": "True" if row["ready"] else "False",
                "reason": row["reason"],
                "message": row["message"][:1024],
            }
        ],
    }
