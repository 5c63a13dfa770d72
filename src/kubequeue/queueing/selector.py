"""Kubernetes label selectors (``matchLabels`` + ``matchExpressions``), for Queue
``namespaceSelector``. Semantics as metav1.LabelSelectorAsSelector: every term must hold; an
empty selector ``{}`` selects everything, and an absent one (None here) selects nothing."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["LabelSelector", "SelectorError", "parse_selector"]

_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})

Requirement = tuple[str, str, frozenset[str]]


class SelectorError(ValueError):
    """A selector the API server would reject; the message is shown to the Queue's owner."""


@dataclass(frozen=True, slots=True)
class LabelSelector:
    match_labels: tuple[tuple[str, str], ...] = ()
    expressions: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        for key, value in self.match_labels:
            if labels.get(key) != value:
                return False
        for key, op, values in self.expressions:
            have = labels.get(key)
            if op == "In":
                ok = have is not None and have in values
            elif op == "NotIn":
                ok = have is None or have not in values
            elif op == "Exists":
                ok = have is not None
            else:  # DoesNotExist
                ok = have is None
            if not ok:
                return False
        return True


def parse_selector(raw: Any, where: str) -> LabelSelector | None:
    """None for an absent selector (selects nothing), else the parsed selector."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise SelectorError(f"{where} is not an object")
    labels = raw.get("matchLabels") or {}
    if not isinstance(labels, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
    ):
        raise SelectorError(f"{where}.matchLabels must map label keys to string values")
    expressions = raw.get("matchExpressions") or []
    if not isinstance(expressions, list):
        raise SelectorError(f"{where}.matchExpressions is not a list")
    parsed: list[Requirement] = []
    for i, expr in enumerate(expressions):
        at = f"{where}.matchExpressions[{i}]"
        if not isinstance(expr, dict):
            raise SelectorError(f"{at} is not an object")
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if not isinstance(key, str) or not key:
            raise SelectorError(f"{at}.key is missing")
        if op not in _OPERATORS:
            raise SelectorError(f"{at}.operator must be one of {', '.join(sorted(_OPERATORS))}")
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise SelectorError(f"{at}.values must be a list of strings")
        if op in ("In", "NotIn") and not values:
            raise SelectorError(f"{at}: {op} needs at least one value")
        if op in ("Exists", "DoesNotExist") and values:
            raise SelectorError(f"{at}: {op} takes no values")
        parsed.append((key, str(op), frozenset(values)))
    return LabelSelector(tuple(sorted(labels.items())), tuple(parsed))
