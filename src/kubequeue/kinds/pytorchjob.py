"""kubeflow.org/v1 PyTorchJob: Master + Worker; an elastic job needs its minReplicas workers."""

from __future__ import annotations

from typing import Any

from kubequeue.kinds.common import dig
from kubequeue.kinds.kubeflow import ReplicaSpecKind
from kubequeue.kinds.protocol import KindInfo, Obj

__all__ = ["PyTorchJobKind"]


class PyTorchJobKind(ReplicaSpecKind):
    info = KindInfo(
        name="pytorchjob",
        kind="PyTorchJob",
        group="kubeflow.org",
        version="v1",
        plural="pytorchjobs",
    )
    replica_field = "pytorchReplicaSpecs"

    def replica_count(self, replica_type: str, replica_spec: dict[str, Any], obj: Obj) -> Any:
        # An elastic job starts once minReplicas workers run; holding capacity for maxReplicas
        # would keep it waiting for room it does not need to start.
        minimum = dig(obj, "spec", "elasticPolicy", "minReplicas")
        if replica_type.lower() == "worker" and isinstance(minimum, int):
            return minimum
        return replica_spec.get("replicas", 1)
