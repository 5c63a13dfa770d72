"""Per-node gang fit against a real CapacityCache (no cluster needed: pure logic)."""

from __future__ import annotations

import random
import time
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from kubequeue.capacity import fit
from kubequeue.capacity.cache import CapacityCache
from kubequeue.capacity.fit import explain, place, place_counted
from kubequeue.demand import PodSet, pod_set_from_template
from kubequeue.resources import GPU, max_copies
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


# --------------------------------------------------------------------------- exact gang search
# Small instances, where an exhaustive brute force is cheap: within these bounds (at most 4
# nodes, 3 pod sets, 3 pods per set) the search behind the greedy pass never runs out of steps,
# so place() finds a placement exactly when one exists.
MAX_NODES, MAX_SETS, MAX_COUNT = 4, 3, 3
ZONE_TAINT = {"key": "dedicated", "value": "x", "effect": "NoSchedule"}

small_node_st = st.tuples(
    st.integers(0, 8),  # cpu cores
    st.integers(0, 8),  # memory GiB
    st.integers(0, 4),  # GPUs
    st.sampled_from(["110", "110", "110", "2", "1"]),  # pod slots
    st.sampled_from(["a", "b"]),  # zone label
    st.sampled_from([False, False, False, True]),  # tainted
)
small_set_st = st.tuples(
    st.integers(1, MAX_COUNT),
    st.sampled_from([0, 500, 1000, 2000, 3000]),  # cpu millicores per pod
    st.integers(0, 3),  # memory GiB per pod
    st.integers(0, 2),  # GPUs per pod
    st.sampled_from([None, None, None, "a", "b"]),  # zone selector
    st.booleans(),  # tolerates the taint
)
small_used_st = st.lists(
    st.tuples(st.integers(0, MAX_NODES - 1), st.integers(0, 2000), st.integers(0, 2)), max_size=3
)


def small_instance(nodes, sets, used, reverse=False) -> tuple[CapacityCache, list[PodSet]]:
    made = [
        b.node(
            f"n{i}",
            cpu=str(cpu),
            memory=f"{mem}Gi",
            gpu=gpu,
            pods=slots,
            labels={"zone": zone},
            taints=[ZONE_TAINT] if tainted else None,
        )
        for i, (cpu, mem, gpu, slots, zone, tainted) in enumerate(nodes)
    ]
    cache = cluster(*(reversed(made) if reverse else made))
    for k, (idx, cpu, gpu) in enumerate(used):
        node = f"n{idx % len(nodes)}"
        cache.upsert_pod(b.pod(f"u{k}", node, {"cpu": f"{cpu}m", GPU: str(gpu)}, uid=f"u{k}"), None)
    pod_sets = []
    for k, (count, cpu, mem, gpu, zone, tolerant) in enumerate(sets):
        spec = b.pod_spec(
            {"cpu": f"{cpu}m", "memory": f"{mem}Gi", GPU: str(gpu)},
            node_selector={"zone": zone} if zone else None,
            tolerations=[{"key": "dedicated", "operator": "Exists"}] if tolerant else None,
        )
        pod_sets.append(pod_set_from_template(f"s{k}", count, {"spec": spec}, "t"))
    return cache, pod_sets


def view(cache: CapacityCache, empty_cluster: bool) -> dict[str, dict[str, int]]:
    return {n: dict(s.allocatable if empty_cluster else s.free) for n, s in cache.nodes.items()}


def brute_force(
    pod_sets: list[PodSet], cache: CapacityCache, empty_cluster: bool = False
) -> list[tuple[str, str, int]] | None:
    """Every way to split every pod set over its feasible nodes, until one fits: the reference.
    Exponential, so only for small instances."""
    free = view(cache, empty_cluster)
    sets = [ps for ps in pod_sets if ps.count > 0]

    def splits(count: int, nodes: list[str]):
        if not nodes:
            if not count:
                yield []
            return
        for k in range(count + 1):
            for rest in splits(count - k, nodes[1:]):
                yield [(nodes[0], k), *rest] if k else rest

    def solve(i: int) -> list[tuple[str, str, int]] | None:
        if i == len(sets):
            return []
        ps = sets[i]
        for split in splits(ps.count, sorted(cache.feasible(ps.constraints))):
            if all(
                amount * k <= free[n].get(res, 0)
                for n, k in split
                for res, amount in ps.request.items()
            ):
                for n, k in split:
                    for res, amount in ps.request.items():
                        free[n][res] = free[n].get(res, 0) - amount * k
                rest = solve(i + 1)
                for n, k in split:
                    for res, amount in ps.request.items():
                        free[n][res] += amount * k
                if rest is not None:
                    return [(ps.name, n, k) for n, k in split] + rest
        return None

    return solve(0)


