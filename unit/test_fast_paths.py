"""The core's fast paths (issue 6) give exactly the answers of the plain computations they
replace: explanations, the cycle's "certainly does not fit" shortcuts, the cache's incremental
bookkeeping and lazy index, the pod request memo, and the informer's one-pass decode."""

from __future__ import annotations

import heapq
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kubequeue import demand
from kubequeue.admission.cycle import AdmissionCycle
from kubequeue.admission.tracker import JobTracker
from kubequeue.capacity import cache as cache_module
from kubequeue.capacity.cache import CapacityCache
from kubequeue.capacity.fit import explain, place, place_counted
from kubequeue.capacity.index import FreeIndex
from kubequeue.capacity.reservations import Reservations
from kubequeue.capacity.topology import place_job_in
from kubequeue.demand import PodSet, pod_set_from_template
from kubequeue.kinds.job import JobKind
from kubequeue.kube.client import ApiError
from kubequeue.kube.informer import Informer, _Gone, struct_codec
from kubequeue.labels import ADMITTED_AT
from kubequeue.objects import Pod, PodSpec, Toleration
from kubequeue.queueing.queue import JobQueue, QueuedJob
from kubequeue.resources import GPU, max_copies
from kubequeue.scheduling import NodeConstraints
from unit import builders as b

JOB = JobKind()
TAINT = {"key": "gpu", "value": "yes", "effect": "NoSchedule"}

node_st = st.builds(
    lambda i, cpu, gpu, pods, zone, tainted, ready: b.node(
        f"n{i}",
        cpu=str(cpu),
        memory="64Gi",
        gpu=gpu,
        pods=str(pods),
        labels={"zone": zone},
        taints=[TAINT] if tainted else None,
        ready=ready,
    ),
    st.integers(0, 10**6),
    st.integers(1, 64),
    st.integers(0, 8),
    st.integers(1, 20),
    st.sampled_from(["a", "b"]),
    st.booleans(),
    st.booleans() | st.just(True),
)
shape_st = st.tuples(
    st.integers(0, 8),  # GPUs per pod
    st.sampled_from([250, 1000, 4000, 16000]),  # CPU millicores per pod
    st.sampled_from([None, "a"]),  # zone selector
    st.booleans(),  # tolerates the taint
)


def pod_set(count: int, shape: tuple[int, int, str | None, bool], name: str = "main") -> PodSet:
    gpus, cpu, zone, tolerant = shape
    template = {
        "spec": b.pod_spec(
            {"cpu": f"{cpu}m", "memory": "1Gi", GPU: str(gpus)},
            node_selector={"zone": zone} if zone else None,
            tolerations=[{"key": "gpu", "operator": "Exists"}] if tolerant else None,
        )
    }
    return pod_set_from_template(name, count, template, "t")


def busy_cluster(nodes: list[Any], used: list[tuple[int, int, int]]) -> CapacityCache:
    cache = CapacityCache()
    for n in nodes:
        cache.upsert_node(n)
    for i, (idx, gpus, cpu) in enumerate(used):
        n = nodes[idx % len(nodes)]
        pod = b.pod(f"u{i}", n.metadata.name, {GPU: str(gpus), "cpu": f"{cpu}m"}, uid=f"u{i}")
        cache.upsert_pod(pod, None)
    return cache


used_st = st.lists(
    st.tuples(st.integers(0, 100), st.integers(0, 9), st.integers(0, 70000)), max_size=30
)


# --------------------------------------------------------------------------- explain
@settings(max_examples=400, deadline=None)
@given(
    nodes=st.lists(node_st, min_size=1, max_size=80, unique_by=lambda n: n.metadata.name),
    used=used_st,
    count=st.integers(0, 40),
    shape=shape_st,
    empty=st.booleans(),
)
def test_single_pod_set_explanation_is_the_general_simulations(
    nodes, used, count, shape, empty
) -> None:
    cache = busy_cluster(nodes, used)
    ps = pod_set(count, shape)
    fast = explain([ps], cache, empty_cluster=empty)
    # With a second, empty pod set the general simulation runs (and labels its answer).
    general = explain([ps, pod_set(0, shape, "zz")], cache, empty_cluster=empty)
    assert general == (f"main: {fast}" if fast else "")
    if not empty:
        assert (fast == "") == (place([ps], cache) is not None)


