"""Which nodes a pod may land on: nodeSelector, required node affinity, taints and tolerations.

These are the kube-scheduler's hard filters that depend only on the pod template and the node,
so an admission decision made with them matches where the scheduler can actually put the pods.
Soft preferences (preferred affinity, PreferNoSchedule) do not change *whether* a pod fits and are
ignored on purpose.

Required node affinity follows component-helpers ``nodeaffinity`` and apimachinery ``labels``:
what the API server refuses (ValidateNodeSelectorRequirement: bad operator, value count or key;
ValidateNodeFieldSelectorRequirement) is a ConstraintError. What it accepts but
``labels.NewRequirement`` cannot build - a value that is not a label value, a Gt/Lt value that
``strconv.ParseInt(v, 10, 64)`` refuses ("1_0", "+5", 2**63) - voids its term, which then matches
no node, exactly as the scheduler treats a term with parse errors. (Recent API servers, v1.36
among them, also refuse invalid label values in new pods; older ones accept them, and the
scheduler never places such a pod either way.)
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kubequeue.objects import NodeSelectorTerm, PodSpec, Taint, Toleration

__all__ = [
    "HARD_EFFECTS",
    "ConstraintError",
    "NodeConstraints",
    "TopologyRequest",
    "constraints_of",
    "is_label_key",
    "tolerates",
]

HARD_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})
# Which value counts ValidateNodeSelectorRequirement accepts, per operator.
_COUNTS = {
    "In": (1, None, "needs at least one value"),
    "NotIn": (1, None, "needs at least one value"),
    "Exists": (0, 0, "takes no values"),
    "DoesNotExist": (0, 0, "takes no values"),
    "Gt": (1, 1, "needs exactly one value"),
    "Lt": (1, 1, "needs exactly one value"),
}
# apimachinery validation: label names/values, DNS-1123 subdomains, strconv.ParseInt base 10.
_LABEL_NAME = re.compile(r"(?:[A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"{_DNS_LABEL}(?:\.{_DNS_LABEL})*")
_INT64 = (-(2**63), 2**63 - 1)
_NEVER = "__never__"

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
            if taint.effect in HARD_EFFECTS and not tolerates(self.tolerations, taint):
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


@dataclass(frozen=True, slots=True)
class TopologyRequest:
    """A gang's pods together in one domain of a topology level (a node label such as a rack
    or ``nvidia.com/gpu.clique``): ``required`` or else as few domains as possible. The gang is
    the pod set that asks, or with ``whole_job`` (the job's ``kube-queue.io/topology-scope:
    job``) every pod of the job."""

    level: str
    required: bool
    whole_job: bool = False

    def describe(self) -> str:
        return f"{'in one' if self.required else 'preferably in one'} {self.level}"


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
    """Extract hard constraints from a pod spec; ConstraintError for what the API server refuses."""
    terms: tuple[Term, ...] = ()
    affinity = spec.affinity
    if affinity and affinity.nodeAffinity:
        required = affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution
        if required is not None:
            terms = tuple(_term(t) for t in required.nodeSelectorTerms)
            if not terms:
                # An empty term list matches no node at all (scheduler semantics).
                terms = ((((_NEVER, _NEVER, frozenset()),), ()),)
    found = NodeConstraints(
        node_selector=tuple(sorted(spec.nodeSelector.items())),
        terms=terms,
        tolerations=tuple(spec.tolerations),
    )
    # One object per distinct set of constraints (a cluster has a few dozen, and every queued
    # job holds one): less memory, and the cache's memos keyed by them hit on identity. Only
    # small ones are kept for sharing: the table outlives the jobs, and its size must not be
    # up to whoever writes the biggest spec.
    shared = _SHARED.get(found)
    if shared is not None:
        return shared
    size = len(found.node_selector) + len(found.tolerations)
    for exprs, fields in terms:
        size += sum(1 + len(values) for _, _, values in (*exprs, *fields))
    if len(_SHARED) < _SHARED_MAX and size <= _SHARED_ITEMS_MAX:
        _SHARED[found] = found
    return found


_SHARED: dict[NodeConstraints, NodeConstraints] = {}
_SHARED_MAX = 4096
_SHARED_ITEMS_MAX = 16


def _term(term: NodeSelectorTerm) -> Term:
    exprs = tuple(_requirement(r.key, r.operator, tuple(r.values)) for r in term.matchExpressions)
    fields = tuple(_field_requirement(r.key, r.operator, r.values) for r in term.matchFields)
    if not exprs and not fields:
        # A term with no requirements matches nothing.
        exprs = ((_NEVER, _NEVER, frozenset()),)
    if any(op == _NEVER for _key, op, _vals in exprs):
        # labels.NewRequirement failed: the scheduler's term has parse errors, matches no node.
        exprs, fields = ((_NEVER, _NEVER, frozenset()),), ()
    return exprs, fields


# Every pod template of a workload repeats the same few requirements: validate each once.
@functools.lru_cache(maxsize=4096)
def _requirement(key: str, operator: str, values: tuple[str, ...]) -> Requirement:
    """The requirement the scheduler builds, or a never-matching one where it builds none."""
    _check_accepted(key, operator, values)
    if not all(_is_label_value(v) for v in values):
        return key, _NEVER, frozenset()
    if operator in ("Gt", "Lt"):
        bound = _go_int(values[0])
        if bound is None:
            return key, _NEVER, frozenset()
        return key, operator, frozenset({str(bound)})
    return key, operator, frozenset(values)


def _check_accepted(key: str, operator: str, values: Sequence[str]) -> None:
    """ConstraintError for what ValidateNodeSelectorRequirement refuses."""
    if operator not in _OPERATORS:
        raise ConstraintError(
            f"node affinity operator {operator!r} on key {key!r} is not one of "
            f"{', '.join(sorted(_OPERATORS))}"
        )
    least, most, wanted = _COUNTS[operator]
    if len(values) < least or (most is not None and len(values) > most):
        raise ConstraintError(f"node affinity {operator} on {key!r} {wanted}, got {len(values)}")
    if not is_label_key(key):
        raise ConstraintError(f"node affinity key {key!r} is not a valid label key")


def _field_requirement(key: str, operator: str, values: Sequence[str]) -> Requirement:
    """A matchFields requirement; ConstraintError for what ValidateNodeFieldSelectorRequirement
    refuses (the scheduler compares the node name as plain text)."""
    if key != "metadata.name":
        raise ConstraintError(f"matchFields supports only metadata.name, not {key!r}")
    if operator not in ("In", "NotIn"):
        raise ConstraintError(f"matchFields operator {operator!r} is not In or NotIn")
    if len(values) != 1:
        raise ConstraintError(f"matchFields {operator} needs exactly one value, got {len(values)}")
    if not _is_dns_subdomain(values[0]):
        raise ConstraintError(f"matchFields value {values[0]!r} is not a valid node name")
    return key, operator, frozenset(values)


def is_label_key(key: str) -> bool:
    """validation.IsQualifiedName: an optional DNS subdomain and "/", then a label name."""
    prefix, slash, name = key.rpartition("/")
    if slash and not _is_dns_subdomain(prefix):
        return False
    return len(name) <= 63 and _LABEL_NAME.fullmatch(name) is not None


def _is_label_value(value: str) -> bool:
    return value == "" or (len(value) <= 63 and _LABEL_NAME.fullmatch(value) is not None)


def _is_dns_subdomain(text: str) -> bool:
    return len(text) <= 253 and _DNS_SUBDOMAIN.fullmatch(text) is not None


def _go_int(text: str) -> int | None:
    """strconv.ParseInt(text, 10, 64): sign and ASCII digits only, within int64; else None."""
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not (digits.isascii() and digits.isdigit()) or len(digits.lstrip("0")) > 19:
        return None
    value = int(text)
    return value if _INT64[0] <= value <= _INT64[1] else None


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
        have = None if value is None else _go_int(value)
        if have is None:
            return False
        want = int(next(iter(values)))
        return have > want if op == "Gt" else have < want
    return False  # _NEVER
