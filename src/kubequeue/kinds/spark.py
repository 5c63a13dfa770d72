"""sparkoperator.k8s.io/v1beta2 SparkApplication: one driver + N executors.

Held by the ``scheduling.x-k8s.io/suspend: "true"`` annotation (and ``spec.suspend`` on operator
versions that have it). Demand follows how the Spark operator sizes its pods:
cpu = coreRequest, else cores; memory = memory + memoryOverhead, where the overhead defaults to
max(384Mi, factor x memory) with factor 0.1 for JVM apps and 0.4 for Python/R; GPUs from
``gpu: {name, quantity}``; executors = instances, or the dynamic-allocation floor
(max(minExecutors, initialExecutors)) when dynamic allocation is on. Spark memory strings are JVM
style: "512m" is 512 MiB, a bare number is MiB.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from typing import Any

import msgspec

from kubequeue.demand import DemandError, PodSet, parse_resource_map
from kubequeue.identity import KindInfo
from kubequeue.kinds.common import (
    annotations_of,
    dig,
    labels_of,
    opted_out,
    text_at,
)
from kubequeue.kinds.protocol import Obj, PodOwnership
from kubequeue.labels import SUSPEND_ANNOTATION
from kubequeue.objects import Pod, Toleration
from kubequeue.resources import PODS, intern
from kubequeue.scheduling import NodeConstraints

__all__ = ["SparkApplicationKind", "parse_jvm_memory"]

_MIB = 2**20
# ASCII digits only, and bounded: the text comes from any user who may create the object.
_JVM_MEMORY = re.compile(
    r"^\s*([0-9]{1,18}(?:\.[0-9]{1,9})?)\s*([kmgtp]?)b?\s*$", re.IGNORECASE | re.ASCII
)
# memoryOverheadFactor: Spark's default is 0.1 (0.4 for Python/R); anything outside [0, 100] is a
# typo, and NaN/inf would make the arithmetic below raise instead of judging the job.
_FACTOR_MAX = 100.0
_JVM_SCALE = {"": _MIB, "k": 2**10, "m": _MIB, "g": 2**30, "t": 2**40, "p": 2**50}
_FINISHED = frozenset({"COMPLETED", "FAILED", "SUBMISSION_FAILED"})
_APP_LABEL = "sparkoperator.k8s.io/app-name"
_ROLE_LABEL = "spark-role"
_KUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def parse_jvm_memory(text: Any, where: str) -> int:
    """JVM/Spark memory ("512m", "2g", "1024") -> bytes (exact: no float rounding)."""
    if isinstance(text, int) and not isinstance(text, bool) and 0 <= text < 2**40:
        return text * _MIB
    match = _JVM_MEMORY.match(text) if isinstance(text, str) else None
    if match is None:
        shown = repr(text) if isinstance(text, str | int) and len(str(text)) <= 40 else "this"
        raise DemandError(f"{where}: {shown} is not a Spark memory size (examples: 512m, 4g)")
    return int(Decimal(match[1]) * _JVM_SCALE[match[2].lower()])


def _mapping(value: Any, where: str) -> dict[str, Any]:
    """A sub-object of the spec that must be a map (absent reads as empty)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise DemandError(f"{where} is not an object")
    return value


