"""The binding guard (capacity/binding.py): a job that fits waits while admitting it could let
the scheduler, binding the pods in flight in its own order on nodes of its own choosing, leave
an admitted pod without room. Found by the fragmentation benchmark (docs/benchmarks.md): a
4 x 2-GPU gang admitted in the same cycle as 1-GPU jobs, whose pods the scheduler bound first on
the nodes the gang was planned on; the gang's four pods stayed Pending for minutes."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from kubequeue.admission.tracker import JobTracker
from kubequeue.capacity.binding import cost, slots
from kubequeue.capacity.cache import CapacityCache
from kubequeue.labels import ADMITTED_AT
from kubequeue.resources import GPU
from kubequeue.scheduling import NodeConstraints
from unit import builders as b
from unit.simcluster import JOB, accept_admissions, bind_gpu_pod, gpu_job, make

_GPUS: dict[str, tuple[int, int]] = {}  # job -> (GPUs per pod, pods), for the fake API server


def _submit(tracker: JobTracker, name: str, gpus: int, second: int, pods: int = 1) -> None:
    _GPUS[name] = (gpus, pods)
    tracker.observe(JOB, gpu_job(name, "default", gpus, second, parallelism=pods))


def _bind(tracker: JobTracker, job: str, node: str, index: int = 0) -> str:
    uid = f"{job}-{index}"
    bind_gpu_pod(tracker, job, node, _GPUS[job][0], uid)
    return uid


def _fill(tracker: JobTracker, node: str, gpus: int) -> None:
    """GPUs used by a pod no queue manages."""
    pod = b.pod(f"fill-{node}", node, {"cpu": "1", GPU: str(gpus)}, uid=f"fill-{node}")
    tracker.cache.upsert_pod(pod, None)


# ---------------------------------------------------------------- the arithmetic
def test_cost_is_the_most_slots_one_pod_can_take_from_a_node() -> None:
    eight = {GPU: 8000, "cpu": 1000, "pods": 1000}
    one = {GPU: 1000, "cpu": 1000, "pods": 1000}
    assert cost(one, eight) == 1  # one GPU on a whole free node: that node's 8-GPU slot
    assert cost(eight, one) == 8
    assert cost({"cpu": 3000, "pods": 1000}, one) == 3  # CPU counts too
    assert cost({"cpu": 500}, {GPU: 1000}) == 0  # nothing the shape asks for


@settings(max_examples=300, deadline=None)
@given(
    free=st.lists(st.integers(0, 8), min_size=1, max_size=6),
    gpus=st.integers(1, 8),
    others=st.lists(st.integers(1, 8), max_size=12),
    seed=st.integers(0, 2**32 - 1),
)
def test_pods_costing_less_than_the_slots_always_leave_one(
    free: list[int], gpus: int, others: list[int], seed: int
) -> None:
    """The inequality the guard rests on, against an adversary: bind the other pods one by one,
    each on a random node where it fits; if their costs sum to less than the shape's slots, a
    node is left for one more pod of the shape, whatever the choices were."""
    rng = random.Random(seed)
    cache = CapacityCache()
    for i, gpu in enumerate(free):
        cache.upsert_node(b.node(f"n{i}", cpu="64", gpu=gpu))
    shape = {GPU: gpus * 1000, "cpu": 1000, "pods": 1000}
    have = slots(cache, [], shape, NodeConstraints(), 10**6)
    left = dict(enumerate(free))
    spent = 0
    for other in others:
        request = {GPU: other * 1000, "cpu": 1000, "pods": 1000}
        fits = [i for i, g in left.items() if g >= other]
        if not fits:
            break
        spent += cost(request, shape)
        left[rng.choice(fits)] -= other
        if spent < have:
            assert any(g >= gpus for g in left.values()), (free, gpus, others)


def test_slots_count_what_holds_would_give_back() -> None:
    tracker, _ = make([], b.node("a", gpu=8), b.node("b", gpu=8))
    cache, reservations = tracker.cache, tracker.reservations
    eight = {GPU: 8000, "cpu": 1000, "pods": 1000}
    cache.reserve("a", {GPU: 8000}, 1)  # as a hold does
    assert cache.copies(eight, NodeConstraints(), 10) == 1
    assert slots(cache, ["a"], eight, NodeConstraints(), 10) == 2
    assert slots(cache, ["a"], eight, NodeConstraints(), 1) >= 1
    assert reservations.held_nodes() == []


# ---------------------------------------------------------------- the cycle
def test_a_job_that_could_take_an_unbound_pods_room_waits_until_it_is_bound() -> None:
    tracker, cycle = make(
        [], b.node("a", gpu=8), b.node("b", gpu=8), clock=lambda: 0.0, binding_wait=10.0
    )
    _fill(tracker, "b", 7)
    _submit(tracker, "big", 8, 0)
    _submit(tracker, "small", 1, 1)
    # big is held on a, small would be held on b; but the scheduler, if it sees small's pod
    # first, may bind it on a (LeastAllocated would), and then big has no node.
    admitted, notices = accept_admissions(tracker, cycle)
    assert admitted == ["big"]
    waiting = [n for n in notices if n.key[2] == "small"]
    assert waiting and "not bound to nodes yet" in waiting[-1].message
    assert tracker.queue.get(("Job", "default", "small")).binding_since == 0.0
    assert accept_admissions(tracker, cycle)[0] == []  # nothing was bound: still waits
    _bind(tracker, "big", "a")
    assert accept_admissions(tracker, cycle)[0] == ["small"]


def test_without_the_guard_both_are_admitted_and_the_scheduler_can_strand_one() -> None:
    """What the guard prevents, shown with it off."""
    tracker, cycle = make([], b.node("a", gpu=8), b.node("b", gpu=8), binding_wait=0)
    _fill(tracker, "b", 7)
    _submit(tracker, "big", 8, 0)
    _submit(tracker, "small", 1, 1)
    assert accept_admissions(tracker, cycle)[0] == ["big", "small"]
    _bind(tracker, "small", "a")  # a legal choice for the scheduler
    nodes = tracker.cache.nodes
    bound_free = {n: nodes[n].free[GPU] + nodes[n].reserved.get(GPU, 0) for n in "ab"}
    assert max(bound_free.values()) < 8000  # no node can take big's pod any more


def test_the_wait_is_bounded_so_pods_never_bound_cannot_stop_the_queue() -> None:
    now = [0.0]
    tracker, cycle = make(
        [], b.node("a", gpu=8), b.node("b", gpu=8), clock=lambda: now[0], binding_wait=10.0
    )
    _fill(tracker, "b", 7)
    _submit(tracker, "big", 8, 0)
    _submit(tracker, "small", 1, 1)
    assert accept_admissions(tracker, cycle)[0] == ["big"]
    now[0] = 9.0
    assert accept_admissions(tracker, cycle)[0] == []
    now[0] = 10.0  # big's pod never showed up
    assert accept_admissions(tracker, cycle)[0] == ["small"]


def test_jobs_behind_a_waiting_job_wait_too() -> None:
    """Otherwise a stream of small jobs, each safe on its own, keeps pods in flight forever and
    the job that needs a whole node never gets its turn."""
    tracker, cycle = make(
        [], b.node("a", gpu=8), b.node("b", gpu=8), clock=lambda: 0.0, binding_wait=10.0
    )
    _fill(tracker, "b", 6)  # b: 2 GPUs free
    _submit(tracker, "x", 1, 0)
    assert accept_admissions(tracker, cycle)[0] == ["x"]  # held on b
    _submit(tracker, "whole", 8, 1)
    _submit(tracker, "one", 1, 2)
    # whole could lose a to x's pod; one alone would be safe (b has room for both 1-GPU pods
    # in the worst case), but waits behind whole.
    admitted, notices = accept_admissions(tracker, cycle)
    assert admitted == []
    assert {n.key[2] for n in notices if "not bound" in n.message} == {"whole", "one"}
    _bind(tracker, "x", "b")
    assert accept_admissions(tracker, cycle)[0] == ["whole"]
    _bind(tracker, "whole", "a")
    assert accept_admissions(tracker, cycle)[0] == ["one"]


def test_a_shape_short_before_the_job_does_not_hold_back_jobs_that_leave_it_as_it_is() -> None:
    """Pods in flight that are already short of room (displaced, or refused by the scheduler for
    a reason we do not model) are the debt rule's business; they must not stop the queue."""
    tracker, cycle = make(
        [], b.node("a", gpu=8), b.node("c", cpu="64", gpu=0), clock=lambda: 0.0, binding_wait=0
    )
    _submit(tracker, "big", 8, 0)
    assert accept_admissions(tracker, cycle)[0] == ["big"]
    _fill(tracker, "a", 1)  # someone else's pod took one of the GPUs held for big
    cycle.binding_wait = 10.0
    tracker.observe(JOB, b.job("cpu-only", {"cpu": "1"}, created="2026-01-01T00:00:05Z"))
    _GPUS["cpu-only"] = (0, 1)
    assert accept_admissions(tracker, cycle)[0] == ["cpu-only"]


