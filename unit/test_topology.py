"""capacity/topology.py: a gang in one topology domain, against a brute force."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kubequeue.capacity.cache import CapacityCache
from kubequeue.capacity.topology import explain_together, place_together
from kubequeue.demand import DemandError, PodSet, topology_of
from kubequeue.resources import GPU
from kubequeue.scheduling import NodeConstraints, TopologyRequest
from unit import builders as b

RACK = "example.com/rack"


def cluster(nodes: list[tuple[str, int, str | None]]) -> CapacityCache:
    """(name, free GPUs, rack or None) per node, each an 8-GPU node with the rest used."""
    cache = CapacityCache()
    for name, free, rack in nodes:
        labels = {RACK: rack} if rack is not None else {}
        cache.upsert_node(b.node(name, gpu=8, labels=labels))
        if free < 8:
            cache.upsert_pod(b.pod(f"use-{name}", name, {"cpu": "1", GPU: str(8 - free)}), None)
    return cache


def gang(pods: int, gpus: int, *, required: bool = True) -> list[PodSet]:
    request = {"cpu": 1000, GPU: gpus * 1000}
    return [PodSet("w", pods, request, NodeConstraints(), TopologyRequest(RACK, required))]


def domain_fits(cache: CapacityCache, rack: str, pods: int, gpus: int) -> int:
    """Exact for identical pods: how many fit on the rack's nodes (GPU-bound: 1 CPU each)."""
    return sum(
        cache.nodes[n].free.get(GPU, 0) // (gpus * 1000)
        for n in cache.nodes
        if cache.nodes[n].labels.get(RACK) == rack
    )


nodes_st = st.lists(
    st.tuples(st.integers(0, 8), st.sampled_from(["r0", "r1", "r2", None])), min_size=1,
    max_size=8,
)


@settings(max_examples=300, deadline=None)
@given(nodes=nodes_st, pods=st.integers(1, 6), gpus=st.sampled_from([1, 2, 4, 8]))
def test_required_is_sound_complete_and_best_fit(
    nodes: list[tuple[int, str | None]], pods: int, gpus: int
) -> None:
    cache = cluster([(f"n{i}", free, rack) for i, (free, rack) in enumerate(nodes)])
    racks = sorted({r for _, r in nodes if r is not None})
    fitting = {r: cache_free(cache, r) for r in racks if domain_fits(cache, r, pods, gpus) >= pods}
    found = place_together(gang(pods, gpus), cache)
    if not fitting:  # completeness' converse: no domain holds it, so nothing is placed
        assert found is None
        assert explain_together(gang(pods, gpus), cache) != ""
        return
    assert found is not None, "some rack holds the gang: it must be placed"
    assert found.level == RACK and found.domain in fitting
    on = Counter[str]()
    for a in found.assignments:
        assert cache.nodes[a.node].labels.get(RACK) == found.domain, "all in one domain"
        on[a.node] += a.count
    assert sum(on.values()) == pods
    for node, count in on.items():
        assert count * gpus * 1000 <= cache.nodes[node].free.get(GPU, 0)
    # Best fit: the fitting domain with the least free GPUs (the one it fills most).
    assert fitting[found.domain] == min(fitting.values())
    assert explain_together(gang(pods, gpus), cache) == ""


def cache_free(cache: CapacityCache, rack: str) -> int:
    return sum(
        s.free.get(GPU, 0) for s in cache.nodes.values() if s.labels.get(RACK) == rack
    )


def test_scattered_room_does_not_make_a_domain() -> None:
    """4 x 8 GPUs needed in one rack: r0 has 3 whole nodes, r1 2 whole and scraps; together
    they hold far more than 32 GPUs, yet no rack holds the gang."""
    cache = cluster([("a0", 8, "r0"), ("a1", 8, "r0"), ("a2", 8, "r0"), ("a3", 4, "r0"),
                     ("b0", 8, "r1"), ("b1", 8, "r1"), ("b2", 6, "r1")])
    assert place_together(gang(4, 8), cache) is None
    why = explain_together(gang(4, 8), cache)
    assert why == (
        f"needs 4 pods x 8 {GPU} in one {RACK}; the best domain (r0) has room for 3"
    )
    # Preferred: the rack first, then anywhere.
    found = place_together(gang(4, 8, required=False), cache)
    assert found is not None and found.level is None


def test_a_preferred_gang_that_fits_in_a_rack_stays_in_it() -> None:
    cache = cluster([("a0", 8, "r0"), ("b0", 8, "r1"), ("b1", 8, "r1")])
    found = place_together(gang(2, 8, required=False), cache)
    assert found is not None and (found.level, found.domain) == (RACK, "r1")