class SparkApplicationKind:
    info = KindInfo(
        name="sparkapplication",
        kind="SparkApplication",
        group="sparkoperator.k8s.io",
        version="v1beta2",
        plural="sparkapplications",
    )

    def is_suspended(self, obj: Obj) -> bool:
        return (
            annotations_of(obj).get(SUSPEND_ANNOTATION) == "true"
            or dig(obj, "spec", "suspend") is True
        )

    def is_finished(self, obj: Obj) -> bool:
        return text_at(obj, "status", "applicationState", "state") in _FINISHED

    def pod_sets(self, obj: Obj) -> list[PodSet]:
        spec = dig(obj, "spec")
        if not isinstance(spec, dict):
            raise DemandError("spec is missing")
        factor = self._overhead_factor(spec)
        executors = _mapping(spec.get("executor"), "spec.executor")
        count: Any = executors.get("instances", 1)
        dynamic = _mapping(spec.get("dynamicAllocation"), "spec.dynamicAllocation")
        if dynamic.get("enabled") is True:
            floor = [
                v
                for v in (dynamic.get("minExecutors"), dynamic.get("initialExecutors"))
                if isinstance(v, int)
            ]
            count = max(floor) if floor else 0
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise DemandError("spec.executor.instances is not a non-negative integer")
        return [
            self._role("driver", 1, _mapping(spec.get("driver"), "spec.driver"), spec, factor),
            self._role("executor", count, executors, spec, factor),
        ]

    def _overhead_factor(self, spec: dict[str, Any]) -> float:
        raw = spec.get("memoryOverheadFactor")
        if raw is not None:
            try:
                factor = float(raw)
            except (TypeError, ValueError, OverflowError):
                factor = math.nan
            if not 0.0 <= factor <= _FACTOR_MAX:  # False for NaN too
                raise DemandError(
                    f"spec.memoryOverheadFactor is not a number between 0 and {_FACTOR_MAX:g}"
                )
            return factor
        return 0.4 if str(spec.get("type", "")).lower() in ("python", "r") else 0.1

    def _role(
        self, name: str, count: int, role: dict[str, Any], spec: dict[str, Any], factor: float
    ) -> PodSet:
        where = f"spec.{name}"
        cpu: Any = role.get("coreRequest") or role.get("cores", 1)
        memory = parse_jvm_memory(role.get("memory", "1g"), f"{where}.memory")
        if role.get("memoryOverhead") is not None:
            overhead = parse_jvm_memory(role["memoryOverhead"], f"{where}.memoryOverhead")
        else:
            overhead = max(384 * _MIB, int(memory * factor))
        raw: dict[str, Any] = {"cpu": cpu, "memory": str(memory + overhead)}
        gpu = role.get("gpu")
        if isinstance(gpu, dict) and gpu.get("name"):
            raw[str(gpu["name"])] = gpu.get("quantity", 1)
        request = parse_resource_map(raw, where)
        request[PODS] = 1000
        selector = {
            **_mapping(spec.get("nodeSelector"), "spec.nodeSelector"),
            **_mapping(role.get("nodeSelector"), f"{where}.nodeSelector"),
        }
        if not all(isinstance(v, str) for v in selector.values()):
            raise DemandError(f"{where}: nodeSelector values must be strings")
        try:
            tolerations = tuple(
                msgspec.convert(t, Toleration, strict=True) for t in role.get("tolerations") or ()
            )
        except (msgspec.ValidationError, TypeError):
            raise DemandError(f"{where}.tolerations is not a list of tolerations") from None
        constraints = NodeConstraints(
            node_selector=tuple(sorted(selector.items())), tolerations=tolerations
        )
        return PodSet(name, count, intern(request), constraints)

    def priority_class_name(self, obj: Obj) -> str | None:
        found = dig(obj, "spec", "batchSchedulerOptions", "priorityClassName")
        return found if isinstance(found, str) and found else None

    def admission_patch(self, obj: Obj) -> dict[str, Any]:
        patch: dict[str, Any] = {}
        if SUSPEND_ANNOTATION in annotations_of(obj):
            patch["metadata"] = {"annotations": {SUSPEND_ANNOTATION: "false"}}
        if dig(obj, "spec", "suspend") is True:
            patch["spec"] = {"suspend": False}
        return patch

    def pod_owner(self, pod: Pod) -> PodOwnership | None:
        labels = pod.metadata.labels
        name = labels.get(_APP_LABEL)
        if not name:
            return None
        return name, labels.get(_ROLE_LABEL)

    def skip_reason(self, obj: Obj) -> str | None:
        if _KUEUE_LABEL in labels_of(obj):
            return f"label {_KUEUE_LABEL} is set: Kueue manages this job"
        return opted_out(obj)