# --------------------------------------------------------------------------- cycle shortcuts
def world(
    nodes: list[Any], used: list[tuple[int, int, int]], plain: bool
) -> tuple[JobTracker, AdmissionCycle]:
    cache = busy_cluster(nodes, used)
    tracker = JobTracker(cache, JobQueue(), Reservations(cache))
    tracker.register(JOB)
    tracker.set_priority_classes({}, 0)
    cycle = AdmissionCycle(tracker, clock=lambda: 0.0, wall_clock=lambda: 0.0)
    if plain:  # the reference: every evaluated job runs the real fit
        cycle._shortcuts.place = lambda job, cache: place_job_in(job.pod_sets, cache)  # type: ignore
    return tracker, cycle


def job_obj(i: int, count: int, shape: tuple[int, int, str | None, bool]) -> dict[str, Any]:
    gpus, cpu, zone, tolerant = shape
    return b.job(
        f"j{i:03d}",
        {"cpu": f"{cpu}m", "memory": "1Gi", GPU: str(gpus)},
        parallelism=count,
        created=f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}Z",
        node_selector={"zone": zone} if zone else None,
        tolerations=[{"key": "gpu", "operator": "Exists"}] if tolerant else None,
    )


op_st = st.one_of(
    st.tuples(st.just("cycle")),
    st.tuples(st.just("end"), st.integers(0, 10**6)),  # a running pod ends
    st.tuples(st.just("start"), st.integers(0, 100), st.integers(0, 4), st.integers(0, 9000)),
    st.tuples(st.just("bind"), st.integers(0, 10**6)),  # an admitted job's pods bind
    st.tuples(st.just("retry"), st.integers(0, 10**6)),  # an admission write failed
)


@settings(max_examples=200, deadline=None)
@given(
    nodes=st.lists(node_st, min_size=1, max_size=70, unique_by=lambda n: n.metadata.name),
    used=used_st,
    shapes=st.lists(shape_st, min_size=1, max_size=4),
    jobs=st.lists(st.tuples(st.integers(0, 3), st.integers(1, 12)), min_size=1, max_size=25),
    gangs=st.lists(
        st.tuples(st.integers(0, 3), st.integers(1, 6), st.integers(0, 3), st.integers(1, 6)),
        max_size=4,
    ),
    ops=st.lists(op_st, max_size=25),
)
def test_cycle_shortcuts_never_change_what_a_cycle_decides(
    nodes, used, shapes, jobs, gangs, ops
) -> None:
    worlds = [world(nodes, used, plain) for plain in (False, True)]
    objs = {
        f"j{i:03d}": job_obj(i, count, shapes[s % len(shapes)]) for i, (s, count) in enumerate(jobs)
    }
    for tracker, _ in worlds:
        for obj in objs.values():
            tracker.observe(JOB, obj)
        for i, (s1, c1, s2, c2) in enumerate(gangs):  # two pod sets: only the general fit
            tracker.queue.upsert(
                QueuedJob(
                    key=("Job", "default", f"g{i}"),
                    uid=f"g{i}",
                    resource_version="1",
                    priority=0,
                    created=f"2026-01-01T00:30:{i:02d}Z",
                    pod_sets=[
                        pod_set(c1, shapes[s1 % len(shapes)], "a"),
                        pod_set(c2, shapes[s2 % len(shapes)], "b"),
                    ],
                )
            )
    admitted: list[list[Any]] = [[], []]
    serial = 0
    for op in [("cycle",), *ops, ("cycle",)]:
        outcomes = []
        for w, (tracker, cycle) in enumerate(worlds):
            cache = tracker.cache
            if op[0] == "cycle":
                r = cycle.run()
                admitted[w].extend(r.admitted)
                outcomes.append(
                    (
                        [
                            (a.job.key, [(x.node, x.count) for x in a.assignments])
                            for a in r.admitted
                        ],
                        [(n.key, n.reason, n.message) for n in r.notices],
                        r.evaluated,
                        r.waiting,
                    )
                )
            elif op[0] == "end" and cache._pods:
                uids = sorted(cache._pods)
                tracker.pod_changed(cache.delete_pod(uids[op[1] % len(uids)]))
            elif op[0] == "start":
                n = nodes[op[1] % len(nodes)].metadata.name
                pod = b.pod(
                    f"s{serial}", n, {GPU: str(op[2]), "cpu": f"{op[3]}m"}, uid=f"start-{serial}"
                )
                tracker.pod_changed(cache.upsert_pod(pod, None))
            elif op[0] in ("bind", "retry") and admitted[w]:
                a = admitted[w].pop(op[1] % len(admitted[w]))
                if op[0] == "retry":
                    tracker.admission_failed(a.job.key)
                    continue
                if a.job.key[2] not in objs:
                    continue  # a two-set job: stays admitted and held
                obj = objs[a.job.key[2]]
                obj = {
                    **obj,
                    "spec": {**obj["spec"], "suspend": False},
                    "metadata": {**obj["metadata"], "annotations": {ADMITTED_AT: "now"}},
                }
                tracker.admission_succeeded(a.job.key, JOB, obj)
                for x in a.assignments:
                    for k in range(x.count):
                        pod = b.pod(
                            f"{a.job.key[2]}-{x.node}-{k}",
                            x.node,
                            {r: f"{v}m" for r, v in x.request.items() if r != "pods"},
                            owner_job=a.job.key[2],
                            uid=f"{a.job.key[2]}-{x.node}-{k}",
                        )
                        tracker.pod_changed(cache.upsert_pod(pod, (a.job.key, None)))
        if outcomes:
            assert outcomes[0] == outcomes[1], op
        serial += 1


