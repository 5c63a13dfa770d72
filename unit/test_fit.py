"""Per-node gang fit against a real CapacityCache (no cluster needed: pure logic)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kubequeue.capacity.cache import CapacityCache
from kubequeue.capacity.fit import explain, place
from kubequeue.demand import PodSet, pod_set_from_template
from kubequeue.resources import GPU
from unit import builders as b


def gpu_set(count: int, gpus: int, cpu: str = "1", **spec_kw) -> PodSet:
    template = {"spec": b.pod_spec({"cpu": cpu, "memory": "1Gi", GPU: str(gpus)}, **spec_kw)}
    return pod_set_from_template("main", count, template, "t")


def cluster(*nodes) -> CapacityCache:
    cache = CapacityCache()
    for n in nodes:
        cache.upsert_node(n)
    return cache


def test_one_pod_of_four_gpus_does_not_fit_on_two_nodes_of_two() -> None:
    cache = cluster(b.node("a", gpu=2), b.node("b", gpu=2))
    assert place([gpu_set(1, 4)], cache) is None
    assert "needs 4 nvidia.com/gpu on one node" in explain([gpu_set(1, 4)], cache)


def test_two_pods_of_two_gpus_fit_one_per_node() -> None:
    cache = cluster(b.node("a", gpu=2), b.node("b", gpu=2))
    placed = place([gpu_set(2, 2)], cache)
    assert placed is not None
    assert sorted((a.node, a.count) for a in placed) == [("a", 1), ("b", 1)]


def test_gang_is_all_or_nothing() -> None:
    cache = cluster(b.node("a", gpu=4))
    assert place([gpu_set(3, 2)], cache) is None
    assert "only 2 fit" in explain([gpu_set(3, 2)], cache)


def test_running_pods_of_anyone_use_capacity() -> None:
    cache = cluster(b.node("a", gpu=4))
    cache.upsert_pod(b.pod("other", "a", {"cpu": "1", GPU: "3"}), None)
    assert place([gpu_set(1, 2)], cache) is None
    assert "the most any eligible node has free is 1" in explain([gpu_set(1, 2)], cache)


def test_terminal_and_deleted_pods_free_capacity() -> None:
    cache = cluster(b.node("a", gpu=4))
    p = b.pod("p", "a", {GPU: "4"})
    cache.upsert_pod(p, None)
    assert place([gpu_set(1, 1)], cache) is None
    before = cache.freed_generation
    done = b.pod("p", "a", {GPU: "4"}, phase="Succeeded", uid=p.metadata.uid)
    cache.upsert_pod(done, None)
    assert cache.freed_generation > before
    assert place([gpu_set(1, 1)], cache) is not None


def test_cpu_and_memory_must_fit_on_the_same_node_as_the_gpus() -> None:
    cache = cluster(b.node("gpu", cpu="2", gpu=8), b.node("cpu", cpu="64"))
    assert place([gpu_set(1, 1, cpu="4")], cache) is None
    assert "cpu" in explain([gpu_set(1, 1, cpu="4")], cache)


def test_not_ready_cordoned_and_tainted_nodes_take_nothing() -> None:
    cache = cluster(
        b.node("down", gpu=8, ready=False),
        b.node("cordoned", gpu=8, unschedulable=True),
        b.node("tainted", gpu=8, taints=[{"key": "gpu", "value": "x", "effect": "NoSchedule"}]),
    )
    assert place([gpu_set(1, 1)], cache) is None
    assert "no schedulable node without taints" in explain([gpu_set(1, 1)], cache)
    tolerant = gpu_set(1, 1, tolerations=[{"key": "gpu", "operator": "Exists"}])
    placed = place([tolerant], cache)
    assert placed is not None
    assert placed[0].node == "tainted"


def test_node_selector_limits_candidates() -> None:
    cache = cluster(
        b.node("a", gpu=8, labels={"zone": "a"}), b.node("b", gpu=8, labels={"zone": "b"})
    )
    placed = place([gpu_set(1, 8, node_selector={"zone": "b"})], cache)
    assert placed is not None
    assert placed[0].node == "b"
    assert "no schedulable node matches nodeSelector zone=c" in explain(
        [gpu_set(1, 1, node_selector={"zone": "c"})], cache
    )


def test_unknown_resource_is_explained() -> None:
    cache = cluster(b.node("a", gpu=8))
    template = {"spec": b.pod_spec({"example.com/fpga": "1"})}
    ps = pod_set_from_template("main", 1, template, "t")
    assert place([ps], cache) is None
    assert "no eligible node offers example.com/fpga at all" in explain([ps], cache)


def test_pod_slots_count() -> None:
    cache = cluster(b.node("a", gpu=8, pods="2"))
    assert place([gpu_set(3, 0)], cache) is None
    assert place([gpu_set(2, 0)], cache) is not None


def test_best_fit_prefers_the_tightest_gpu_node() -> None:
    cache = cluster(b.node("big", gpu=8), b.node("small", gpu=2))
    placed = place([gpu_set(1, 2)], cache)
    assert placed is not None
    assert placed[0].node == "small"


def test_never_fits_judges_against_allocatable() -> None:
    cache = cluster(b.node("a", gpu=4))
    cache.upsert_pod(b.pod("x", "a", {GPU: "4"}), None)
    assert explain([gpu_set(1, 2)], cache, empty_cluster=True) == ""
    assert "the most any eligible node has is 4" in explain(
        [gpu_set(1, 8)], cache, empty_cluster=True
    )


def test_many_nodes_go_through_the_index() -> None:
    nodes = [b.node(f"n{i}", gpu=8) for i in range(200)]
    cache = cluster(*nodes)
    for i in range(200):
        cache.upsert_pod(b.pod(f"p{i}", f"n{i}", {GPU: "8" if i != 137 else "4"}), None)
    placed = place([gpu_set(1, 4)], cache)
    assert placed is not None
    assert placed[0].node == "n137"
    assert place([gpu_set(2, 4)], cache) is None


@pytest.mark.xfail(strict=True, reason="greedy placement misses it (fixed next)")
def test_gang_placement_is_not_lost_to_the_greedy_order() -> None:
    """First-fit decreasing puts a (the GPU pod) on n0, the only node with memory, and then b
    has nowhere to go; a on n1 and b on n0 fits. Found by comparing with a brute force."""
    cache = cluster(
        b.node("n0", cpu="2", memory="4Gi", gpu=1), b.node("n1", cpu="4", memory="0", gpu=1)
    )
    a = pod_set_from_template("a", 1, {"spec": b.pod_spec({"cpu": "2", GPU: "1"})}, "t")
    b_ = pod_set_from_template("b", 1, {"spec": b.pod_spec({"cpu": "2", "memory": "2Gi"})}, "t")
    placed = place([a, b_], cache)
    assert placed is not None
    assert sorted((x.pod_set, x.node, x.count) for x in placed) == [("a", "n1", 1), ("b", "n0", 1)]
    assert explain([a, b_], cache) == ""
    assert explain([a, b_], cache, empty_cluster=True) == ""


# --------------------------------------------------------------------------- properties
node_st = st.builds(
    lambda i, cpu, gpu, pods: b.node(f"n{i}", cpu=str(cpu), memory="64Gi", gpu=gpu, pods=str(pods)),
    st.integers(0, 10**6),
    st.integers(1, 64),
    st.integers(0, 8),
    st.integers(1, 20),
)
set_st = st.builds(
    lambda count, gpus, cpu: gpu_set(count, gpus, cpu=f"{cpu}m"),
    st.integers(0, 12),
    st.integers(0, 8),
    st.integers(1, 16000),
)


@settings(max_examples=300, deadline=None)
@given(
    nodes=st.lists(node_st, min_size=1, max_size=12, unique_by=lambda n: n.metadata.name),
    used=st.lists(
        st.tuples(st.integers(0, 11), st.integers(0, 8), st.integers(0, 8000)), max_size=10
    ),
    pod_sets=st.lists(set_st, min_size=1, max_size=3),
)
def test_a_placement_never_overcommits_any_node(nodes, used, pod_sets) -> None:
    cache = cluster(*nodes)
    for i, (idx, gpus, cpu) in enumerate(used):
        n = nodes[idx % len(nodes)]
        cache.upsert_pod(b.pod(f"u{i}", n.metadata.name, {GPU: str(gpus), "cpu": f"{cpu}m"}), None)
    pod_sets = [
        PodSet(f"s{i}", ps.count, ps.request, ps.constraints) for i, ps in enumerate(pod_sets)
    ]
    placed = place(pod_sets, cache)
    if placed is None:
        assert explain(pod_sets, cache) != ""
        return
    assert explain(pod_sets, cache) == ""
    per_set = {ps.name: 0 for ps in pod_sets}
    taken: dict[str, dict[str, int]] = {}
    for a in placed:
        per_set[a.pod_set] += a.count
        t = taken.setdefault(a.node, {})
        for res, amount in a.request.items():
            t[res] = t.get(res, 0) + amount * a.count
    assert per_set == {ps.name: ps.count for ps in pod_sets}
    for node, t in taken.items():
        free = cache.nodes[node].free
        for res, amount in t.items():
            assert amount <= free.get(res, 0), (node, res, amount, free)


@settings(max_examples=200, deadline=None)
@given(
    nodes=st.lists(node_st, min_size=1, max_size=8, unique_by=lambda n: n.metadata.name), ps=set_st
)
def test_single_pod_set_fits_iff_capacity_sum_allows(nodes, ps) -> None:
    """For one pod set, first-fit is exact: it fits iff the per-node copy counts add up."""
    cache = cluster(*nodes)
    capacity = 0
    for n in nodes:
        free = cache.nodes[n.metadata.name].free
        copies = min((free.get(r, 0) // a for r, a in ps.request.items() if a), default=ps.count)
        capacity += copies
    assert (place([ps], cache) is not None) == (capacity >= ps.count)
