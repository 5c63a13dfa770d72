"""The capacity cache's own bookkeeping: what a deleted node leaves behind."""

from __future__ import annotations

from kubequeue.capacity.cache import CapacityCache
from kubequeue.capacity.fit import explain
from kubequeue.demand import PodSet, pod_set_from_template
from kubequeue.resources import GPU
from unit import builders as b


def _gpu_set(gpus: int) -> PodSet:
    return pod_set_from_template(
        "main", 1, {"spec": b.pod_spec({"cpu": "1", GPU: str(gpus)})}, "test"
    )


def test_explanations_never_cite_a_deleted_node() -> None:
    """Regression: delete_node did not move the cache version, so the memoised "most free"
    figure still named the deleted node's GPUs."""
    cache = CapacityCache()
    cache.upsert_node(b.node("small", gpu=2))
    cache.upsert_node(b.node("big", gpu=6))
    too_big = [_gpu_set(8)]
    assert "the most any eligible node has free is 6" in explain(too_big, cache)
    version = cache.version
    cache.delete_node("big")
    assert cache.version > version
    assert "the most any eligible node has free is 2" in explain(too_big, cache)


def test_a_deleted_node_with_pods_stays_accounted_until_they_go() -> None:
    cache = CapacityCache()
    cache.upsert_node(b.node("n", gpu=4))
    cache.upsert_pod(b.pod("p", "n", {GPU: "1"}, uid="p"), None)
    cache.delete_node("n")
    assert "n" in cache.nodes and not cache.nodes["n"].schedulable
    cache.delete_pod("p")
    assert "n" not in cache.nodes


def test_a_deleted_node_goes_once_its_last_reservation_and_pod_go() -> None:
    """Regression: an emptied reservation vector ({gpu: 0}) counted as "still reserved", so a
    deleted node's entry was never dropped."""
    cache = CapacityCache()
    cache.upsert_node(b.node("n", gpu=4))
    cache.reserve("n", {GPU: 1000}, 1)
    cache.upsert_pod(b.pod("p", "n", {GPU: "1"}, uid="p"), None)
    cache.unreserve("n", {GPU: 1000}, 1)
    cache.delete_node("n")
    cache.delete_pod("p")
    assert "n" not in cache.nodes