# --------------------------------------------------------------------------- cache bookkeeping
cache_op_st = st.one_of(
    st.tuples(
        st.just("pod"),
        st.integers(0, 30),
        st.integers(0, 12),
        st.integers(0, 5),
        st.integers(0, 40000),
    ),
    st.tuples(st.just("end"), st.integers(0, 10**6)),
    st.tuples(st.just("reserve"), st.integers(0, 12), st.integers(0, 3), st.integers(1, 3)),
    st.tuples(st.just("unreserve"), st.integers(0, 10**6)),
    st.tuples(st.just("node"), st.integers(0, 12), st.integers(1, 64), st.booleans()),
    st.tuples(st.just("gone"), st.integers(0, 12)),
)


@settings(max_examples=300, deadline=None)
@given(ops=st.lists(cache_op_st, max_size=60))
def test_cache_bookkeeping_matches_a_recomputation(ops) -> None:
    cache = CapacityCache()
    reserved: list[tuple[str, dict[str, int], int]] = []
    freed_at: list[tuple[int, str]] = []
    log: list[str] = []  # every node that gained capacity, one entry per freed_generation step
    gained = cache._freed

    def record(node: str) -> None:
        log.append(node)
        gained(node)

    cache._freed = record  # type: ignore[method-assign]
    for op in ops:
        before = cache.freed_generation
        if op[0] == "pod":
            pod = b.pod(
                f"p{op[1]}", f"n{op[2]}", {GPU: str(op[3]), "cpu": f"{op[4]}m"}, uid=f"p{op[1]}"
            )
            cache.upsert_pod(pod, None)
        elif op[0] == "end" and cache._pods:
            uids = sorted(cache._pods)
            uid = uids[op[1] % len(uids)]
            node = cache._pods[uid].node
            cache.delete_pod(uid)
            freed_at.append((before, node))
        elif op[0] == "reserve":
            request = {GPU: op[2] * 1000, "cpu": 500, "pods": 1000}
            cache.reserve(f"n{op[1]}", request, op[3])
            reserved.append((f"n{op[1]}", request, op[3]))
        elif op[0] == "unreserve" and reserved:
            node, request, count = reserved.pop(op[1] % len(reserved))
            cache.unreserve(node, request, count)
        elif op[0] == "node":
            cache.upsert_node(b.node(f"n{op[1]}", cpu=str(op[2]), gpu=4, ready=op[3]))
        elif op[0] == "gone":
            cache.delete_node(f"n{op[1]}")
        assert len(log) == cache.freed_generation
        for g in range(cache.freed_generation + 1):
            since = log[g:]
            # The distinct nodes freed since g, newest first (a deleted Node, which can take no
            # pod, may be left out), and None past the limit: what the cycle's shortcuts read.
            distinct = list(dict.fromkeys(reversed(since)))
            found = cache.freed_nodes_since(g, 10**6)
            assert found is not None
            assert found == [n for n in distinct if n in found]
            assert {n for n in distinct if n in cache.nodes and cache.nodes[n].known} <= set(found)
            limited = cache.freed_nodes_since(g, 2)
            assert (limited is None) == (len(found) > 2)
            assert limited is None or limited == found
    # free == allocatable - used - reserved, from scratch
    used: dict[str, dict[str, int]] = {}
    on_node: dict[str, int] = {}
    for usage in cache._pods.values():
        u = used.setdefault(usage.node, {})
        for r, v in usage.request.items():
            u[r] = u.get(r, 0) + v
        on_node[usage.node] = on_node.get(usage.node, 0) + 1
    held: dict[str, dict[str, int]] = {}
    for node, request, count in reserved:
        h = held.setdefault(node, {})
        for r, v in request.items():
            h[r] = h.get(r, 0) + v * count
    for name, state in cache.nodes.items():
        u, h = used.get(name, {}), held.get(name, {})
        for r in set(u) | set(h) | set(state.allocatable) | set(state.free):
            assert state.free.get(r, 0) == state.allocatable.get(r, 0) - u.get(r, 0) - h.get(r, 0)
            assert state.used.get(r, 0) == u.get(r, 0)
            assert state.reserved.get(r, 0) == h.get(r, 0)
        assert state.pods == on_node.get(name, 0)
    for _, node in freed_at:
        assert node in log
    # the lazy index still finds every node that can take a pod
    for gpus in range(5):
        request = {GPU: gpus * 1000, "cpu": 1000, "pods": 1000}
        found = set(cache.candidates(request))
        for name, state in cache.nodes.items():
            if state.schedulable and max_copies(request, state.free, 1):
                assert name in found


