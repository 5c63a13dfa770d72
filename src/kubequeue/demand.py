"""What a job needs: groups of identical pods, each pod's effective request, where they may run.

The effective request follows the kube-scheduler's own arithmetic (k8s.io/component-helpers
resource.PodRequests), so "fits" here means the scheduler will agree:
``max(sum(app containers) + sum(sidecars), max over init steps) + overhead``, summed exactly (in
nano-units, as Kubernetes keeps quantities) and rounded once at the end the way the scheduler's
``Resource.Add`` does: CPU up to a millicore, every other resource up to a whole unit. A pod
template has not been through the API server's Pod defaulting, so limits stand in for missing
requests here (the defaulting would copy them on pod creation anyway).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from kubequeue import resources
from kubequeue.labels import TOPOLOGY_PREFERRED, TOPOLOGY_REQUIRED, TOPOLOGY_SCOPE
from kubequeue.objects import Container, PodSpec, PodTemplateSpec
from kubequeue.quantity import QuantityError, milli_value, parse_nano, unit_value
from kubequeue.resources import PODS, Resources
from kubequeue.scheduling import (
    ConstraintError,
    NodeConstraints,
    TopologyRequest,
    constraints_of,
    is_label_key,
)

__all__ = [
    "DemandError",
    "PodSet",
    "decode_template",
    "parse_resource_map",
    "pod_request",
    "pod_set_from_template",
    "topology_of",
    "topology_whole_job",
    "total_demand",
]

# A resource name is a (optionally prefixed) qualified name, like "cpu" or "nvidia.com/gpu".
_CPU = "cpu"
_INT64_MAX = 2**63 - 1
_RESOURCE_NAME = re.compile(
    r"^(?:[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)


class DemandError(ValueError):
    """A job whose resource demand cannot be computed; the message is shown to the user.

    ``reason`` becomes the Warning Event's reason (CamelCase), so users and alerts can tell
    kinds of bad input apart.
    """

    def __init__(self, message: str, reason: str = "InvalidJob") -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class PodSet:
    """``count`` identical pods, each requesting ``request``, placed where ``constraints`` allow
    (and, with ``topology``, together in one domain of a node label: capacity/topology.py)."""

    name: str
    count: int
    request: Resources
    constraints: NodeConstraints = field(default_factory=NodeConstraints)
    topology: TopologyRequest | None = None


def topology_of(annotations: Mapping[str, Any], where: str) -> TopologyRequest | None:
    """The topology a job or pod template asks for (labels.py: TOPOLOGY_*); DemandError
    (InvalidTopology) for a value that is no node label key, or both kinds asked at once."""
    asked = [
        (key, required)
        for keys, required in ((TOPOLOGY_REQUIRED, True), (TOPOLOGY_PREFERRED, False))
        for key in keys
        if key in annotations
    ]
    if not asked:
        return None
    if len({required for _, required in asked}) > 1:
        raise DemandError(
            f"{where}: asks for a required and a preferred topology at once; keep one",
            "InvalidTopology",
        )
    key, required = asked[0]
    level = annotations[key]
    if not isinstance(level, str) or not is_label_key(level):
        raise DemandError(
            f"{where}: annotation {key} must name a node label key (e.g. "
            f"topology.kubernetes.io/zone), not {str(level)[:80]!r}",
            "InvalidTopology",
        )
    return TopologyRequest(level, required)


# kube-queue.io/topology-scope values: the whole job in one domain, or each pod set that asks in
# one of its own (the default).
_SCOPES = {"job": True, "pod-set": False}


def topology_whole_job(annotations: Mapping[str, Any], where: str) -> bool:
    """Whether a job's topology is for the whole job at once (``kube-queue.io/topology-scope:
    job``) rather than per pod set; DemandError (InvalidTopology) for another value."""
    value = annotations.get(TOPOLOGY_SCOPE)
    if value is None:
        return False
    whole = _SCOPES.get(value) if isinstance(value, str) else None
    if whole is None:
        raise DemandError(
            f"{where}: annotation {TOPOLOGY_SCOPE} must be job or pod-set, not {str(value)[:80]!r}",
            "InvalidTopology",
        )
    return whole


def total_demand(pod_sets: Sequence[PodSet]) -> Resources:
    """Every pod of every pod set, summed: what a job counts against its queue's quota."""
    out: Resources = {}
    for ps in pod_sets:
        resources.add_into(out, ps.request, ps.count)
    return out


