"""Which nodes a pod may land on: nodeSelector, required node affinity, taints and tolerations.

These are the kube-scheduler's hard filters that depend only on the pod template and the node,
so an admission decision made with them matches where the scheduler can actually put the pods.
Soft preferences (preferred affinity, PreferNoSchedule) do not change *whether* a pod fits and are
ignored on purpose.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kubequeue.objects import NodeSelectorTerm, PodSpec, Taint, Toleration

__all__ = ["ConstraintError", "NodeConstraints", "constraints_of", "tolerates"]

_HARD_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})

# (key, operator, values): hashable so equal constraints share one memoised feasible-node set.
Requirement = tuple[str, str, frozenset[str]]
Term = tuple[tuple[Requirement, ...], tuple[Requirement, ...]]  # (matchExpressions, matchFields)


class ConstraintError(ValueError):
    """A node selector or affinity the scheduler would reject."""


@dataclass(frozen=True, slots=True)
class NodeConstraints:
    """Hard placement constraints of one pod template, hashable and comparable."""

    node_selector: tuple[tuple[str, str], ...] = ()
    terms: tuple[Term, ...] = ()
    tolerations: tuple[Toleration, ...] = ()

    @property
    def unconstrained(self) -> bool:
        return not self.node_selector and not self.terms and not self.tolerations

    def allows(self, name: str, labels: Mapping[str, str], taints: Sequence[Taint]) -> bool:
        for key, value in self.node_selector:
            if labels.get(key) != value:
                return False
        if self.terms and not any(_term_matches(t, name, labels) for t in self.terms):
            return False
        for taint in taints:
            if taint.effect in _HARD_EFFECTS and not tolerates(self.tolerations, taint):
                return False
        return True

    def describe(self) -> str:
        parts = []
        if self.node_selector:
            parts.append("nodeSelector " + ",".join(f"{k}={v}" for k, v in self.node_selector))
        if self.terms:
            parts.append("required node affinity")
        if self.tolerations:
            parts.append(f"{len(self.tolerations)} toleration(s)")
        return " and ".join(parts) or "no constraints"


def tolerates(tolerations: Sequence[Toleration], taint: Taint) -> bool:
    for tol in tolerations:
        if tol.effect and tol.effect != taint.effect:
            continue
        if tol.operator == "Exists":
            if not tol.key or tol.key == taint.key:
                return True
        elif tol.key == taint.key and tol.value == taint.value:
            return True
    return False


def constraints_of(spec: PodSpec) -> NodeConstraints:
    """Extract hard constraints from a pod spec; raises ConstraintError on invalid operators."""
    terms: tuple[Term, ...] = ()
    affinity = spec.affinity
    if affinity and affinity.nodeAffinity:
        required = affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution
        if required is not None:
            terms = tuple(_term(t) for t in required.nodeSelectorTerms)
            if not terms:
                # An empty term list matches no node at all (scheduler semantics).
                terms = (((("", "__never__", frozenset()),), ()),)
    return NodeConstraints(
        node_selector=tuple(sorted(spec.nodeSelector.items())),
        terms=terms,
        tolerations=tuple(spec.tolerations),
    )


def _term(term: NodeSelectorTerm) -> Term:
    exprs = tuple(_requirement(r.key, r.operator, r.values) for r in term.matchExpressions)
    fields = tuple(_requirement(r.key, r.operator, r.values) for r in term.matchFields)
    for key, _op, _vals in fields:
        if key != "metadata.name":
            raise ConstraintError(f"matchFields supports only metadata.name, not {key!r}")
    if not exprs and not fields:
        # A term with no requirements matches nothing.
        exprs = (("", "__never__", frozenset()),)
    return exprs, fields


def _requirement(key: str, operator: str, values: Sequence[str]) -> Requirement:
    if operator not in _OPERATORS:
        raise ConstraintError(
            f"node affinity operator {operator!r} on key {key!r} is not one of "
            f"{', '.join(sorted(_OPERATORS))}"
        )
    if operator in ("Gt", "Lt"):
        if len(values) != 1:
            raise ConstraintError(f"node affinity {operator} on {key!r} needs exactly one value")
        try:
            int(values[0])
        except ValueError as exc:
            raise ConstraintError(
                f"node affinity {operator} on {key!r} needs an integer, got {values[0]!r}"
            ) from exc
    return key, operator, frozenset(values)


def _term_matches(term: Term, name: str, labels: Mapping[str, str]) -> bool:
    exprs, fields = term
    for req in exprs:
        if not _requirement_matches(req, labels.get(req[0])):
            return False
    return all(_requirement_matches(req, name) for req in fields)


def _requirement_matches(req: Requirement, value: str | None) -> bool:
    _key, op, values = req
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt"):
        if value is None:
            return False
        try:
            have = int(value)
        except ValueError:
            return False
        want = int(next(iter(values)))
        return have > want if op == "Gt" else have < want
    return False  # "__never__"