# --------------------------------------------------------------------------- pod request memo
def spec(
    containers: list[dict[str, Any]],
    init: list[dict[str, Any]] | None = None,
    overhead: dict[str, Any] | None = None,
) -> PodSpec:
    raw: dict[str, Any] = {"containers": containers}
    if init:
        raw["initContainers"] = init
    if overhead:
        raw["overhead"] = overhead
    return msgspec.convert(raw, PodSpec)


def test_pod_request_memo_answers_what_the_computation_does() -> None:
    c1 = b.container({"cpu": "1"}, {"memory": "1Gi", "cpu": "2"})
    split = [
        b.container({"cpu": "1"}, {"memory": "1Gi"}),
        b.container({"cpu": "2"}, {}, name="side"),
    ]
    merged = [
        b.container({"cpu": "1"}, {"memory": "1Gi", "cpu": "2"}),
        b.container({}, {}, name="side"),
    ]
    specs = [
        spec([c1]),
        spec(split),
        spec(merged),
        spec([c1], init=[b.container({"cpu": "3"}, name="init")]),
        spec([c1], init=[b.container({"cpu": "3"}, name="init", restart_policy="Always")]),
        spec([c1], overhead={"cpu": "250m"}),
    ]
    for s in specs + specs:
        assert demand.pod_request(s) == demand._compute_pod_request(s, "pod")
        assert demand.cached_pod_request(s) == demand._compute_pod_request(s, "pod")
    # Same flattened quantities, different containers: different requests, never confused.
    assert demand.pod_request(specs[1]) != demand.pod_request(specs[2])


def test_pod_request_memo_keeps_only_text_quantities() -> None:
    numeric = spec([b.container({"cpu": 7}, None)])
    assert demand.pod_request(numeric)["cpu"] == 7000
    assert demand.cached_pod_request(numeric) is None
    with pytest.raises(demand.DemandError):
        demand.pod_request(spec([b.container({"cpu": "lots"}, None)]))


# --------------------------------------------------------------------------- informer decode
class Recorder:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def upsert(self, obj: Pod) -> None:
        self.seen.append(("upsert", obj.metadata.uid))

    def delete(self, key: str) -> None:
        self.seen.append(("delete", key))

    def synced(self) -> None:
        pass


def line(type_: str, obj: dict[str, Any]) -> bytes:
    return msgspec.json.encode({"type": type_, "object": obj})