def parse_resource_map(values: Mapping[str, Any], where: str) -> Resources:
    """Parse a {resource: quantity} map into the amounts the scheduler accounts (non-zero only).

    Rejects bad names, bad numbers and negatives; rounds as ``_scheduler_amounts`` does.
    """
    return _scheduler_amounts(_parse_exact(values, where), where)


def _parse_exact(values: Mapping[str, Any], where: str) -> Resources:
    """Exact nano-unit amounts of a {resource: quantity} map, explicit zeros kept.

    Presence matters: a request of "0" is not a missing request, and a limit of "0" still caps
    its request.
    """
    out: Resources = {}
    for name, raw in values.items():
        if not isinstance(name, str) or not _RESOURCE_NAME.match(name) or len(name) > 253:
            raise DemandError(f"{where}: {name!r} is not a valid resource name")
        if not isinstance(raw, str | int | float) or isinstance(raw, bool):
            raise DemandError(f"{where}: {name} has non-quantity value {raw!r}")
        try:
            amount = parse_nano(raw)
        except QuantityError as exc:
            raise DemandError(f"{where}: {name}: {exc}") from None
        if amount < 0:
            raise DemandError(f"{where}: {name} is negative ({raw})")
        out[name] = amount
    return out


def _scheduler_amounts(exact: Mapping[str, int], where: str) -> Resources:
    """Exact nano-unit totals as the kube-scheduler counts them, in our milli-units.

    framework.Resource.Add takes ``MilliValue()`` of CPU and ``Value()`` (whole units, rounded
    up) of memory, ephemeral storage, pods and every scalar resource; kept here as 1000
    milli-units per unit. Zero amounts are left out; a total the scheduler's int64 cannot hold
    is refused rather than wrapped.
    """
    out: Resources = {}
    for name, nanos in exact.items():
        if name == _CPU:
            counted = amount = milli_value(nanos)
        else:
            counted = unit_value(nanos)
            amount = counted * 1000
        if counted > _INT64_MAX:
            raise DemandError(f"{where}: {name} adds up to more than any node can hold (too large)")
        if amount:
            out[name] = amount
    return out


def _container_request(container: Container, where: str) -> Resources:
    """One container's request as the API server leaves it, in exact nano-units.

    SetDefaults_Pod copies a limit only into an *absent* request (so requests "0" with limits
    "4" is 0), and validation refuses any request above a limit that is set, "0" included.
    """
    limits = _parse_exact(container.resources.limits, f"{where} limits")
    requests = _parse_exact(container.resources.requests, f"{where} requests")
    for name, amount in requests.items():
        if name in limits and amount > limits[name]:
            raise DemandError(
                f"{where}: request of {name} ({container.resources.requests[name]}) is above "
                f"its limit ({container.resources.limits[name]})"
            )
    merged = dict(limits)
    merged.update(requests)
    return merged


def _max_into(target: Resources, other: Mapping[str, int]) -> None:
    for name, amount in other.items():
        if amount > target.get(name, 0):
            target[name] = amount


# The pods of one workload are identical in everything that decides their request, and a cluster
# runs a few hundred distinct shapes, so each shape is validated, parsed and interned once. The
# key is the raw text of every quantity (the API server always sends quantities as strings; keys
# with anything else are not stored, so a number that merely compares equal to a string's value,
# or a bool equal to 1, can never be answered from another entry).
_REQUESTS_MAX = 16_384
_requests: dict[tuple[Any, ...], Resources] = {}
# Markers between the sections of a key: never equal to a resource name or a quantity.
_APP = object()
_INIT = object()
_LIMITS = object()
_OVERHEAD = object()


