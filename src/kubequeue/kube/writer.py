"""The writes kube-queue makes to jobs, each conditioned on what its decision read.

The preconditions are what make "never admit twice" hold across restarts and replicas: if the
job changed after we read it (another replica admitted it, a user edited it), the server refuses
and we re-decide from the newer object instead of acting on a stale one. They also make a write
whose answer was lost safe to repeat: if the first one was applied, the repeat is refused. The
admission is a JSON patch whose tests hold exactly what the decision read (precondition.py), so
the job's own controller writing its status does not make it fail; stop and mark carry the
resourceVersion they were judged on.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import Any

from kubequeue.identity import KindInfo
from kubequeue.kube.client import ApiError, KubeClient
from kubequeue.labels import ADMITTED_AT, PREEMPTED_BY, TOPOLOGY_DOMAIN
from kubequeue.precondition import Guard, JsonPatch, annotation_ops, guard_tests

__all__ = ["admission_annotations", "admission_ops", "admit", "mark", "read", "stop"]


def _deep_merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """Merge ``extra`` into ``base``, copying every mapping it takes from ``extra``: the patches
    merged here are shared between jobs (one per kind and shape, see admission/tracker.py), so a
    body must never alias, and then modify, one of them."""
    for key, value in extra.items():
        if isinstance(value, Mapping):
            into = base.get(key)
            base[key] = _deep_merge(into if isinstance(into, dict) else {}, value)
        else:
            base[key] = value
    return base


def admission_annotations(extra: Mapping[str, str], now: str) -> dict[str, str | None]:
    """The annotations an admission writes: admitted-at, the kind-independent ``extra`` (the
    queue it was admitted into, the topology domain it was placed in), and ``preempted-by``
    removed (None): a job admitted again is no longer stopped for anyone, and a running job must
    not say it was preempted. In this very write, so no moment exists where the job runs with
    the stale mark. The same for a topology domain left from an earlier admission (a user
    suspended the job): removed unless ``extra`` names this admission's."""
    return {ADMITTED_AT: now, PREEMPTED_BY: None, TOPOLOGY_DOMAIN: None, **extra}


def admission_ops(
    guard: Guard, kind_ops: Sequence[Mapping[str, Any]], annotations: Mapping[str, str | None]
) -> JsonPatch:
    """The admission write: the guard's tests, then the kind's change, then our annotations."""
    changes = [dict(op) for op in kind_ops]
    return [*guard_tests(guard), *changes, *annotation_ops(guard, annotations, changes)]


async def admit(
    client: KubeClient,
    info: KindInfo,
    namespace: str,
    name: str,
    guard: Guard,
    kind_ops: Sequence[Mapping[str, Any]],
    extra: Mapping[str, str],
) -> dict[str, Any]:
    """Apply the kind's admission change, conditioned on ``guard`` (see precondition.py);
    returns the updated object, raises ApiError (``conflict``: the job changed meanwhile)."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    ops = admission_ops(guard, kind_ops, admission_annotations(extra, now))
    return await client.json_patch(info.object_path(namespace, name), ops)


async def stop(
    client: KubeClient,
    info: KindInfo,
    namespace: str,
    name: str,
    resource_version: str,
    patch: Mapping[str, Any],
    annotations: Mapping[str, str | None],
) -> dict[str, Any]:
    """Suspend a running job again (preemption, requeue): the kind's suspend patch plus our
    annotations (a None value removes one: the job is no longer admitted, nor placed in a
    topology domain), guarded by the resourceVersion it was judged on."""
    body = _deep_merge({}, patch)
    body = _deep_merge(
        body,
        {
            "metadata": {
                "resourceVersion": resource_version,
                "annotations": {ADMITTED_AT: None, TOPOLOGY_DOMAIN: None, **annotations},
            }
        },
    )
    return await client.merge_patch(info.object_path(namespace, name), body)


async def mark(
    client: KubeClient,
    info: KindInfo,
    namespace: str,
    name: str,
    resource_version: str,
    annotations: Mapping[str, str | None],
) -> dict[str, Any]:
    """Set (or, with None, remove) annotations of ours, guarded by the resourceVersion."""
    body = {"metadata": {"resourceVersion": resource_version, "annotations": dict(annotations)}}
    return await client.merge_patch(info.object_path(namespace, name), body)


async def read(
    client: KubeClient, info: KindInfo, namespace: str, name: str
) -> dict[str, Any] | None:
    """The job as the server has it now, or None if it does not exist.

    A list narrowed to one name rather than a GET: kube-queue is granted list, watch and patch
    on job kinds, not get. A list without a resourceVersion is a consistent read, like a GET.
    """
    try:
        found = await client.get(
            info.collection_path(namespace), [("fieldSelector", f"metadata.name={name}")]
        )
    except ApiError as exc:
        if exc.not_found:  # the kind itself is gone (its CRD was removed)
            return None
        raise
    items = found.get("items") or []
    return dict(items[0]) if items else None
