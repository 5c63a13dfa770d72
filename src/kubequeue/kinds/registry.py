"""Which job kinds exist and which are switched on.

Only native Jobs are queued by default (the product contract); every other kind is enabled
explicitly (Helm ``extension.<kind>.enable``, which becomes ``--kinds``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from kubequeue.kinds.job import JobKind
from kubequeue.kinds.protocol import JobAdapter

__all__ = ["DEFAULT_KINDS", "KINDS", "UnknownKind", "adapters_for"]

KINDS: dict[str, Callable[[], JobAdapter]] = {
    "job": JobKind,
}
DEFAULT_KINDS = ("job",)


class UnknownKind(ValueError):
    pass


def adapters_for(names: Iterable[str]) -> list[JobAdapter]:
    out: list[JobAdapter] = []
    for name in names:
        factory = KINDS.get(name)
        if factory is None:
            raise UnknownKind(f"unknown job kind {name!r}; known kinds: {', '.join(sorted(KINDS))}")
        out.append(factory())
    return out