def test_informer_dispatch_one_pass_and_fallback_paths() -> None:
    rec = Recorder()
    inf: Informer[Pod] = Informer(
        None,
        "pods-test",
        "/api/v1/pods",  # type: ignore[arg-type]
        struct_codec(Pod, lambda p: p.metadata.uid),
        rec,
    )
    pod = {
        "metadata": {"uid": "u1", "resourceVersion": "7", "name": "p"},
        "spec": {"nodeName": "n", "containers": [{"name": "c"}]},
        "status": {"phase": "Running"},
    }
    inf._dispatch(line("ADDED", pod))
    newer = {**pod, "metadata": {**pod["metadata"], "resourceVersion": "8"}}
    inf._dispatch(line("MODIFIED", newer))
    assert inf.resource_version == "8"
    # A bookmark whose object does not even decode as a Pod (containers: null).
    inf._dispatch(
        line("BOOKMARK", {"metadata": {"resourceVersion": "9"}, "spec": {"containers": None}})
    )
    assert inf.resource_version == "9"
    inf._dispatch(line("ADDED", {"metadata": {"uid": 5}}))  # undecodable: skipped
    inf._dispatch(line("DELETED", pod))
    assert rec.seen == [("upsert", "u1"), ("upsert", "u1"), ("delete", "u1")]
    assert inf._unflushed == {"ADDED": 1, "MODIFIED": 1, "DELETED": 1}
    inf._flush_metrics()
    assert inf._unflushed == {}
    with pytest.raises(_Gone):
        inf._dispatch(line("ERROR", {"kind": "Status", "status": "Failure", "code": 410}))
    with pytest.raises(ApiError):
        inf._dispatch(
            line(
                "ERROR",
                {
                    "kind": "Status",
                    "status": "Failure",
                    "code": 500,
                    "reason": "InternalError",
                    "message": "boom",
                },
            )
        )


def test_a_gang_is_tried_again_once_a_freed_node_can_take_one_of_its_pods() -> None:
    tracker, cycle = world([b.node("a", gpu=4), b.node("b", gpu=4)], [], plain=False)
    busy = [b.pod(f"busy{i}", n, {GPU: "4"}, uid=f"busy{i}") for i, n in enumerate("ab")]
    for pod in busy:
        tracker.cache.upsert_pod(pod, None)
    gang = QueuedJob(
        key=("Job", "default", "gang"),
        uid="g",
        resource_version="1",
        priority=0,
        created="2026-01-01T00:00:00Z",
        pod_sets=[pod_set(1, (2, 1000, None, False), "x"), pod_set(1, (2, 1000, None, False), "y")],
    )
    tracker.queue.upsert(gang)
    assert cycle.run().admitted == []
    # Capacity frees on a node that takes one pod: the gang is evaluated (and fits) again.
    tracker.cache.delete_pod("busy0")
    assert [a.job.key[2] for a in cycle.run().admitted] == ["gang"]


def test_room_tracks_freed_capacity_pod_by_pod() -> None:
    tracker, cycle = world([b.node(f"n{i}", gpu=2) for i in range(3)], [], plain=False)
    for i in range(3):
        tracker.cache.upsert_pod(b.pod(f"busy{i}", f"n{i}", {GPU: "2"}, uid=f"busy{i}"), None)
    tracker.observe(JOB, job_obj(0, 3, (2, 1000, None, False)))
    first = cycle.run()
    assert first.admitted == [] and first.evaluated == 1
    for i in range(2):  # two of the three nodes free up: still short by one
        tracker.cache.delete_pod(f"busy{i}")
        assert cycle.run().admitted == []
    tracker.cache.delete_pod("busy2")
    assert [a.job.key[2] for a in cycle.run().admitted] == ["j000"]


def test_room_after_a_small_job_does_not_hold_back_a_bigger_one_of_its_shape() -> None:
    """The room computed for a 1-pod job counts every copy a freed node holds, not just one: a
    2-pod job of the same shape behind it is tried (and fits) in the same cycle. (Found by
    test_cycle_shortcuts_never_change_what_a_cycle_decides.)"""
    tracker, cycle = world([b.node("n0", cpu="1", pods="3")], [(0, 0, 751)], plain=False)
    tracker.observe(JOB, job_obj(0, 1, (0, 250, None, False)))
    tracker.observe(JOB, job_obj(1, 2, (0, 250, None, False)))
    assert cycle.run().admitted == []  # 249m free: neither fits
    tracker.cache.delete_pod("u0")
    assert [a.job.key[2] for a in cycle.run().admitted] == ["j000", "j001"]