# ---------------------------------------------------------------- whatever the scheduler does
@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), policy=st.sampled_from(["random", "spread", "pack"]))
def test_no_admitted_pod_is_ever_left_without_a_node(seed: int, policy: str) -> None:
    """Admissions, a scheduler binding pending pods in random order on a node with room chosen
    at random, by spreading (LeastAllocated) or by packing (MostAllocated), and completions,
    interleaved at random on a fragmented cluster: with the guard, every pending pod always has
    a node it fits on, and every job is admitted and finishes in the end."""
    _play(seed, policy, binding_wait=10.0)


def test_without_the_guard_the_same_play_strands_pods() -> None:
    """The property above is not vacuous: with the guard off, some of the first seeds strand a
    pod (and none does with it on)."""
    stranded = []
    for seed in range(40):
        _play(seed, "random", binding_wait=10.0)
        try:
            _play(seed, "random", binding_wait=0.0)
        except AssertionError as exc:
            stranded.append(str(exc))
    assert len(stranded) >= 5
    assert all("has no node" in text for text in stranded)


def _play(seed: int, policy: str, binding_wait: float) -> None:
    rng = random.Random(seed)
    nodes = 5
    tracker, cycle = make(
        [],
        *(b.node(f"n{i}", cpu="64", memory="512Gi", gpu=8) for i in range(nodes)),
        clock=lambda: 0.0,
        binding_wait=binding_wait,
    )
    real = {}
    for i in range(nodes):
        used = rng.choice([0, 5, 6, 7])
        if used:
            _fill(tracker, f"n{i}", used)
        real[f"n{i}"] = 8 - used
    jobs = 0  # those that can run here at all (fillers may leave no node with 4 or 8 free)
    for i in range(40):
        gpus = rng.choice([1, 1, 2, 2, 4, 8])
        pods = 2 if gpus <= 2 and rng.random() < 0.2 else 1
        _submit(tracker, f"j{i:03d}", gpus, i % 60, pods)
        jobs += sum(free // gpus for free in real.values()) >= pods
    pending: list[tuple[str, int]] = []
    bound: dict[str, list[tuple[str, str]]] = {}  # job -> [(uid, node)]
    finished = 0
    for _ in range(4000):
        if finished == jobs:
            break
        r = rng.random()
        if r < 0.3 or (not pending and not bound):
            for name in accept_admissions(tracker, cycle)[0]:
                pending += [(name, k) for k in range(_GPUS[name][1])]
                bound[name] = []
        elif r < 0.8 and pending:
            job, k = pending.pop(rng.randrange(len(pending)))
            gpus = _GPUS[job][0]
            fits = [n for n, free in sorted(real.items()) if free >= gpus]
            assert fits, f"seed {seed} ({policy}): {job} pod {k} ({gpus} GPUs) has no node: {real}"
            if policy == "spread":
                node = max(fits, key=lambda n: real[n])
            elif policy == "pack":
                node = min(fits, key=lambda n: real[n])
            else:
                node = rng.choice(fits)
            real[node] -= gpus
            bound[job].append((_bind(tracker, job, node, k), node))
        else:
            done = [j for j, pods in bound.items() if len(pods) == _GPUS[j][1]]
            if not done:
                continue
            job = rng.choice(sorted(done))
            gpus, pods = _GPUS[job]
            obj = gpu_job(job, "default", gpus, 0, parallelism=pods)
            obj["spec"]["suspend"] = False
            obj["metadata"]["annotations"] = {ADMITTED_AT: "now"}
            obj["metadata"]["resourceVersion"] = "99"
            obj["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
            tracker.observe(JOB, obj)
            for uid, node in bound.pop(job):
                real[node] += gpus
                tracker.pod_changed(tracker.cache.delete_pod(uid))
            finished += 1
    assert finished == jobs, f"seed {seed} ({policy}): {finished} of {jobs} finished"