def assert_valid(placed, pod_sets: list[PodSet], cache: CapacityCache) -> None:
    """Every pod placed, only on nodes its set may use, no node over its free capacity."""
    per_set = {ps.name: 0 for ps in pod_sets}
    taken: dict[str, dict[str, int]] = {}
    by_name = {ps.name: ps for ps in pod_sets}
    for a in placed:
        assert a.count > 0
        assert a.request == by_name[a.pod_set].request
        assert a.node in cache.feasible(by_name[a.pod_set].constraints), a
        per_set[a.pod_set] += a.count
        t = taken.setdefault(a.node, {})
        for res, amount in a.request.items():
            t[res] = t.get(res, 0) + amount * a.count
    assert per_set == {ps.name: ps.count for ps in pod_sets}
    for node, t in taken.items():
        free = cache.nodes[node].free
        for res, amount in t.items():
            assert amount <= free.get(res, 0), (node, res, amount, free)


def greedy_reference(pod_sets: list[PodSet], cache: CapacityCache):
    """The first-fit decreasing pass alone (what place() was before the search)."""
    scratch: dict[str, dict[str, int]] = {}
    out: list = []
    for ps in sorted(pod_sets, key=fit._size_key):
        if fit._place_set(ps, cache, scratch, out):
            return None
    return out


def check_instance(nodes, sets, used) -> str:
    """The properties of place() and explain() on one small instance; returns what happened
    (``greedy``: the greedy pass found it, ``search``: only the search did, ``none``: none
    exists)."""
    cache, pod_sets = small_instance(nodes, sets, used)
    placed = place(pod_sets, cache)
    reference = brute_force(pod_sets, cache)
    # (a) valid; (b) exact: found iff the brute force finds one
    if placed is not None:
        assert_valid(placed, pod_sets, cache)
    assert (placed is None) == (reference is None), (reference, placed)
    # the search alone never runs out of steps within these bounds, on either view
    for empty in (False, True):
        found, settled = fit._search(pod_sets, cache, empty_cluster=empty)
        assert settled
        assert (found is None) == (brute_force(pod_sets, cache, empty) is None)
    # the greedy pass stays the fast path: when it succeeds, its placement is the answer
    greedy = greedy_reference(pod_sets, cache)
    if greedy is not None:
        assert placed == greedy
    # deterministic: the same again, and on a cache built in another order
    assert place(pod_sets, cache) == placed
    rebuilt, _ = small_instance(nodes, sets, used, reverse=True)
    assert place(pod_sets, rebuilt) == placed
    # explain agrees with place, and against allocatable with the brute force on allocatable
    why = explain(pod_sets, cache)
    assert (why == "") == (placed is not None), why
    never = explain(pod_sets, cache, empty_cluster=True)
    assert (never == "") == (brute_force(pod_sets, cache, empty_cluster=True) is not None), never
    for text, empty in ((why, False), (never, True)):
        if " only " in text:  # "only K fit": K is what that pod set can get, on its own
            name = text.split(": ")[0] if len(pod_sets) > 1 else pod_sets[0].name
            ps = next(p for p in pod_sets if p.name == name)
            only = int(text.split(" only ")[1].split(" ")[0])
            assert only == alone_capacity(ps, cache, empty) < ps.count, text
    if placed is None:
        return "none"
    return "greedy" if greedy is not None else "search"


def alone_capacity(ps: PodSet, cache: CapacityCache, empty_cluster: bool) -> int:
    free = view(cache, empty_cluster)
    return min(
        ps.count,
        sum(max_copies(ps.request, free[n], ps.count) for n in cache.feasible(ps.constraints)),
    )


@settings(max_examples=1000, deadline=None)
@given(
    nodes=st.lists(small_node_st, min_size=1, max_size=MAX_NODES),
    sets=st.lists(small_set_st, min_size=1, max_size=MAX_SETS),
    used=small_used_st,
)
def test_gang_search_finds_a_placement_whenever_one_exists(nodes, sets, used) -> None:
    check_instance(nodes, sets, used)