def _request_key(spec: PodSpec) -> tuple[Any, ...]:
    """Everything the effective request depends on, flat: per container a marker, its requests,
    a marker, its limits; the same for init containers (plus their restart policy), then the
    overhead. (The usual single plain container leaves out the leading marker: only keys of
    other shapes start with one, so the two forms never meet.)"""
    containers = spec.containers
    if len(containers) == 1 and not spec.initContainers and not spec.overhead:
        r = containers[0].resources
        return (*r.requests.items(), _LIMITS, *r.limits.items())
    key: list[Any] = []
    for c in containers:
        r = c.resources
        key.append(_APP)
        key += r.requests.items()
        key.append(_LIMITS)
        key += r.limits.items()
    if spec.initContainers:
        for c in spec.initContainers:
            r = c.resources
            key.append(_INIT)
            key.append(c.restartPolicy)
            key += r.requests.items()
            key.append(_LIMITS)
            key += r.limits.items()
    if spec.overhead:
        key.append(_OVERHEAD)
        key += spec.overhead.items()
    return tuple(key)


def _all_text(spec: PodSpec) -> bool:
    for c in (*spec.containers, *spec.initContainers):
        for quantities in (c.resources.requests, c.resources.limits):
            for value in quantities.values():
                if type(value) is not str:
                    return False
    return all(type(value) is str for value in spec.overhead.values())


def cached_pod_request(spec: PodSpec) -> Resources | None:
    """``pod_request(spec)`` if this shape was computed before, else None (cheap; no errors)."""
    return _requests.get(_request_key(spec))


def pod_request(spec: PodSpec, where: str = "pod") -> Resources:
    """The scheduler's effective request of one pod, plus one slot of ``pods``. Interned."""
    key = _request_key(spec)
    found = _requests.get(key)
    if found is not None:
        return found
    request = _compute_pod_request(spec, where)
    if len(_requests) < _REQUESTS_MAX and _all_text(spec):
        _requests[key] = request
    return request


def _compute_pod_request(spec: PodSpec, where: str) -> Resources:
    # Exact nano-units until _scheduler_amounts: Kubernetes adds quantities before rounding.
    app: Resources = {}
    for c in spec.containers:
        resources.add_into(app, _container_request(c, f"{where} container {c.name!r}"))
    sidecars: Resources = {}
    init_peak: Resources = {}
    for c in spec.initContainers:
        own = _container_request(c, f"{where} init container {c.name!r}")
        if c.restartPolicy == "Always":
            resources.add_into(sidecars, own)
            step = dict(sidecars)
        else:
            step = dict(own)
            resources.add_into(step, sidecars)
        _max_into(init_peak, step)
    resources.add_into(app, sidecars)
    _max_into(app, init_peak)
    resources.add_into(app, _parse_exact(spec.overhead, f"{where} overhead"))
    request = _scheduler_amounts(app, where)
    request[PODS] = 1000
    return resources.intern(request)


def decode_template(template: Any, where: str) -> PodTemplateSpec:
    """Typed view of a pod template dict from a job object; DemandError if it is malformed."""
    if not isinstance(template, Mapping):
        raise DemandError(f"{where}: pod template is missing")
    try:
        return msgspec.convert(template, PodTemplateSpec, strict=False)
    except msgspec.ValidationError as exc:
        raise DemandError(f"{where}: malformed pod template: {exc}") from None


def pod_set_from_template(name: str, count: Any, template: Any, where: str) -> PodSet:
    """One PodSet from a replica count and a pod template dict (shared by every job kind)."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise DemandError(f"{where}: replica count {count!r} is not a non-negative integer")
    decoded = decode_template(template, where)
    spec = decoded.spec
    try:
        constraints = constraints_of(spec)
    except ConstraintError as exc:
        raise DemandError(f"{where}: {exc}") from None
    template_meta = decoded.metadata
    return PodSet(
        name=name,
        count=count,
        request=pod_request(spec, where),
        constraints=constraints,
        topology=topology_of(template_meta.annotations, where),
    )
