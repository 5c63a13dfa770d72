"""Glue between informers and state: decoded objects in, cache / tracker updates out.

Each handler is a few lines on purpose: the decisions live in the tracker and the cache, which
are pure and unit-tested; this file only routes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from kubequeue.admission.tracker import JobTracker
from kubequeue.capacity.cache import CapacityCache
from kubequeue.capacity.pins import Pins
from kubequeue.identity import PodOwner
from kubequeue.kinds.protocol import HasPodAliases, JobAdapter
from kubequeue.labels import PLACEMENT_LABEL
from kubequeue.objects import Namespace, Node, Pod
from kubequeue.queueing.spec import QueueSpec, parse_queue

__all__ = [
    "JobHandler",
    "NamespaceHandler",
    "NodeHandler",
    "PodHandler",
    "PriorityClassHandler",
    "QueueHandler",
    "UnboundPodHandler",
    "pod_owner_finder",
]


class NodeHandler:
    def __init__(self, cache: CapacityCache) -> None:
        self.cache = cache

    def upsert(self, obj: Node) -> None:
        self.cache.upsert_node(obj)

    def delete(self, key: str) -> None:
        self.cache.delete_node(key)

    def synced(self) -> None:
        pass


def pod_owner_finder(adapters: Sequence[JobAdapter]) -> Callable[[Pod], PodOwner | None]:
    """The pod's *raw* owner: the job name its labels and owner references give, as the first
    adapter that recognises it says. Aliases are not followed here (the tracker follows them when
    it counts), so what the cache records never depends on the order objects arrived in."""
    alias_kinds = frozenset(
        kind for a in adapters if isinstance(a, HasPodAliases) for kind in a.alias_kinds
    )

    def find(pod: Pod) -> PodOwner | None:
        namespace = pod.metadata.namespace
        for adapter in adapters:
            found = adapter.pod_owner(pod)
            if found is not None:
                name, pod_set = found
                return (adapter.info.kind, namespace, name), pod_set
        # A pod of a child object that no enabled adapter knows (e.g. KubeRay's submitter Job
        # when batch Jobs are not queued) may be an alias of a queued job: keep its owner.
        if alias_kinds:
            for ref in pod.metadata.ownerReferences:
                if ref.controller and ref.kind in alias_kinds:
                    return (ref.kind, namespace, ref.name), None
        return None

    return find


class PodHandler:
    def __init__(
        self,
        cache: CapacityCache,
        tracker: JobTracker,
        owner_of: Callable[[Pod], PodOwner | None],
        on_unpinned: Callable[[], None] | None = None,
        pins: Pins | None = None,
    ) -> None:
        self.cache = cache
        self.tracker = tracker
        self.owner_of = owner_of
        # Told of every bound pod: a pinned pod no longer counts as pinned-and-unbound from the
        # moment its bound event arrives (it may come before its unbound watch's DELETED).
        self.pins = pins
        # Pinning on: told of each pod of an admitted job that binds without having passed the
        # webhook (no placement label): the webhook is not installed or was not reachable.
        self.on_unpinned = on_unpinned

    def upsert(self, obj: Pod) -> None:
        owner = self.owner_of(obj)
        if (
            self.on_unpinned is not None
            and owner is not None
            and PLACEMENT_LABEL not in obj.metadata.labels
            and not self.cache.is_bound(obj.metadata.uid)
            and self.tracker.is_admitted(self.tracker.resolve_pod(owner)[0])
        ):
            self.on_unpinned()
        if self.pins is not None:
            self.pins.bound(obj, owner)
        self.tracker.pod_changed(self.cache.upsert_pod(obj, owner))

    def delete(self, key: str) -> None:
        self.tracker.pod_changed(self.cache.delete_pod(key))

    def synced(self) -> None:
        pass


class UnboundPodHandler:
    """Pods the webhook gated, not bound yet (the watch selects on its label): the gated ones
    wait for the pinner, the pinned ones count against their job's held room until they bind
    (capacity/pins.py)."""

    def __init__(
        self,
        pins: Pins,
        owner_of: Callable[[Pod], PodOwner | None],
        on_gated: Callable[[], None],
    ) -> None:
        self.pins = pins
        self.owner_of = owner_of
        self.on_gated = on_gated

    def upsert(self, obj: Pod) -> None:
        if self.pins.upsert(obj, self.owner_of(obj)):
            self.on_gated()

    def delete(self, key: str) -> None:
        self.pins.delete(key)

    def synced(self) -> None:
        pass


class JobHandler:
    def __init__(self, tracker: JobTracker, adapter: JobAdapter) -> None:
        self.tracker = tracker
        self.adapter = adapter

    def upsert(self, obj: dict[str, Any]) -> None:
        self.tracker.observe(self.adapter, obj)

    def delete(self, key: str) -> None:
        namespace, _, name = key.partition("/")
        self.tracker.forget((self.adapter.info.kind, namespace, name))

    def synced(self) -> None:
        pass


class PriorityClassHandler:
    """PriorityClass name -> value (and the globalDefault), pushed to the tracker on change."""

    def __init__(self, tracker: JobTracker) -> None:
        self.tracker = tracker
        self.values: dict[str, int] = {}
        self.defaults: dict[str, int] = {}
        self._listed = False

    def upsert(self, obj: dict[str, Any]) -> None:
        name = str((obj.get("metadata") or {}).get("name", ""))
        value = obj.get("value", 0)
        self.values[name] = value if isinstance(value, int) else 0
        if obj.get("globalDefault") is True:
            self.defaults[name] = self.values[name]
        else:
            self.defaults.pop(name, None)
        self._push()

    def delete(self, key: str) -> None:
        name = key.rpartition("/")[2]
        self.values.pop(name, None)
        self.defaults.pop(name, None)
        self._push()

    def synced(self) -> None:
        self._listed = True
        self._push()

    def _push(self) -> None:
        if self._listed:
            default = max(self.defaults.values()) if self.defaults else 0
            self.tracker.set_priority_classes(self.values, default)


class NamespaceHandler:
    """Namespace labels, for Queue namespaceSelectors."""

    def __init__(self, tracker: JobTracker) -> None:
        self.tracker = tracker

    def upsert(self, obj: Namespace) -> None:
        self.tracker.set_namespace(obj.metadata.name, obj.metadata.labels)

    def delete(self, key: str) -> None:
        self.tracker.set_namespace(key, None)

    def synced(self) -> None:
        pass


class QueueHandler:
    """Queue objects -> the tracker's queue tree (rebuilt on every change: queues are few), and
    each Queue's last observed object, for the status writer."""

    def __init__(self, tracker: JobTracker) -> None:
        self.tracker = tracker
        self.specs: dict[str, QueueSpec] = {}
        self.observed: dict[str, dict[str, Any]] = {}
        self._listed = False

    def upsert(self, obj: dict[str, Any]) -> None:
        spec = parse_queue(obj)
        if not spec.name:
            return
        self.observed[spec.name] = obj
        if self.specs.get(spec.name) == spec:
            return  # a status write or another change that decides nothing
        self.specs[spec.name] = spec
        self._push()

    def delete(self, key: str) -> None:
        name = key.rpartition("/")[2]
        self.observed.pop(name, None)
        if self.specs.pop(name, None) is not None:
            self._push()

    def synced(self) -> None:
        self._listed = True
        self._push()

    def _push(self) -> None:
        if self._listed:
            self.tracker.set_queues(self.specs.values())
