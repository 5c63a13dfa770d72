"""Names for things every layer talks about: a job, the pod set of a job, a job kind.

They live at the bottom of the import graph (no imports of our own) so that the pure decision
code, the adapters and the HTTP layer can all share them without depending on one another.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["JobKey", "KindInfo", "PodOwner"]

JobKey = tuple[str, str, str]  # (kind, namespace, name)
PodOwner = tuple[JobKey, str | None]  # (job, pod set name if the pod's labels say it)


@dataclass(frozen=True, slots=True)
class KindInfo:
    """Where a kind lives in the API and what users call it."""

    name: str  # short name used in flags, metrics and Helm values: "job", "tfjob", ...
    kind: str  # the API kind: "Job", "TFJob", ...
    group: str  # "" for the core group
    version: str
    plural: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def collection_path(self, namespace: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if namespace:
            return f"{base}/namespaces/{namespace}/{self.plural}"
        return f"{base}/{self.plural}"

    def object_path(self, namespace: str, name: str) -> str:
        return f"{self.collection_path(namespace)}/{name}"