@settings(max_examples=300, deadline=None)
@given(ops=st.lists(cache_op_st, max_size=60))
def test_lazy_index_gives_candidates_in_the_order_an_eager_index_would(ops) -> None:
    """Bucket moves are applied when the index is read, in the order they happened: the same
    candidate order (and so the same placements) as updating the index on every event."""
    cache = CapacityCache()
    eager = FreeIndex()
    reserved: list[tuple[str, dict[str, int], int]] = []

    def touched(name: str, free: dict[str, int] | None = None) -> None:
        """What the cache did on every change before its index was lazy."""
        state = cache.nodes.get(name)
        if state is not None and state.schedulable:
            eager.update(name, free if free is not None else state.free)
        else:
            eager.remove(name)

    for op in ops:
        if op[0] == "pod":
            node = f"n{op[2]}"
            before = cache._pods.get(f"p{op[1]}")
            pod = b.pod(f"p{op[1]}", node, {GPU: str(op[3]), "cpu": f"{op[4]}m"}, uid=f"p{op[1]}")
            request = demand.pod_request(pod.spec)
            same = before is not None and before.node == node and before.request is request
            cache.upsert_pod(pod, None)
            if before is not None and not same:
                if before.node == node:  # taken off, then put back: two moves on one node
                    middle = dict(cache.nodes[node].free)
                    for res, amount in request.items():
                        middle[res] = middle.get(res, 0) + amount
                    touched(node, middle)
                elif before.node in cache.nodes:
                    touched(before.node)
            if not same:
                touched(node)
        elif op[0] == "end" and cache._pods:
            uids = sorted(cache._pods)
            node = cache._pods[uids[op[1] % len(uids)]].node
            cache.delete_pod(uids[op[1] % len(uids)])
            touched(node)
        elif op[0] == "reserve":
            request = {GPU: op[2] * 1000, "cpu": 500, "pods": 1000}
            cache.reserve(f"n{op[1]}", request, op[3])
            reserved.append((f"n{op[1]}", request, op[3]))
            touched(f"n{op[1]}")
        elif op[0] == "unreserve" and reserved:
            node, request, count = reserved.pop(op[1] % len(reserved))
            cache.unreserve(node, request, count)
            touched(node)
        elif op[0] == "node":
            cache.upsert_node(b.node(f"n{op[1]}", cpu=str(op[2]), gpu=4, ready=op[3]))
            touched(f"n{op[1]}")
        elif op[0] == "gone":
            cache.delete_node(f"n{op[1]}")
            eager.remove(f"n{op[1]}")
        if op[1] % 3 == 0:  # read the index now and then (applies the pending moves)
            request = {GPU: (op[1] % 5) * 1000, "cpu": 250}
            assert list(cache.candidates(request)) == list(eager.candidates(request))
    for gpus in range(5):
        request = {GPU: gpus * 1000, "cpu": 250}
        assert list(cache.candidates(request)) == list(eager.candidates(request))


def test_a_node_that_moves_away_and_back_goes_last_in_its_bucket() -> None:
    cache = CapacityCache()
    for name in ("a", "b"):
        cache.upsert_node(b.node(name, cpu="8", gpu=4))
    assert list(cache.candidates({GPU: 1000})) == ["a", "b"]
    cache.upsert_pod(b.pod("p", "a", {GPU: "2"}, uid="p"), None)  # a: 4 -> 2 free GPUs
    cache.delete_pod("p")  # and back to 4, before anyone looked
    assert list(cache.candidates({GPU: 3000})) == ["b", "a"]  # as if updated at once


def test_pending_moves_apply_in_the_order_they_happened() -> None:
    cache = CapacityCache()
    for name in ("a", "b"):
        cache.upsert_node(b.node(name, cpu="8", gpu=4))
    list(cache.candidates({}))
    cache.upsert_pod(b.pod("pa", "a", {GPU: "1"}, uid="pa"), None)  # a -> 3 free
    cache.upsert_pod(b.pod("pb", "b", {GPU: "1"}, uid="pb"), None)  # b -> 3 free
    cache.upsert_pod(b.pod("pa2", "a", {GPU: "1"}, uid="pa2"), None)  # a -> 2 free
    cache.delete_pod("pa2")  # a -> 3 free again: it moved into that bucket after b did
    assert list(cache.candidates({GPU: 3000})) == ["b", "a"]


