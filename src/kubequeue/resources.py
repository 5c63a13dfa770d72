"""Resource vectors: plain ``dict[str, int]`` of milli-units, and the arithmetic the fit needs.

Plain dicts (not a class) because the capacity cache holds tens of thousands of them and the fit
loop compares them millions of times; a missing key means zero. Vectors that are shared (pod
requests) are interned so 50,000 pods of a few shapes hold a few dicts, not 50,000.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from kubequeue.quantity import format_milli

__all__ = [
    "GPU",
    "PODS",
    "Resources",
    "add_into",
    "describe",
    "fits",
    "intern",
    "max_copies",
    "sub_into",
    "total",
]

Resources = dict[str, int]
GPU = "nvidia.com/gpu"
# Every pod takes one slot of the node's "pods" allocatable; treating it as a resource makes the
# pod limit part of the same fit check.
PODS = "pods"

_interned: dict[tuple[tuple[str, int], ...], Resources] = {}


def intern(vector: Mapping[str, int]) -> Resources:
    """Return a shared, canonical dict equal to ``vector`` (zeros dropped). Never mutate it."""
    key = tuple(sorted((k, v) for k, v in vector.items() if v))
    found = _interned.get(key)
    if found is None:
        found = dict(key)
        if len(_interned) < 100_000:
            _interned[key] = found
    return found


def add_into(target: Resources, delta: Mapping[str, int], times: int = 1) -> None:
    """target += delta * times, in place."""
    for name, amount in delta.items():
        target[name] = target.get(name, 0) + amount * times


def sub_into(target: Resources, delta: Mapping[str, int], times: int = 1) -> None:
    """target -= delta * times, in place (may go negative: an over-committed node is real)."""
    for name, amount in delta.items():
        target[name] = target.get(name, 0) - amount * times


def total(vectors: Iterable[Mapping[str, int]]) -> Resources:
    out: Resources = {}
    for vector in vectors:
        add_into(out, vector)
    return out


def fits(request: Mapping[str, int], free: Mapping[str, int]) -> bool:
    """True when every requested amount is available (absent from ``free`` means none)."""
    for name, amount in request.items():
        if amount > free.get(name, 0):
            return False
    return True


def max_copies(request: Mapping[str, int], free: Mapping[str, int], limit: int) -> int:
    """How many copies of ``request`` fit into ``free``, at most ``limit``."""
    best = limit
    for name, amount in request.items():
        if amount <= 0:
            continue
        have = free.get(name, 0)
        if have < amount:
            return 0
        copies = have // amount
        if copies < best:
            best = copies
    return best


def describe(vector: Mapping[str, int]) -> str:
    """Human text for events and logs: ``cpu=2, memory=4Gi, nvidia.com/gpu=2``."""
    parts = [
        f"{name}={format_milli(name, amount)}"
        for name, amount in sorted(vector.items(), key=_display_order)
        if amount and name != PODS
    ]
    return ", ".join(parts) or "nothing"


def _display_order(item: tuple[str, int]) -> tuple[int, str]:
    name = item[0]
    rank = {"cpu": 0, "memory": 1}.get(name, 2)
    return rank, name
