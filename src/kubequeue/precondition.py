"""The admission write's precondition: what the decision read from the job, as JSON-patch tests.

The write used to carry the resourceVersion of the object the decision was made on. That holds
too much: the job's own controller writes a suspended job's status (the Job controller adds its
``Suspended`` condition, counts, ...), each write moves the resourceVersion, and an admission
made a moment before it came back 409 and was decided again. In the backlog benchmark a third of
1,000 admissions went round twice and the rate fell from 218/s to 72/s.

A decision depends on less than the whole object: which object (``uid``), its spec
(``metadata.generation``, which moves with every spec change and never with status or
metadata), the labels that choose its queue or opt it out, the annotations kube-queue reads
(every ``kube-queue.io/``/``kube-queue/`` key it has, the opt-out and the suspend annotation),
and that it is not admitted already. The write tests exactly those (RFC 6902 ``test`` ops, in
the same PATCH as the change, so the server checks and applies them atomically) and nothing
else: a status write no longer fails it, a change that could alter the decision still does.

"Never admit twice" rests on the ``admitted-at`` test: the write sets it, so a second write
conditioned on the same guard (a retry whose first attempt was applied after all, another
replica's) fails its tests. And a guard never matches again once it failed on ``generation``
(which only grows).

The API server answers a failed test with 422 and a fixed message (kube/client.py turns that
into a conflict, like a stale resourceVersion's 409).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from kubequeue.labels import ADMITTED_AT, GAVE_UP, IGNORE, QUEUE_LABEL, SUSPEND_ANNOTATION

__all__ = [
    "NO_GUARD",
    "Guard",
    "JsonPatch",
    "annotation_ops",
    "escape",
    "guard_of",
    "guard_tests",
    "merge_ops",
]

JsonPatch = list[dict[str, Any]]

# Keys tested whether present or not (absent: tested absent): adding one can change the decision.
_LABELS = (QUEUE_LABEL, IGNORE)
_ANNOTATIONS = (ADMITTED_AT, IGNORE, SUSPEND_ANNOTATION, GAVE_UP)
# Annotations tested when present, at their exact value: kube-queue's own and the ones it reads.
_OURS = ("kube-queue.io/", "kube-queue/")

Tested = tuple[tuple[str, str | None], ...]


class Guard(msgspec.Struct, frozen=True, gc=False):
    """What a decision about one job read, to be tested by the write that acts on it.

    ``labels``/``annotations`` are None when the object has no such map at all (then the map's
    absence is what is tested: a test on a key under a missing map fails on the server)."""

    uid: str
    generation: int | None
    labels: Tested | None
    annotations: Tested | None


# For jobs not made from an object (tests): tests the uid "" only, which no real object has.
NO_GUARD = Guard(uid="", generation=None, labels=(), annotations=())


def escape(key: str) -> str:
    """A map key as one JSON-pointer step (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


def _tested(found: object, always: tuple[str, ...], prefixes: tuple[str, ...]) -> Tested | None:
    if not isinstance(found, dict):
        return None
    out: dict[str, str | None] = {}
    for key in always:
        value = found.get(key)
        out[key] = value if isinstance(value, str) else None
    for key, value in found.items():
        if isinstance(key, str) and key.startswith(prefixes) and isinstance(value, str):
            out[key] = value
    return tuple(sorted(out.items()))


def guard_of(obj: Mapping[str, Any]) -> Guard:
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    uid = meta.get("uid")
    generation = meta.get("generation")
    return Guard(
        uid=uid if isinstance(uid, str) else "",
        generation=generation if type(generation) is int else None,
        labels=_tested(meta.get("labels"), _LABELS, ()),
        annotations=_tested(meta.get("annotations"), _ANNOTATIONS, _OURS),
    )


def _map_tests(where: str, tested: Tested | None) -> JsonPatch:
    if tested is None:
        return [{"op": "test", "path": where, "value": None}]
    # A missing key tests equal to null (the API server's json-patch library says so, and the
    # unit fake follows it); a key holding a non-string is not what we read: it was skipped.
    return [{"op": "test", "path": f"{where}/{escape(k)}", "value": v} for k, v in tested]


def guard_tests(guard: Guard) -> JsonPatch:
    ops: JsonPatch = [{"op": "test", "path": "/metadata/uid", "value": guard.uid}]
    if guard.generation is not None:
        ops.append({"op": "test", "path": "/metadata/generation", "value": guard.generation})
    ops += _map_tests("/metadata/labels", guard.labels)
    ops += _map_tests("/metadata/annotations", guard.annotations)
    return ops


def merge_ops(obj: Mapping[str, Any], patch: Mapping[str, Any], at: str = "") -> JsonPatch:
    """The JSON-patch ops that do what merge-patching ``obj`` with ``patch`` does (RFC 7386):
    a mapping merges into a mapping, None removes a key that is there, anything else is set.
    Parents the object lacks are created whole, so every op applies to ``obj`` as it is."""
    ops: JsonPatch = []
    for key, value in patch.items():
        path = f"{at}/{escape(key)}"
        here = obj.get(key)
        if value is None:
            if key in obj:
                ops.append({"op": "remove", "path": path})
        elif isinstance(value, Mapping):
            if isinstance(here, dict):
                ops += merge_ops(here, value, path)
            else:
                ops.append({"op": "add", "path": path, "value": _without_nulls(value)})
        else:
            ops.append({"op": "add", "path": path, "value": value})
    return ops


def _without_nulls(value: Mapping[str, Any]) -> dict[str, Any]:
    return {
        k: _without_nulls(v) if isinstance(v, Mapping) else v
        for k, v in value.items()
        if v is not None
    }


def annotation_ops(guard: Guard, changes: Mapping[str, str | None], after: JsonPatch) -> JsonPatch:
    """Set (or, with None, remove) annotations on the object the guard was read from, after
    the ops ``after`` (which may have created the map). Only keys the guard tested are removed
    (the tests say they are there); other None values are no-ops."""
    created = any(op["path"] == "/metadata/annotations" for op in after)
    if guard.annotations is None and not created:
        present = {k: v for k, v in changes.items() if v is not None}
        return [{"op": "add", "path": "/metadata/annotations", "value": present}] if present else []
    known = dict(guard.annotations or ())
    ops: JsonPatch = []
    for key, value in changes.items():
        path = f"/metadata/annotations/{escape(key)}"
        if value is not None:
            ops.append({"op": "add", "path": path, "value": value})
        elif known.get(key) is not None:
            ops.append({"op": "remove", "path": path})
    return ops
