"""kubeflow.org/v1 TFJob: every replica type (Chief, PS, Worker, Evaluator, Master)."""

from __future__ import annotations

from kubequeue.identity import KindInfo
from kubequeue.kinds.kubeflow import ReplicaSpecKind

__all__ = ["TFJobKind"]


class TFJobKind(ReplicaSpecKind):
    info = KindInfo(name="tfjob", kind="TFJob", group="kubeflow.org", version="v1", plural="tfjobs")
    replica_field = "tfReplicaSpecs"
