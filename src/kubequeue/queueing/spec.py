"""A Queue object (``kube-queue.io/v1alpha1``, cluster-scoped) read into a typed spec.

Queues are written by cluster admins, but the controller still treats every field as hostile:
a malformed Queue becomes a spec with ``problem`` set (its status says InvalidSpec and it takes
no jobs until fixed), never an exception, and never a silently different limit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from kubequeue.demand import DemandError, parse_resource_map
from kubequeue.quantity import format_milli
from kubequeue.queueing.selector import LabelSelector, SelectorError, parse_selector
from kubequeue.resources import Resources

__all__ = [
    "BEST_EFFORT_FIFO",
    "STRATEGIES",
    "STRICT_FIFO",
    "QueueSpec",
    "parse_queue",
]

BEST_EFFORT_FIFO = "BestEffortFIFO"
STRICT_FIFO = "StrictFIFO"
STRATEGIES = (BEST_EFFORT_FIFO, STRICT_FIFO)
_WEIGHT_MAX = 1000.0


@dataclass(frozen=True, slots=True)
class QueueSpec:
    name: str
    uid: str = ""
    parent: str | None = None
    selector: LabelSelector | None = None
    strategy: str = BEST_EFFORT_FIFO
    weight: float = 1.0
    min: Resources | None = None  # guaranteed; None: no resource is guaranteed
    max: Resources | None = None  # ceiling per named resource; unnamed: not limited here
    # spec.preemption: take back borrowed capacity from queues over their min when this one is
    # under its min (reclaimWithinTree: Any), preempt lower-priority jobs of this queue
    # (withinQueue: LowerPriority). Both off by default.
    reclaim: bool = False
    preempt_lower_priority: bool = False
    # spec.podsReadyTimeoutSeconds: overrides --pods-ready-timeout for this queue's jobs.
    pods_ready_timeout: float | None = None
    problem: str | None = None  # why the spec itself is invalid (InvalidSpec)

    @property
    def guaranteed(self) -> Resources:
        return self.min or {}

    @property
    def ceiling(self) -> Resources:
        return self.max or {}


def parse_queue(obj: Any) -> QueueSpec:
    """Read a Queue object; any invalid field yields a spec with ``problem`` set."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    name = meta.get("name") if isinstance(meta, dict) else None
    if not isinstance(name, str) or not name:
        return QueueSpec(name="", problem="metadata.name is missing")
    uid = meta.get("uid") if isinstance(meta, dict) else ""
    uid = uid if isinstance(uid, str) else ""
    try:
        return _parse(name, uid, obj.get("spec"))
    except (DemandError, SelectorError) as exc:
        return QueueSpec(name=name, uid=uid, problem=str(exc)[:300])


def _parse(name: str, uid: str, spec: Any) -> QueueSpec:
    if spec is None:
        spec = {}
    if not isinstance(spec, dict):
        raise DemandError("spec is not an object")
    parent = spec.get("parent")
    if parent is not None and (not isinstance(parent, str) or not parent):
        raise DemandError("spec.parent must be the name of another Queue")
    if parent == name:
        raise DemandError("spec.parent names the queue itself")
    strategy = spec.get("strategy", BEST_EFFORT_FIFO)
    if strategy not in STRATEGIES:
        raise DemandError(f"spec.strategy must be {' or '.join(STRATEGIES)}")
    weight = _weight(spec.get("weight", 1))
    quota = spec.get("quota")
    if quota is None:
        quota = {}
    if not isinstance(quota, dict):
        raise DemandError("spec.quota is not an object")
    minimum = _resources(quota.get("min"), "spec.quota.min")
    maximum = _resources(quota.get("max"), "spec.quota.max")
    for res, amount in (minimum or {}).items():
        ceiling = (maximum or {}).get(res)
        if ceiling is not None and amount > ceiling:
            # Named amounts as written (0 and pods included): ``describe`` leaves those out.
            raise DemandError(
                f"spec.quota.min {res}={format_milli(res, amount)} is above spec.quota.max "
                f"{res}={format_milli(res, ceiling)}"
            )
    preemption = spec.get("preemption")
    if preemption is None:
        preemption = {}
    if not isinstance(preemption, dict):
        raise DemandError("spec.preemption is not an object")
    reclaim = preemption.get("reclaimWithinTree", "Never")
    if reclaim not in ("Never", "Any"):
        raise DemandError("spec.preemption.reclaimWithinTree must be Never or Any")
    within = preemption.get("withinQueue", "Never")
    if within not in ("Never", "LowerPriority"):
        raise DemandError("spec.preemption.withinQueue must be Never or LowerPriority")
    timeout = spec.get("podsReadyTimeoutSeconds")
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int) or not 0 < timeout <= 604800
    ):
        raise DemandError("spec.podsReadyTimeoutSeconds must be whole seconds, 1 to 604800")
    return QueueSpec(
        name=name,
        uid=uid,
        parent=parent,
        selector=parse_selector(spec.get("namespaceSelector"), "spec.namespaceSelector"),
        strategy=str(strategy),
        weight=weight,
        min=minimum,
        max=maximum,
        reclaim=reclaim == "Any",
        preempt_lower_priority=within == "LowerPriority",
        pods_ready_timeout=float(timeout) if timeout is not None else None,
    )


def _weight(raw: Any) -> float:
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        raise DemandError("spec.weight must be a number")
    try:
        weight = float(raw)
    except ValueError:
        raise DemandError("spec.weight must be a number") from None
    if not (0.0 < weight <= _WEIGHT_MAX) or math.isnan(weight):
        raise DemandError(f"spec.weight must be above 0 and at most {_WEIGHT_MAX:g}")
    return weight


def _resources(raw: Any, where: str) -> Resources | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise DemandError(f"{where} is not a map of resource quantities")
    parsed = parse_resource_map(raw, where)
    # A resource named with 0 is named: "at most 0" is a real ceiling.
    for res in raw:
        if isinstance(res, str) and res not in parsed:
            parsed[res] = 0
    return parsed
