"""Which job kinds exist and which are switched on.

Only native Jobs are queued by default (the product contract); every other kind is enabled
explicitly (Helm ``extension.<kind>.enable``, which becomes ``--kinds``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from kubequeue.kinds.job import JobKind
from kubequeue.kinds.mpijob import MPIJobKind, MPIJobV1Kind
from kubequeue.kinds.protocol import JobAdapter
from kubequeue.kinds.pytorchjob import PyTorchJobKind
from kubequeue.kinds.rayjob import RayJobKind
from kubequeue.kinds.spark import SparkApplicationKind
from kubequeue.kinds.tfjob import TFJobKind
from kubequeue.kinds.workflow import WorkflowKind

__all__ = ["DEFAULT_KINDS", "KINDS", "UnknownKind", "adapters_for"]

KINDS: dict[str, Callable[[], JobAdapter]] = {
    "job": JobKind,
    "tfjob": TFJobKind,
    "pytorchjob": PyTorchJobKind,
    "mpijob": MPIJobKind,
    "mpijob-v1": MPIJobV1Kind,
    "sparkapplication": SparkApplicationKind,
    "rayjob": RayJobKind,
    "workflow": WorkflowKind,
}
DEFAULT_KINDS = ("job",)


class UnknownKind(ValueError):
    pass


def adapters_for(names: Iterable[str]) -> list[JobAdapter]:
    """Adapters in pod-ownership order: operator kinds first, batch Job last, because operators
    (MPI launchers, Ray submitters) run some of their pods through child Jobs, and such a pod
    belongs to the operator's job, not to the child Job."""
    out: list[JobAdapter] = []
    for name in dict.fromkeys(names):
        factory = KINDS.get(name)
        if factory is None:
            raise UnknownKind(f"unknown job kind {name!r}; known kinds: {', '.join(sorted(KINDS))}")
        out.append(factory())
    kinds = [a.info.kind for a in out]
    if len(kinds) != len(set(kinds)):
        raise UnknownKind("enable one version of a kind only (mpijob or mpijob-v1)")
    out.sort(key=lambda a: a.info.kind == "Job")
    return out
