"""capacity/topology.py: a gang in one topology domain, against a brute force."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

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


# ----------------------------------------------------------------- pod sets with their own domains
def pod_set(name: str, pods: int, gpus: int, asks: bool | None) -> PodSet:
    """``asks``: None (anywhere), True (required rack), False (preferred rack)."""
    topology = TopologyRequest(RACK, asks) if asks is not None else None
    return PodSet(name, pods, {"cpu": 1000, GPU: gpus * 1000}, NodeConstraints(), topology)


def packs(free: dict[str, int], pods: list[tuple[int, frozenset[str]]]) -> bool:
    """Brute force: can every pod (GPUs, allowed nodes) go on a node with that much free?"""
    if not pods:
        return True
    (gpus, allowed), rest = pods[0], pods[1:]
    for node in sorted(allowed):
        if free[node] >= gpus:
            free[node] -= gpus
            ok = packs(free, rest)
            free[node] += gpus
            if ok:
                return True
    return False


def brute(cache: CapacityCache, sets: list[PodSet], *, one_rack: bool, empty: bool = False) -> bool:
    """Whether the job fits with each required set in one rack of its own choosing (or, with
    ``one_rack``, all of it in one rack); ``empty``: on allocatable."""
    free = {
        n: (s.allocatable if empty else s.free).get(GPU, 0) // 1000 for n, s in cache.nodes.items()
    }
    racks = sorted({r for s in cache.nodes.values() if (r := s.labels.get(RACK)) is not None})
    in_rack = {
        r: frozenset(n for n, s in cache.nodes.items() if s.labels.get(RACK) == r) for r in racks
    }
    anywhere = frozenset(cache.nodes)
    asking = [ps for ps in sets if ps.topology is not None and ps.topology.required]
    choices: list[list[str]] = [[r] * len(asking) for r in racks] if one_rack else [[]]
    if not one_rack:
        for _ in asking:
            choices = [[*c, r] for c in choices for r in racks]
    for choice in choices:
        where = dict(zip([ps.name for ps in asking], choice, strict=True))
        pods = []
        for ps in sets:
            allowed = in_rack[where[ps.name]] if ps.name in where else anywhere
            if one_rack and racks:
                allowed = in_rack[choice[0]]
            pods += [(ps.request[GPU] // 1000, allowed)] * ps.count
        if packs(dict(free), sorted(pods, key=lambda p: -p[0])):
            return True
    return False


shape_st = st.tuples(st.integers(1, 3), st.sampled_from([1, 2, 4, 8]))


@settings(max_examples=300, deadline=None)
@given(
    nodes=st.lists(
        st.tuples(st.integers(0, 8), st.sampled_from(["r0", "r1", "r2", None])),
        min_size=1,
        max_size=6,
    ),
    master=shape_st,
    workers=shape_st,
    master_asks=st.booleans(),
)
def test_pod_sets_with_their_own_domains_are_placed_soundly(
    nodes: list[tuple[int, str | None]],
    master: tuple[int, int],
    workers: tuple[int, int],
    master_asks: bool,
) -> None:
    """Master (anywhere, or a rack of its own) + workers (a rack): every placement keeps each
    asking set's pods in one rack, within each node's free room; whenever one rack holds the
    whole job (what job scope admits) it is placed; the reason is "" exactly when it is; and a
    "never fits" is a proof (no placement even on empty nodes)."""
    from kubequeue.capacity.topology import place_job_in

    cache = cluster([(f"n{i}", free, rack) for i, (free, rack) in enumerate(nodes)])
    sets = [
        pod_set("master", *master, True if master_asks else None),
        pod_set("workers", *workers, True),
    ]
    found = place_job_in(sets, cache)
    if brute(cache, sets, one_rack=True):
        assert found is not None, "one rack holds the whole job: job scope would admit it"
    if found is None:
        assert explain_together(sets, cache) != ""
    else:
        assert explain_together(sets, cache) == ""
        assert brute(cache, sets, one_rack=False)
        used = Counter[str]()
        per_set: dict[str, set[str | None]] = {"master": set(), "workers": set()}
        for a in found.assignments:
            used[a.node] += a.count * a.request[GPU]
            per_set[a.pod_set].add(cache.nodes[a.node].labels.get(RACK))
        for node, gpus in used.items():
            assert gpus <= cache.nodes[node].free.get(GPU, 0)
        counts = Counter[str]()
        for a in found.assignments:
            counts[a.pod_set] += a.count
        assert counts == {"master": master[0], "workers": workers[0]}
        asking = ["master", "workers"] if master_asks else ["workers"]
        recorded = {d.pod_set: d.domain for d in found.domains}
        for name in asking:
            [rack] = per_set[name]  # all of the set's pods in one rack
            assert rack is not None
            assert recorded.get(name, recorded.get(None)) == rack
    never = explain_together(sets, cache, empty_cluster=True)
    if never:
        assert not brute(cache, sets, one_rack=False, empty=True), never


def test_a_master_too_big_for_the_workers_rack_goes_elsewhere_unless_the_job_says_job() -> None:
    """Rack r0 holds the two 8-GPU workers, not the 8-GPU master too: job scope refuses the
    job (no rack holds 24 GPUs), pod-set scope puts the master on the unlabelled node."""
    from kubequeue.capacity.topology import domain_annotation, place_job_in

    cache = cluster([("a0", 8, "r0"), ("a1", 8, "r0"), ("x0", 8, None)])
    sets = [pod_set("master", 1, 8, None), pod_set("workers", 2, 8, True)]
    found = place_job_in(sets, cache)
    assert found is not None
    assert {a.node for a in found.assignments if a.pod_set == "master"} == {"x0"}
    assert domain_annotation(found.domains) == f"{RACK}=r0"
    whole = [replace(ps, topology=TopologyRequest(RACK, True, whole_job=True)) for ps in sets]
    assert place_job_in(whole, cache) is None
    assert explain_together(whole, cache) == (
        f"needs all 3 pods in one {RACK}; no {RACK} domain can hold them"
    )


def test_each_set_requiring_a_rack_gets_its_own() -> None:
    cache = cluster([("a0", 8, "r0"), ("a1", 8, "r0"), ("b0", 8, "r1")])
    from kubequeue.capacity.topology import domain_annotation, place_job_in

    found = place_job_in([pod_set("ps", 1, 8, True), pod_set("workers", 2, 8, True)], cache)
    assert found is not None
    assert domain_annotation(found.domains) == f"workers={RACK}=r0,ps={RACK}=r1"
    # Told per pod set when one fits in no rack even alone.
    sets = [pod_set("ps", 1, 8, True), pod_set("workers", 3, 8, True)]
    assert place_job_in(sets, cache) is None
    assert explain_together(sets, cache) == (
        f"workers: needs 3 pods x 8 {GPU} in one {RACK}; the best domain (r0) has room for 2"
    )


def test_when_each_set_alone_fits_but_not_all_at_once_the_reason_says_so() -> None:
    """Each of two 2 x 8-GPU sets fits in rack r0 alone, and all of it fits unconfined (x0 has
    room), but not each set in a rack (r1 holds one 8-GPU pod)."""
    from kubequeue.capacity.topology import place_job_in

    cache = cluster([("a0", 8, "r0"), ("a1", 8, "r0"), ("b0", 8, "r1"), ("x0", 8, None)])
    sets = [pod_set("a", 2, 8, True), pod_set("b", 2, 8, True)]
    assert place_job_in(sets, cache) is None
    assert explain_together(sets, cache) == (
        f"each pod set fits on its own (a in one {RACK}, b in one {RACK}), but no placement "
        "was found for all of them at once, each in a domain of its own or all in one"
    )
    assert explain_together(sets, cache, empty_cluster=True) == ""  # not a proof: not said


def _kind_world(*nodes: tuple[str, str | None, int]):  # type: ignore[no-untyped-def]
    from kubequeue.admission.cycle import AdmissionCycle
    from kubequeue.admission.tracker import JobTracker
    from kubequeue.capacity.reservations import Reservations
    from kubequeue.kinds.pytorchjob import PyTorchJobKind
    from kubequeue.queueing.queue import JobQueue

    cache = CapacityCache()
    for name, rack, gpus in nodes:
        cache.upsert_node(b.node(name, gpu=gpus, labels={RACK: rack} if rack else {}))
    tracker = JobTracker(cache, JobQueue(), Reservations(cache))
    kind = PyTorchJobKind()
    tracker.register(kind)
    return tracker, AdmissionCycle(tracker), kind


def pytorchjob(name: str, annotations: dict[str, str]) -> dict[str, object]:
    """Master 1 x 8 GPUs anywhere, workers 2 x 8 GPUs asking for a rack on their template."""

    def template(asks: dict[str, str]) -> dict[str, object]:
        return {"metadata": {"annotations": asks}, "spec": b.pod_spec({"cpu": "1", GPU: "8"})}

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"uid-{name}",
            "resourceVersion": "1",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "annotations": annotations,
        },
        "spec": {
            "runPolicy": {"suspend": True},
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": template({})},
                "Worker": {
                    "replicas": 2,
                    "template": template({"kube-queue.io/topology-required": RACK}),
                },
            },
        },
    }


@pytest.mark.parametrize("scope", [None, "pod-set", "job"])
def test_the_scope_annotation_decides_through_the_cycle(scope: str | None) -> None:
    tracker, cycle, kind = _kind_world(("a0", "r0", 8), ("a1", "r0", 8), ("x0", None, 8))
    annotations = {"kube-queue.io/topology-scope": scope} if scope else {}
    tracker.observe(kind, pytorchjob("pt", annotations))
    queued = tracker.queue.get(("PyTorchJob", "default", "pt"))
    assert queued is not None
    from kubequeue.status import topology_text

    assert topology_text(queued.pod_sets) == (
        f"{RACK} (required), whole job" if scope == "job" else f"worker: {RACK} (required)"
    )
    admitted = cycle.run().admitted
    if scope == "job":
        assert admitted == []
        cycle.explain_deferred()
        job = tracker.queue.get(("PyTorchJob", "default", "pt"))
        assert job is not None and f"in one {RACK}" in job.wait_reason
        return
    [admission] = admitted
    assert {(a.pod_set, a.node) for a in admission.assignments} == {
        ("master", "x0"),
        ("worker", "a0"),
        ("worker", "a1"),
    }
    assert admission.job.admission_annotations["kube-queue.io/topology-domain"] == f"{RACK}=r0"


def test_a_bad_scope_is_a_verdict_on_the_job() -> None:
    tracker, cycle, kind = _kind_world(("a0", "r0", 8))
    tracker.observe(kind, pytorchjob("pt", {"kube-queue.io/topology-scope": "rack"}))
    assert cycle.run().admitted == []
    job = tracker.queue.get(("PyTorchJob", "default", "pt"))
    assert job is not None and job.problem_reason == "InvalidTopology"
    assert job.problem is not None and "must be job or pod-set" in job.problem


def test_an_admitted_gangs_missing_pods_are_held_in_the_domain_its_admission_recorded() -> None:
    """After a restart, or when a pod of a running gang is replaced, the pods it misses are
    held again; they are held in the domain its admission recorded (the
    kube-queue.io/topology-domain annotation), so the replacement is pinned beside its
    siblings, not wherever room is. A forged or stale value naming no domain is ignored."""
    from kubequeue.labels import ADMITTED_AT, TOPOLOGY_DOMAIN
    from unit.simcluster import JOB, gpu_job, make

    rack = "example.com/rack"
    tracker, _ = make(
        [],
        b.node("r0-a", gpu=4, labels={rack: "r0"}),
        b.node("r1-a", gpu=8, labels={rack: "r1"}),
        b.node("r1-b", gpu=8, labels={rack: "r1"}),
    )

    def observe(domain: str | None) -> list[str]:
        obj = gpu_job("gang", "default", 2, 0, parallelism=2)
        obj["spec"]["suspend"] = False
        annotations = {ADMITTED_AT: "now"}
        if domain is not None:
            annotations[TOPOLOGY_DOMAIN] = domain
        obj["metadata"]["annotations"] = annotations
        tracker.reservations.release(("Job", "default", "gang"))
        tracker.observe(JOB, obj)
        return sorted(
            node for node, _, _ in tracker.reservations.placed(("Job", "default", "gang"))
        )

    assert observe(None) == ["r0-a"], "unconfined, the tightest node takes both"
    assert set(observe(f"{rack}=r1")) <= {"r1-a", "r1-b"}
    assert set(observe(f"main={rack}=r1")) <= {"r1-a", "r1-b"}
    assert observe(f"other={rack}=r1") == ["r0-a"], "another pod set's domain"
    for forged in ("r1", f"{rack}=", "=r1", f"{rack}=r1=x=y", f"{rack}=no-such-rack,,", "x" * 5000):
        assert observe(forged) == ["r0-a"], forged


@settings(max_examples=150, deadline=None)
@given(
    nodes=st.lists(
        st.tuples(
            st.sampled_from(["r0", "r1", "r2", None]),
            st.sampled_from(["a", "b", None]),  # another label the pods may select
            st.booleans(),  # cordoned
            st.booleans(),  # tainted
        ),
        min_size=1,
        max_size=10,
    ),
    selector=st.sampled_from([(), (("pool", "a"),), ((RACK, "r1"),)]),
    tolerate=st.booleans(),
)
def test_a_domains_feasible_nodes_come_from_its_own_nodes_and_equal_a_full_scan(
    nodes: list[tuple[str | None, str | None, bool, bool]],
    selector: tuple[tuple[str, str], ...],
    tolerate: bool,
) -> None:
    """confine(..., cache) seeds feasible(confined) from the domain's nodes (a rack's, not
    the cluster's): the same set a scan of every node against the confined constraints finds."""
    from kubequeue.capacity.topology import confine
    from kubequeue.scheduling import Toleration

    cache = CapacityCache()
    for i, (rack, pool, cordoned, tainted) in enumerate(nodes):
        labels = {k: v for k, v in ((RACK, rack), ("pool", pool)) if v is not None}
        taints = [{"key": "gpu", "effect": "NoSchedule"}] if tainted else None
        cache.upsert_node(b.node(f"n{i}", labels=labels, taints=taints, unschedulable=cordoned))
    tolerations = (Toleration("gpu", "Exists", None, "NoSchedule"),) if tolerate else ()
    base = PodSet("w", 1, {"cpu": 1000}, NodeConstraints(selector, (), tolerations))
    for domain in ("r0", "r1", "r2", "r9"):
        confined = confine([base], RACK, domain, cache)
        if not confined:
            assert dict(selector).get(RACK) not in (None, domain)
            continue
        seeded = cache.feasible(confined[0].constraints)
        c = confined[0].constraints
        scanned = frozenset(
            n.name for n in cache.nodes.values()
            if n.schedulable and c.allows(n.name, n.labels, n.taints)
        )
        assert seeded == scanned, (domain, seeded, scanned)


