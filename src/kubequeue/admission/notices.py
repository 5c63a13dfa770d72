"""What the admission cycle wants users to see, as data; kube/events.py turns it into Events."""

from __future__ import annotations

from dataclasses import dataclass

from kubequeue.identity import JobKey

__all__ = ["Notice"]


@dataclass(frozen=True, slots=True)
class Notice:
    key: JobKey
    uid: str
    type: str  # "Normal" or "Warning"
    reason: str  # CamelCase, stable: Queued, Admitted, NeverFits, InvalidJob, ...
    message: str