def test_nodes_without_the_label_are_no_domain() -> None:
    cache = cluster([("a0", 8, None)])
    assert place_together(gang(1, 8), cache) is None
    assert "no schedulable node has the label" in explain_together(gang(1, 8), cache)


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        ({}, None),
        ({"kube-queue.io/topology-required": RACK}, TopologyRequest(RACK, True)),
        ({"kueue.x-k8s.io/podset-preferred-topology": RACK}, TopologyRequest(RACK, False)),
    ],
)
def test_the_annotations_are_read(annotations: dict[str, str], expected: object) -> None:
    assert topology_of(annotations, "job") == expected


@pytest.mark.parametrize(
    "annotations",
    [
        {"kube-queue.io/topology-required": "not a label key!"},
        {"kube-queue.io/topology-required": ""},
        {"kube-queue.io/topology-required": RACK, "kube-queue.io/topology-preferred": RACK},
    ],
)
def test_bad_topology_annotations_are_refused_by_name(annotations: dict[str, str]) -> None:
    with pytest.raises(DemandError) as refused:
        topology_of(annotations, "job")
    assert refused.value.reason == "InvalidTopology"


# ----------------------------------------------------------------- through the admission cycle
def _cycle_world(*nodes: tuple[str, str, int]):  # type: ignore[no-untyped-def]
    from kubequeue.admission.cycle import AdmissionCycle
    from kubequeue.admission.tracker import JobTracker
    from kubequeue.capacity.reservations import Reservations
    from kubequeue.kinds.job import JobKind
    from kubequeue.queueing.queue import JobQueue

    cache = CapacityCache()
    for name, rack, gpus in nodes:
        cache.upsert_node(b.node(name, gpu=gpus, labels={RACK: rack}))
    tracker = JobTracker(cache, JobQueue(), Reservations(cache))
    tracker.register(JobKind())
    return tracker, AdmissionCycle(tracker), JobKind()


def test_a_job_asking_on_itself_is_admitted_into_one_rack_and_told_why_when_not() -> None:
    tracker, cycle, kind = _cycle_world(
        ("a0", "r0", 8), ("a1", "r0", 4), ("b0", "r1", 8), ("b1", "r1", 8)
    )
    asks = {"kube-queue.io/topology-required": RACK}
    tracker.observe(kind, b.job("gang", {"cpu": "1", GPU: "8"}, parallelism=2, annotations=asks))
    [admission] = cycle.run().admitted
    assert {a.node for a in admission.assignments} == {"b0", "b1"}
    # Now 12 GPUs are free (8 + 4 in r0), but not 2 x 8 in one rack.
    tracker.observe(kind, b.job("gang2", {"cpu": "1", GPU: "8"}, parallelism=2, annotations=asks,
                                created="2026-01-01T00:00:01Z"))
    result = cycle.run()
    assert result.admitted == []
    cycle.explain_deferred()
    job = tracker.queue.get(("Job", "default", "gang2"))
    assert job is not None
    assert job.wait_reason == (
        f"needs 2 pods x 8 {GPU} in one {RACK}; the best domain (r0) has room for 1"
    )


def test_a_malformed_topology_is_a_verdict_on_the_job() -> None:
    tracker, cycle, kind = _cycle_world(("a0", "r0", 8))
    bad = {"kube-queue.io/topology-required": "rack please"}
    tracker.observe(kind, b.job("bad", {"cpu": "1", GPU: "1"}, annotations=bad))
    assert cycle.run().admitted == []
    job = tracker.queue.get(("Job", "default", "bad"))
    assert job is not None and job.problem_reason == "InvalidTopology"


def test_a_preferred_gang_falls_back_one_declared_level_at_a_time() -> None:
    """Racks inside blocks: no rack holds 3 x 8 GPUs, block b1 (racks r1, r2) does; declared
    levels send the preferred gang there before "anywhere"."""
    block = "example.com/block"
    cache = CapacityCache()
    for name, rack, blk in (("a0", "r0", "b0"), ("c0", "r1", "b1"), ("c1", "r1", "b1"),
                            ("d0", "r2", "b1"), ("e0", "r3", "b2")):
        cache.upsert_node(b.node(name, gpu=8, labels={RACK: rack, block: blk}))
    cache.topology_levels = (block, RACK)
    found = place_together(gang(3, 8, required=False), cache, cache.topology_levels)
    assert found is not None and (found.level, found.domain) == (block, "b1")
    assert {a.node for a in found.assignments} == {"c0", "c1", "d0"}
    # Undeclared: straight from the rack to anywhere.
    found = place_together(gang(3, 8, required=False), cache)
    assert found is not None and found.level is None
