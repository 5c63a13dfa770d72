"""The per-node index of held pods (capacity/reservations.py): relocate() and stranded_jobs()
look only at the jobs holding pods on stranded nodes, and the stranded nodes are memoised on the
cache's version. Both must always say what a pass over every hold would say, whatever mix of
holds, foreign pods that over-fill nodes, cordons and releases came before."""

from __future__ import annotations

import random

from kubequeue.capacity.cache import CapacityCache
from kubequeue.capacity.fit import place
from kubequeue.capacity.reservations import UNPLACED, Reservations
from kubequeue.demand import PodSet
from kubequeue.resources import GPU
from unit import builders as b


def _brute_stranded(res: Reservations, cache: CapacityCache) -> set[str]:
    out = set()
    for node in res._holds_on:
        state = cache.nodes.get(node) if node != UNPLACED else None
        if state is None or not state.schedulable or any(v < 0 for v in state.free.values()):
            out.add(node)
    return out


def _check(res: Reservations, cache: CapacityCache) -> None:
    expected: dict[str, dict[tuple[str, str, str], int]] = {}
    for job, held in res._held.items():
        assert held.key == job
        for nodes in held.placed.values():
            for node, count in nodes.items():
                row = expected.setdefault(node, {})
                row[job] = row.get(job, 0) + count
    assert res._jobs_on == expected
    stranded = _brute_stranded(res, cache)
    assert res._stranded_nodes() == stranded
    if res.debt():
        pinned_on = res._pinned_nodes()
        owed = {
            job
            for job, held in res._held.items()
            if job not in res._pinned
            and any(
                node in stranded - pinned_on for nodes in held.placed.values() for node in nodes
            )
        }
        assert res.stranded_jobs() == owed
    # The order relocate() goes in is the order of the holds.
    seqs = [held.seq for held in res._held.values()]
    assert seqs == sorted(seqs)


def test_the_index_and_the_memo_agree_with_a_full_pass() -> None:
    for seed in range(40):
        rng = random.Random(seed)
        cache = CapacityCache()
        names = [f"n{i}" for i in range(6)]
        for name in names:
            cache.upsert_node(b.node(name, gpu=8))
        res = Reservations(cache)
        foreign = 0
        for _ in range(120):
            op = rng.random()
            job = ("Job", "ns", f"j{rng.randrange(12)}")
            if op < 0.35:
                ps = PodSet("w", rng.choice((1, 2, 3)), {GPU: 1000 * rng.choice((1, 2, 4))})
                placed = place([ps], cache)
                if placed is not None:
                    res.hold(job, [ps], placed, pinned=rng.random() < 0.1)
            elif op < 0.5:
                res.release(job)
            elif op < 0.65:
                # Someone else's pod lands on a node: it may go below zero.
                foreign += 1
                cache.upsert_pod(
                    b.pod(
                        f"x{foreign}",
                        rng.choice(names),
                        {GPU: str(rng.choice((1, 2, 4)))},
                        uid=f"uid-x{foreign}",
                    ),
                    None,
                )
            elif op < 0.75 and foreign:
                cache.delete_pod(f"uid-x{rng.randint(1, foreign)}")
            elif op < 0.85:
                name = rng.choice(names)
                cache.upsert_node(b.node(name, gpu=8, unschedulable=rng.random() < 0.5))
            elif op < 0.9:
                res.relocate()
            elif op < 0.95:
                # A node goes away (its holds are stranded) and may come back.
                name = rng.choice(names)
                cache.delete_node(name)
                if rng.random() < 0.5:
                    cache.upsert_node(b.node(name, gpu=8))
            else:
                cache.upsert_node(b.node(rng.choice(names), gpu=8))
            # Answers are kept up to date from what changed since the last question: ask
            # after one change or after several.
            if rng.random() < 0.4:
                _check(res, cache)
        _check(res, cache)


def test_touched_nodes_are_forgotten_when_nodes_churn_and_readers_then_look_at_all() -> None:
    cache = CapacityCache()
    cache.upsert_node(b.node("stay", gpu=8))
    start = cache.version
    assert cache.touched_since(start, 10) == []
    for i in range(1100):
        cache.upsert_node(b.node(f"gone{i}", gpu=8))
        cache.delete_node(f"gone{i}")
    assert len(cache._touched) <= 2 * len(cache.nodes) + 1025
    assert cache.touched_since(start, 10_000) is None, "the record no longer goes back that far"
    now = cache.version
    cache.upsert_pod(b.pod("p", "stay", {GPU: "1"}), None)
    assert cache.touched_since(now, 10) == ["stay"]
