"""Small readers shared by the adapters: annotations, conditions, owner checks, opt-out."""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec

from kubequeue.kinds.protocol import Obj
from kubequeue.labels import IGNORE
from kubequeue.objects import Pod

__all__ = [
    "annotations_of",
    "controller_owner",
    "dig",
    "has_true_condition",
    "labels_of",
    "opted_out",
    "pod_controller_name",
    "spec_hash",
    "text_at",
]


def dig(obj: Any, *path: str) -> Any:
    """obj[path[0]][path[1]]..., or None when any step is missing or not a mapping."""
    for step in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(step)
    return obj


def text_at(obj: Any, *path: str) -> str:
    """The string at ``path``, or "" when it is missing or not a string.

    Status fields are written by operators, spec fields by users, and either may hold any JSON
    type (CRDs do not always validate them); a list where a phase string belongs must read as
    "no phase", not raise (lists are not hashable, so ``value in {...}`` would).
    """
    found = dig(obj, *path)
    return found if isinstance(found, str) else ""


def annotations_of(obj: Obj) -> dict[str, str]:
    found = dig(obj, "metadata", "annotations")
    return found if isinstance(found, dict) else {}


def labels_of(obj: Obj) -> dict[str, str]:
    found = dig(obj, "metadata", "labels")
    return found if isinstance(found, dict) else {}


def has_true_condition(obj: Obj, *types: str) -> bool:
    conditions = dig(obj, "status", "conditions")
    if not isinstance(conditions, list):
        return False
    return any(
        isinstance(c, dict) and c.get("type") in types and c.get("status") == "True"
        for c in conditions
    )


def controller_owner(obj: Obj) -> dict[str, Any] | None:
    refs = dig(obj, "metadata", "ownerReferences")
    if not isinstance(refs, list):
        return None
    for ref in refs:
        if isinstance(ref, dict) and ref.get("controller"):
            return ref
    return None


def opted_out(obj: Obj) -> str | None:
    if annotations_of(obj).get(IGNORE) == "true" or labels_of(obj).get(IGNORE) == "true":
        return f"{IGNORE}=true is set"
    return None


def pod_controller_name(pod: Pod, kind: str) -> str | None:
    for ref in pod.metadata.ownerReferences:
        if ref.controller and ref.kind == kind:
            return ref.name
    return None


def spec_hash(obj: Obj) -> str:
    """A fingerprint of what a user wrote in the job's spec, without the suspend fields (which
    kube-queue itself changes): it tells whether a user edited the job after kube-queue gave
    up on it."""

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k != "suspend"}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    spec = strip(obj.get("spec"))
    return hashlib.sha256(msgspec.json.encode(spec, order="sorted")).hexdigest()[:16]
