"""Independent accounting checks, run after a benchmark run (never inside a timed section).

1. Over-commit: per node, recompute used (sum of the cache's pod requests) and reserved (sum of
   every held reservation) from scratch and require used + reserved <= allocatable for every
   resource. The running pods were generated not to over-commit and admissions must not either,
   so any violation is a bug (the reservations' deliberate "capacity gone" over-commit is never
   reached by the bench; its log event is counted separately).
2. Incremental bookkeeping: the cache's own used / reserved / free per node equal the recomputed
   values (free == allocatable - used - reserved).
3. The generator's ledger (plain arithmetic on the numbers it wrote into the JSON) agrees with the
   cache's parsed allocatable and used, for cpu, memory, GPUs and pod slots.
4. Pinning (``--pin``): once every pinned pod is bound, Pins counts nothing as pinned and
   unbound, no slot pinned at creation is left provisional, and no pod waits for the pinner.
"""

from __future__ import annotations

from collections import Counter

from bench.harness import Harness
from bench.state import Cluster

__all__ = ["accounting_problems", "pin_problems"]

_RESOURCES = ("cpu", "memory", "nvidia.com/gpu", "pods")


def accounting_problems(h: Harness, cluster: Cluster, limit: int = 20) -> list[str]:
    cache = h.cache
    used: dict[str, Counter[str]] = {}
    for usage in cache._pods.values():
        used.setdefault(usage.node, Counter()).update(usage.request)
    reserved: dict[str, Counter[str]] = {}
    for held in h.reservations._held.values():
        for pod_set, nodes in held.placed.items():
            request = held.pod_sets[pod_set].request
            for node, count in nodes.items():
                r = reserved.setdefault(node, Counter())
                for res, amount in request.items():
                    r[res] += amount * count
    problems: list[str] = []
    for name, state in cache.nodes.items():
        u = used.get(name, Counter())
        r = reserved.get(name, Counter())
        alloc = state.allocatable
        for res in set(u) | set(r):
            if u[res] + r[res] > alloc.get(res, 0):
                problems.append(
                    f"over-commit: {name} {res} used {u[res]} + reserved {r[res]} > "
                    f"allocatable {alloc.get(res, 0)}"
                )
        for res in set(u) | set(r) | set(alloc) | set(state.used) | set(state.reserved):
            if state.used.get(res, 0) != u[res] or state.reserved.get(res, 0) != r[res]:
                problems.append(f"bookkeeping: {name} {res} used/reserved drifted")
            if state.free.get(res, 0) != alloc.get(res, 0) - u[res] - r[res]:
                problems.append(f"bookkeeping: {name} {res} free drifted")
        rec = cluster.by_name.get(name)
        if rec is None:
            problems.append(f"ledger: cache has unknown node {name}")
            continue
        for res in _RESOURCES:
            if alloc.get(res, 0) != rec.allocatable.get(res, 0):
                problems.append(f"ledger: {name} {res} allocatable differs")
            if u[res] != rec.allocatable.get(res, 0) - rec.free.get(res, 0):
                problems.append(f"ledger: {name} {res} used differs from the generator's")
        if len(problems) >= limit:
            break
    return problems[:limit]


def pin_problems(h: Harness) -> list[str]:
    pins = h.pins
    problems: list[str] = []
    for name, left in (
        ("pinned and unbound", pins._unbound),
        ("pinned slots per job", pins._per_job),
        ("provisional slots", pins._provisional),
        ("replanned rooms", pins._extra),
        ("pods waiting for the pinner", pins.waiting),
        ("pin writes in flight", pins._writing),
        ("pods left the unbound watch, bind not seen", getattr(pins, "_leaving", {})),
    ):
        if left:
            problems.append(f"pins: {len(left)} {name} left after every pod bound")
    return problems
