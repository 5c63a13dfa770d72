"""RFC 6902 JSON patches applied the way the API server applies them, for the unit fakes.

Checked against the local kube-apiserver (v1.36): a ``test`` of null passes on a missing key
whose parent exists and fails when the parent itself is missing; any op that does not apply
makes the whole patch fail with 422 and one fixed message, nothing is applied.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

__all__ = ["NOT_APPLIED", "PatchFailed", "apply_patch"]

NOT_APPLIED = "the server rejected our request due to an error in our request"


class PatchFailed(Exception):
    """The patch does not apply (HTTP 422, message NOT_APPLIED)."""


def _steps(path: str) -> list[str]:
    if not path.startswith("/"):
        raise PatchFailed(path)
    return [s.replace("~1", "/").replace("~0", "~") for s in path[1:].split("/")]


def _parent(doc: Any, path: str) -> tuple[Any, str]:
    steps = _steps(path)
    node = doc
    for step in steps[:-1]:
        if isinstance(node, dict) and step in node:
            node = node[step]
        elif isinstance(node, list) and step.isdigit() and int(step) < len(node):
            node = node[int(step)]
        else:
            raise PatchFailed(path)
    return node, steps[-1]


def apply_patch(obj: dict[str, Any], ops: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """A patched copy of ``obj``; raises PatchFailed (and changes nothing) if any op fails."""
    doc = copy.deepcopy(obj)
    for op in ops:
        kind, path = op.get("op"), op.get("path", "")
        parent, key = _parent(doc, path)
        if isinstance(parent, list):
            index = len(parent) if key == "-" else int(key) if key.isdigit() else -1
            if kind == "test":
                if not 0 <= index < len(parent) or parent[index] != op.get("value"):
                    raise PatchFailed(path)
            elif kind == "add" and 0 <= index <= len(parent):
                parent.insert(index, copy.deepcopy(op["value"]))
            elif kind in ("remove", "replace") and 0 <= index < len(parent):
                if kind == "remove":
                    del parent[index]
                else:
                    parent[index] = copy.deepcopy(op["value"])
            else:
                raise PatchFailed(path)
            continue
        if not isinstance(parent, dict):
            raise PatchFailed(path)
        if kind == "test":
            if parent.get(key) != op.get("value"):
                raise PatchFailed(path)
        elif kind == "add":
            parent[key] = copy.deepcopy(op["value"])
        elif kind in ("remove", "replace") and key in parent:
            if kind == "remove":
                del parent[key]
            else:
                parent[key] = copy.deepcopy(op["value"])
        else:
            raise PatchFailed(path)
    return doc
