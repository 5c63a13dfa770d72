"""Victim selection by per-node simulation, against a brute force over every subset of the
candidates on small random clusters: it preempts iff some set of candidates makes the job fit,
every victim it picks is needed, and it never preempts for capacity that is already leaving."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from kubequeue.capacity.cache import CapacityCache
from kubequeue.capacity.fit import place
from kubequeue.capacity.victims import Candidate, choose_victims
from kubequeue.demand import PodSet, pod_set_from_template
from kubequeue.resources import GPU
from unit import builders as b


def pod_set(name: str, count: int, gpus: int, cpu: int = 1) -> PodSet:
    requests = {"cpu": str(cpu)}
    if gpus:
        requests[GPU] = str(gpus)
    return pod_set_from_template(name, count, {"spec": b.pod_spec(requests)}, "t")


def job_key(i: int) -> tuple[str, str, str]:
    return ("Job", "ns", f"j{i}")


def build(
    nodes: list[int], jobs: list[list[tuple[int, int]]], foreign: list[tuple[int, int]]
) -> CapacityCache:
    """Nodes with the given GPUs (8 CPUs each); jobs as lists of (node, gpus) pods."""
    cache = CapacityCache()
    for n, gpus in enumerate(nodes):
        cache.upsert_node(b.node(f"n{n}", cpu="8", gpu=gpus))
    for i, pods in enumerate(jobs):
        for k, (node, gpus) in enumerate(pods):
            pod = b.pod(f"j{i}-{k}", f"n{node}", {"cpu": "1", GPU: str(gpus)}, uid=f"j{i}-{k}")
            cache.upsert_pod(pod, (job_key(i), None))
    for k, (node, gpus) in enumerate(foreign):
        cache.upsert_pod(b.pod(f"f{k}", f"n{node}", {GPU: str(gpus)}, uid=f"f{k}"), None)
    return cache


def candidates(cache: CapacityCache, count: int) -> list[Candidate]:
    return [Candidate(job_key(i), cache.footprint(job_key(i))) for i in range(count)]


def fits_without(cache: CapacityCache, gone: list[Candidate], pod_sets: list[PodSet]) -> bool:
    scratch = cache.scratch()
    for c in gone:
        for node, amounts in c.footprint.items():
            scratch.adjust_free(node, amounts, +1)
    return place(pod_sets, scratch) is not None


def test_the_issue_case_frees_the_node_that_can_hold_the_job() -> None:
    """2 nodes x 8 GPUs; A and B (4 GPUs each) on n0, C (4) on n1 beside a foreign 4-GPU pod; an
    8-GPU pod can only use n0: preempt A and B, never C (whichever order they are offered)."""
    cache = build([8, 8], [[(0, 4)], [(0, 4)], [(1, 4)]], [(1, 4)])
    big = [pod_set("main", 1, 8)]
    for order in itertools.permutations(candidates(cache, 3)):
        choice = choose_victims(big, cache.scratch(), list(order))
        assert choice is not None
        assert sorted(c.key[2] for c in choice.victims) == ["j0", "j1"]
        assert {a.node for a in choice.placement} == {"n0"}


def test_capacity_already_leaving_means_waiting_not_preempting() -> None:
    cache = build([8], [[(0, 4)], [(0, 4)]], [])
    leaving = cache.footprint(job_key(0))  # j0 was suspended; its pod is terminating
    choice = choose_victims(
        [pod_set("main", 1, 4)], cache.scratch(), candidates(cache, 2)[1:], leaving=leaving
    )
    assert choice is not None and choice.wait_only and choice.victims == []


def test_nothing_is_preempted_when_no_set_of_candidates_helps() -> None:
    cache = build([4, 4], [[(0, 2)], [(1, 2)]], [])
    assert choose_victims([pod_set("main", 1, 8)], cache.scratch(), candidates(cache, 2)) is None


def test_a_condition_beyond_capacity_is_honoured() -> None:
    """``allowed`` (the preemptor's quota with the victims gone) must hold for the result."""
    cache = build([8], [[(0, 2)], [(0, 2)], [(0, 2)]], [])
    choice = choose_victims(
        [pod_set("main", 1, 2)],
        cache.scratch(),
        candidates(cache, 3),
        allowed=lambda chosen: len(chosen) >= 2,
    )
    assert choice is not None and len(choice.victims) == 2


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.sampled_from([2, 4, 8]), min_size=1, max_size=3),
    st.lists(
        st.lists(st.tuples(st.integers(0, 2), st.sampled_from([1, 2, 4])), min_size=1, max_size=2),
        max_size=4,
    ),
    st.lists(st.tuples(st.integers(0, 2), st.sampled_from([1, 2])), max_size=2),
    st.lists(st.tuples(st.integers(1, 2), st.sampled_from([1, 2, 4, 8])), min_size=1, max_size=2),
)
def test_victims_match_a_brute_force_and_each_one_is_needed(
    nodes: list[int],
    jobs: list[list[tuple[int, int]]],
    foreign: list[tuple[int, int]],
    wanted: list[tuple[int, int]],
) -> None:
    # Keep only pods that land on existing nodes with room (a real cluster is not over-full).
    room = list(nodes)
    placed_jobs: list[list[tuple[int, int]]] = []
    for pods in jobs:
        kept = []
        for node, gpus in pods:
            if node < len(nodes) and room[node] >= gpus:
                room[node] -= gpus
                kept.append((node, gpus))
        if kept:
            placed_jobs.append(kept)
    kept_foreign = []
    for node, gpus in foreign:
        if node < len(nodes) and room[node] >= gpus:
            room[node] -= gpus
            kept_foreign.append((node, gpus))
    cache = build(nodes, placed_jobs, kept_foreign)
    pod_sets = [pod_set(f"s{i}", count, gpus) for i, (count, gpus) in enumerate(wanted)]
    offered = candidates(cache, len(placed_jobs))
    choice = choose_victims(pod_sets, cache.scratch(), offered)
    possible = any(
        fits_without(cache, list(subset), pod_sets)
        for r in range(len(offered) + 1)
        for subset in itertools.combinations(offered, r)
    )
    assert (choice is not None) == possible
    if choice is None:
        return
    keys = [c.key for c in choice.victims]
    assert len(set(keys)) == len(keys) and set(keys) <= {c.key for c in offered}
    assert fits_without(cache, choice.victims, pod_sets)
    assert choice.wait_only == (not choice.victims) == fits_without(cache, [], pod_sets)
    for victim in choice.victims:
        rest = [c for c in choice.victims if c is not victim]
        assert not fits_without(cache, rest, pod_sets), f"{victim.key} was not needed"