def test_gang_search_on_a_seeded_sweep_of_small_instances() -> None:
    """The same properties on plain random instances (hypothesis favours edge cases), counting
    the cases the greedy pass alone gets wrong, so this test is known to exercise the search."""
    rng = random.Random(7)
    seen: Counter[str] = Counter()
    for _ in range(3000):
        nodes = [
            (
                rng.randint(0, 8),
                rng.randint(0, 8),
                rng.randint(0, 4),
                rng.choice(["110", "110", "110", "2", "1"]),
                rng.choice("ab"),
                rng.random() < 0.2,
            )
            for _ in range(rng.randint(1, MAX_NODES))
        ]
        sets = [
            (
                rng.randint(1, MAX_COUNT),
                rng.choice([0, 500, 1000, 2000, 3000]),
                rng.randint(0, 3),
                rng.randint(0, 2),
                rng.choice([None, None, None, "a", "b"]),
                rng.random() < 0.5,
            )
            for _ in range(rng.randint(1, MAX_SETS))
        ]
        used = [
            (rng.randint(0, MAX_NODES - 1), rng.randint(0, 2000), rng.randint(0, 2))
            for _ in range(rng.randint(0, 3))
        ]
        seen[check_instance(nodes, sets, used)] += 1
    assert seen["search"] >= 5, seen  # placements the greedy pass alone misses
    assert seen["greedy"] >= 300, seen


def test_search_budget_covers_the_exact_bounds() -> None:
    """Why the search never runs out of steps within MAX_NODES, MAX_SETS and MAX_COUNT.

    Pod sets of one shape are merged and the shape with the most pods goes last, where it costs
    no steps; so at most MAX_SETS - 1 levels split at most MAX_COUNT pods (a merged shape has
    more, but then there are at most two shapes and the other, unmerged one is split) over at
    most MAX_NODES nodes. A level costs at most one step per node (sorting it into a class, or
    charging it as private), plus one per value tried at a node (counted below with no pruning,
    so an upper bound), plus one probe per later shape for each value above zero. The first
    level is entered once, each deeper one once per split of the level above."""

    def tried(m: int, r: int) -> tuple[int, int, int]:
        """(values above zero, zeros, complete splits) tried for r pods over m nodes."""
        positive = zeros = splits = 0

        def walk(p: int, left: int) -> None:
            nonlocal positive, zeros, splits
            for k in range(left, (left if p == m - 1 else 0) - 1, -1):
                positive += k > 0
                zeros += k == 0
                if k == left:
                    splits += 1
                else:
                    walk(p + 1, left - k)

        walk(0, r)
        return positive, zeros, splits

    positive, zeros, splits = tried(MAX_NODES, MAX_COUNT)
    per_level = MAX_NODES + zeros + positive * (1 + (MAX_SETS - 1))
    entries, level_entries = 0, 1
    for _ in range(MAX_SETS - 1):
        entries += level_entries
        level_entries *= splits
    assert (positive, zeros, splits) == (29, 10, 20)
    assert per_level * entries == 101 * 21 <= fit._SEARCH_STEPS


def test_one_small_pod_set_plus_a_big_one_is_exact_on_many_nodes() -> None:
    """The usual gang (a launcher, head or driver plus workers) costs ~3 steps per node the
    small set may use, so the search settles it on about a thousand distinct nodes: here no
    node can take the launcher without losing the worker it must hold, so every node is tried."""
    cache = cluster(
        *(b.node(f"n{i:04d}", cpu="1400m", memory=f"{1000 + i}Mi", gpu=1) for i in range(1000))
    )
    launcher = pod_set_from_template("launcher", 1, {"spec": b.pod_spec({"cpu": "500m"})}, "t")
    workers = pod_set_from_template(
        "workers", 1000, {"spec": b.pod_spec({"cpu": "1", GPU: "1"})}, "t"
    )
    assert fit._search([launcher, workers], cache, empty_cluster=False) == (None, True)
    assert place([launcher, workers], cache) is None
    assert explain([launcher, workers], cache).endswith(
        "each pod set fits on its own, but no placement fits them all on free capacity now"
    )
    # One node with room for both: found, wherever it is in the node order.
    cache.upsert_node(b.node("n0500", cpu="1500m", gpu=1))
    placed = place([launcher, workers], cache)
    assert placed is not None
    assert_valid(placed, [launcher, workers], cache)
    assert [(a.node, a.count) for a in placed if a.pod_set == "launcher"] == [("n0500", 1)]