@settings(max_examples=300, deadline=None)
@given(
    nodes=st.lists(st.tuples(st.integers(0, 8), st.sampled_from(["r0", "r1", "r2", "r3"])),
                   min_size=1, max_size=10),
    pods=st.integers(1, 12),
    gpus=st.integers(1, 4),
)
def test_a_preferred_gang_no_rack_holds_goes_over_the_fewest_racks(
    nodes: list[tuple[int, str]], pods: int, gpus: int
) -> None:
    """Preferred, and no one rack holds it: as few racks as any placement could use (brute
    force: the racks' pod counts, largest first), every node within its room."""
    cache = cluster([(f"n{i}", free, rack) for i, (free, rack) in enumerate(nodes)])
    holds: Counter[str] = Counter()
    for free, rack in nodes:
        holds[rack] += free // gpus
    found = place_together(gang(pods, gpus, required=False), cache)
    if max(holds.values()) >= pods:
        assert found is not None and found.domain is not None  # one rack: the usual path
        return
    if sum(holds.values()) < pods:
        assert found is None
        return
    fewest, covered = 0, 0
    for held in sorted(holds.values(), reverse=True):
        if covered >= pods:
            break
        fewest, covered = fewest + 1, covered + held
    assert found is not None and found.domain is None
    per_node: Counter[str] = Counter()
    for a in found.assignments:
        per_node[a.node] += a.count
    assert sum(per_node.values()) == pods
    for node, count in per_node.items():
        assert count * gpus * 1000 <= cache.nodes[node].free[GPU]
    racks = {cache.nodes[n].labels[RACK] for n in per_node}
    assert len(racks) == fewest, (racks, fewest, dict(holds))
