"""MPIJob (mpi-operator kubeflow.org/v2beta1, and training-operator's kubeflow.org/v1):
Launcher + Worker replicas.

mpi-operator v2 runs the launcher as a batch Job owned by the MPIJob, so its pod is owned by
that Job, not by the MPIJob; both launcher and worker pods carry the training.kubeflow.org
job-name label, which is what ties them to the MPIJob here, and their role in
``training.kubeflow.org/job-role`` (launcher | worker; mpi-operator v0.7 defaultLabels), which
names the pod set. training-operator's v1 MPIJob uses ``replica-type`` instead.
"""

from __future__ import annotations

from kubequeue.identity import KindInfo
from kubequeue.kinds.kubeflow import REPLICA_TYPE_LABEL, ReplicaSpecKind
from kubequeue.kinds.protocol import PodOwnership
from kubequeue.objects import Pod

__all__ = ["MPIJobKind", "MPIJobV1Kind"]

_JOB_NAME_LABEL = "training.kubeflow.org/job-name"
_OPERATOR_LABEL = "training.kubeflow.org/operator-name"
_ROLE_LABEL = "training.kubeflow.org/job-role"


class MPIJobKind(ReplicaSpecKind):
    info = KindInfo(
        name="mpijob", kind="MPIJob", group="kubeflow.org", version="v2beta1", plural="mpijobs"
    )
    replica_field = "mpiReplicaSpecs"

    def pod_owner(self, pod: Pod) -> PodOwnership | None:
        labels = pod.metadata.labels
        role = labels.get(_ROLE_LABEL) or labels.get(REPLICA_TYPE_LABEL)
        owned = super().pod_owner(pod)
        if owned is not None:
            return owned[0], role.lower() if role else owned[1]
        name = labels.get(_JOB_NAME_LABEL)
        if name and labels.get(_OPERATOR_LABEL) == "mpi-operator":
            return name, role.lower() if role else None
        return None


class MPIJobV1Kind(MPIJobKind):
    info = KindInfo(
        name="mpijob-v1", kind="MPIJob", group="kubeflow.org", version="v1", plural="mpijobs"
    )