def test_a_hard_gang_gives_up_within_the_budget_and_says_so() -> None:
    """Every set fits alone and in total, but not together (each node holds one 2-GPU pod, of
    either set); on distinct nodes no symmetry or bound cuts the splits short: the search stops
    at its step limit, place says no, explain says what is known, and "can never fit" is not
    claimed without a proof."""
    cache = cluster(*(b.node(f"n{i:03d}", cpu=f"{16000 + i}m", gpu=3) for i in range(300)))
    a = pod_set_from_template("a", 200, {"spec": b.pod_spec({"cpu": "1", GPU: "2"})}, "t")
    c = pod_set_from_template("c", 250, {"spec": b.pod_spec({"cpu": "2", GPU: "2"})}, "t")
    started = time.perf_counter()
    assert fit._search([a, c], cache, empty_cluster=False) == (None, False)
    assert time.perf_counter() - started < 2  # a few ms; generous for a loaded test machine
    assert place([a, c], cache) is None
    assert explain([a, c], cache) == (
        "a: needs 200 pods of (cpu=1, nvidia.com/gpu=2) placed together with the other pod "
        "sets; each pod set fits on its own, but no placement of them all was found on free "
        "capacity now within the search's work limit (the first try left room for 50)"
    )
    assert explain([a, c], cache, empty_cluster=True) == ""
    # Identical nodes are interchangeable: one split per count, and the "no" is a proof.
    same = cluster(*(b.node(f"n{i:03d}", cpu="16", gpu=3) for i in range(300)))
    assert fit._search([a, c], same, empty_cluster=False) == (None, True)
    assert explain([a, c], same, empty_cluster=True).endswith(
        "each pod set fits on its own, but no placement fits them all on the nodes"
    )


def test_together_but_not_alone_is_explained_truthfully() -> None:
    """Each set fits on its own; only their sum does not: no per-set count is claimed."""
    cache = cluster(b.node("n0", cpu="2", gpu=1, labels={"zone": "a"}), b.node("n1", cpu="8"))
    gpu = pod_set_from_template("a", 1, {"spec": b.pod_spec({"cpu": "1", GPU: "1"})}, "t")
    zone_a = b.pod_spec({"cpu": "2"}, node_selector={"zone": "a"})
    cpu = pod_set_from_template("b", 1, {"spec": zone_a}, "t")
    assert place([gpu, cpu], cache) is None
    assert explain([gpu, cpu], cache) == (
        "b: needs 1 pods of (cpu=2) placed together with the other pod sets; each pod set fits "
        "on its own, but no placement fits them all on free capacity now"
    )
    # A set short on its own keeps the exact per-set text (and count).
    three = pod_set_from_template("b", 3, {"spec": b.pod_spec({"cpu": "4"})}, "t")
    assert explain([gpu, three], cache) == (
        "b: needs 3 pods of (cpu=4) placed together; only 2 fit on free capacity now"
    )


@settings(max_examples=300, deadline=None)
@given(
    nodes=st.lists(node_st, min_size=1, max_size=80, unique_by=lambda n: n.metadata.name),
    used=st.lists(
        st.tuples(st.integers(0, 79), st.integers(0, 8), st.integers(0, 8000)), max_size=20
    ),
    ps=set_st,
    zeros=st.integers(0, 2),
)
def test_one_pod_set_is_placed_as_before(nodes, used, ps, zeros) -> None:
    """(c) With one pod set (and any empty ones) the greedy pass is exact and is all that runs:
    the same placement as before, and place_counted's count is the most that fit."""
    cache = cluster(*nodes)
    for i, (idx, gpus, cpu) in enumerate(used):
        n = nodes[idx % len(nodes)]
        cache.upsert_pod(b.pod(f"u{i}", n.metadata.name, {GPU: str(gpus), "cpu": f"{cpu}m"}), None)
    empty = [PodSet(f"z{i}", 0, ps.request, ps.constraints) for i in range(zeros)]
    placed = place([*empty, ps], cache)
    assert placed == greedy_reference([ps], cache)
    counted, fitted = place_counted(ps, cache)
    assert counted == placed
    assert fitted == alone_capacity(ps, cache, empty_cluster=False)


def test_without_amounts_keeps_the_reason_and_drops_what_moves_with_free_capacity() -> None:
    from kubequeue.capacity.fit import without_amounts

    cases = {
        "each pod needs 4 nvidia.com/gpu on one node; the most any eligible node has free is 2":
            "each pod needs 4 nvidia.com/gpu on one node; no eligible node has that free",
        "needs 3 pods of (cpu 1, nvidia.com/gpu 2) placed together; only 1 fit on free "
        "capacity now":
            "needs 3 pods of (cpu 1, nvidia.com/gpu 2) placed together; not all fit on free "
            "capacity now",
        "w: needs 2 pods of (cpu 1) placed together with the other pod sets; each pod set fits "
        "on its own, but no placement of them all was found on free capacity now within the "
        "search's work limit (the first try left room for 1)":
            "w: needs 2 pods of (cpu 1) placed together with the other pod sets; each pod set "
            "fits on its own, but no placement of them all was found on free capacity now "
            "within the search's work limit",
        # What the job asks for, and what the nodes are, stay.
        "each pod needs 4 nvidia.com/gpu and no eligible node offers nvidia.com/gpu at all":
            "each pod needs 4 nvidia.com/gpu and no eligible node offers nvidia.com/gpu at all",
    }
    for why, stable in cases.items():
        assert without_amounts(why) == stable
