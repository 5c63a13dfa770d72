"""kubeflow.org/v1 PyTorchJob: Master + Worker replicas.

Elastic jobs count ``Worker.replicas``, not ``elasticPolicy.minReplicas``: training-operator
(v1.9, measured in e2e) creates ``replicas`` worker pods at start and uses minReplicas only as
the autoscaler's floor, so holding minReplicas would admit a job whose extra workers then sit
Pending on GPUs that are not there - the half-started job kube-queue exists to prevent.
"""

from __future__ import annotations

from kubequeue.identity import KindInfo
from kubequeue.kinds.kubeflow import ReplicaSpecKind

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