# --------------------------------------------------------------------------- counting copies
_TAINTS = [
    [],
    [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
    [{"key": "dedicated", "value": "infra", "effect": "NoExecute"}],
    [{"key": "soft", "value": "x", "effect": "PreferNoSchedule"}],
]
_TOLERATIONS = [
    (),
    (Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule"),),
    (Toleration(operator="Exists"),),
]


@settings(max_examples=200, deadline=None)
@given(
    nodes=st.lists(
        st.tuples(
            st.integers(0, 8),  # GPUs
            st.integers(1, 16),  # CPUs
            st.integers(0, 3),  # taints
            st.sampled_from(["a", "b"]),  # zone
            st.booleans(),  # ready
            st.integers(0, 4),  # taints after a change (0: no change, else 1 + which)
        ),
        min_size=1,
        max_size=12,
    ),
    pods=st.lists(st.tuples(st.integers(0, 11), st.integers(0, 4), st.integers(0, 8)), max_size=20),
    gpus=st.integers(0, 4),
    cpus=st.integers(1, 8),
    tolerations=st.integers(0, 2),
    zone=st.sampled_from([None, "a"]),
    limit=st.integers(1, 30),
    path=st.sampled_from(["partitions", "feasible", "candidates"]),
)
def test_counted_copies_are_the_greedy_fits_count(
    nodes, pods, gpus, cpus, tolerations, zone, limit, path
) -> None:
    """CapacityCache.copies (taint partitions, or the feasible nodes) counts what the greedy
    walk over the ordered candidates places: min(limit, the copies every allowed node holds)."""
    with pytest.MonkeyPatch.context() as mp:  # each of its three ways to find the nodes
        mp.setattr(cache_module, "_DIRECT_COUNT", 10**6 if path == "feasible" else 0)
        mp.setattr(cache_module, "_PARTITIONS_MAX", 0 if path == "candidates" else 32)
        _check_counted_copies(nodes, pods, gpus, cpus, tolerations, zone, limit)


def _check_counted_copies(nodes, pods, gpus, cpus, tolerations, zone, limit) -> None:
    cache = CapacityCache()
    for i, (g, c, t, z, ready, _) in enumerate(nodes):
        cache.upsert_node(
            b.node(f"n{i}", gpu=g, cpu=str(c), taints=_TAINTS[t], labels={"zone": z}, ready=ready)
        )
    for j, (i, g, c) in enumerate(pods):
        if i < len(nodes):
            pod = b.pod(f"p{j}", f"n{i}", {GPU: str(g), "cpu": f"{c * 250}m"}, uid=f"p{j}")
            cache.upsert_pod(pod, None)
    list(cache.candidates({}))  # the index is read, then taints change under it
    for i, (g, c, _, z, ready, t) in enumerate(nodes):
        if t:
            cache.upsert_node(
                b.node(f"n{i}", gpu=g, cpu=str(c), taints=_TAINTS[t - 1], labels={"zone": z},
                       ready=ready)
            )
    request = {"cpu": cpus * 1000, "pods": 1000, **({GPU: gpus * 1000} if gpus else {})}
    constraints = NodeConstraints(
        node_selector=(("zone", zone),) if zone else (), tolerations=_TOLERATIONS[tolerations]
    )
    feasible = cache.feasible(constraints)
    expected = 0
    for name in cache.candidates(request):  # the greedy walk's order
        if name in feasible:
            expected += max_copies(request, cache.nodes[name].free, limit - expected)
    assert cache.copies(request, constraints, limit) == min(limit, expected)
    # A fit walks the nodes of the one partition it tolerates (if so) in the overall order.
    walked = [n for n in cache.candidates(request, constraints) if n in feasible]
    assert walked == [n for n in cache.candidates(request) if n in feasible]
    assert place_counted(PodSet("w", limit, request, constraints), cache)[1] == min(
        limit, expected
    )


@settings(max_examples=200, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.integers(0, 7),  # node
            st.sampled_from(["upsert", "delete", "pod"]),
            st.integers(0, 3),  # taints
            st.sampled_from(["a", "b", None]),  # zone label
            st.sampled_from(["x", None]),  # rack label
            st.booleans(),  # ready
            st.booleans(),  # cordoned
        ),
        min_size=1,
        max_size=24,
    ),
    tolerations=st.integers(0, 2),
    selector=st.sampled_from(
        [(), (("zone", "a"),), (("rack", "x"),), (("zone", "b"), ("rack", "x"))]
    ),
    affinity=st.booleans(),
    partitions=st.booleans(),
)
def test_feasible_nodes_are_those_a_full_scan_allows(
    steps, tolerations, selector, affinity, partitions
) -> None:
    """CapacityCache.feasible (the index's taint partitions and the nodes by label, when the
    constraints have no required affinity) is the set of schedulable nodes ``allows`` admits,
    whatever nodes came, changed, were cordoned, went or were first seen through a pod."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cache_module, "_PARTITIONS_MAX", 32 if partitions else 0)
        cache = CapacityCache()
        for j, (i, what, t, zone, rack, ready, cordoned) in enumerate(steps):
            name = f"n{i}"
            if what == "delete":
                cache.delete_node(name)
            elif what == "pod":
                cache.upsert_pod(b.pod(f"p{j}", name, {"cpu": "1"}, uid=f"p{j}"), None)
            else:
                labels = {k: v for k, v in (("zone", zone), ("rack", rack)) if v is not None}
                node = b.node(
                    name, taints=_TAINTS[t], labels=labels, ready=ready, unschedulable=cordoned
                )
                cache.upsert_node(node)
            if j % 3 == 0:
                list(cache.candidates({}))  # the index is read now and then
        term = ((("zone", "In", frozenset({"a"})),), ())  # required node affinity
        constraints = NodeConstraints(
            node_selector=selector,
            terms=(term,) if affinity else (),
            tolerations=_TOLERATIONS[tolerations],
        )
        expected = {
            n.name
            for n in cache.nodes.values()
            if n.schedulable and constraints.allows(n.name, n.labels, n.taints)
        }
        assert cache.feasible(constraints) == expected


def test_a_node_whose_taints_change_keeps_its_place_in_the_walk() -> None:
    """Walking one taint partition is the overall walk without the others' nodes, also after a
    node changed partitions (it joins the other partition at its place, not at the end)."""
    cache = CapacityCache()
    gpu_taint = _TAINTS[1]
    cache.upsert_node(b.node("a", gpu=4, taints=gpu_taint))
    cache.upsert_node(b.node("b", gpu=4))
    cache.upsert_node(b.node("c", gpu=4, taints=gpu_taint))
    request = {"cpu": 1000, "pods": 1000}
    untolerant = NodeConstraints()
    assert list(cache.candidates(request)) == ["a", "b", "c"]
    assert list(cache.candidates(request, untolerant)) == ["b"]
    cache.upsert_node(b.node("a", gpu=4))  # the taint is removed: a joins b's partition
    assert list(cache.candidates(request)) == ["a", "b", "c"]
    assert list(cache.candidates(request, untolerant)) == ["a", "b"]


@settings(max_examples=100, deadline=None)
@given(
    deadlines=st.lists(st.tuples(st.integers(0, 50), st.integers(0, 9)), max_size=300),
    now=st.integers(0, 50),
)
def test_due_deadlines_come_in_heap_order_however_many_are_due(deadlines, now) -> None:
    """JobTracker._due_deadlines (popped one by one, or past a few split off and sorted)
    returns what popping the heap up to ``now`` returns, and leaves the same heap behind."""
    cache = CapacityCache()
    tracker = JobTracker(cache, JobQueue(), Reservations(cache))
    items = [(float(d), ("Job", "ns", f"j{k}")) for d, k in deadlines]
    reference = list(items)
    heapq.heapify(reference)
    tracker._deadlines = list(reference)
    expected = []
    while reference and reference[0][0] <= now:
        expected.append(heapq.heappop(reference))
    assert tracker._due_deadlines(float(now)) == expected
    assert sorted(tracker._deadlines) == sorted(reference)
    left = tracker._deadlines  # still a heap
    assert all(left[(c - 1) // 2] <= left[c] for c in range(1, len(left)))
