"""heap.py: the collector's own full passes stop, ours come after REFREEZE_AFTER young passes,
collect the cyclic garbage made since the last one and freeze the rest."""

from __future__ import annotations

import gc
import weakref

from kubequeue import heap


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def test_take_over_stops_the_collectors_own_full_passes_and_restore_undoes_it() -> None:
    before = gc.get_threshold()
    previous = heap.take_over()
    try:
        assert previous == before
        g0, g1, g2 = gc.get_threshold()
        assert (g0, g1) == before[:2] and g2 > 10**6
    finally:
        heap.restore(previous)
    assert gc.get_threshold() == before


def test_a_refreeze_is_due_after_enough_young_passes_and_collects_cycles_first() -> None:
    previous = heap.take_over()
    try:
        gc.collect()
        assert not heap.due()
        for _ in range(heap.REFREEZE_AFTER):
            gc.collect(1)  # each counts one pass of generation 1, as the collector's own do
        assert heap.due()
        a, b = _Node(), _Node()
        a.other, b.other = b, a  # a cycle, garbage once the names are gone
        dead = weakref.ref(a)
        kept = _Node()
        del a, b
        frozen = gc.get_freeze_count()
        heap.refreeze()
        assert dead() is None, "cyclic garbage made since the last freeze was frozen"
        assert not heap.due()
        assert gc.get_freeze_count() > frozen
        assert all(o is not kept for o in gc.get_objects(generation=2)), "not frozen"
    finally:
        heap.restore(previous)
        gc.unfreeze()
