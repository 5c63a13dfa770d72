"""capacity/pins.py: which node a gated pod of an admitted job is pinned to."""

from __future__ import annotations

from collections import Counter
from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from kubequeue.capacity.cache import CapacityCache
from kubequeue.capacity.fit import place
from kubequeue.capacity.pins import Pins
from kubequeue.capacity.reservations import Reservations
from kubequeue.demand import PodSet, pod_request
from kubequeue.identity import JobKey, PodOwner
from kubequeue.kube.pods import ungate_ops
from kubequeue.labels import HOSTNAME, PLACEMENT_GATE, PLACEMENT_LABEL
from kubequeue.objects import Pod, PodSpec
from kubequeue.resources import GPU, Resources
from kubequeue.scheduling import NodeConstraints
from kubequeue.webhook.mutations import pod_gate
from unit import builders as b
from unit.jsonpatch import PatchFailed, apply_patch

JOB: JobKey = ("Job", "default", "train")


def request(gpus: int) -> Resources:
    """What a pod of the test's template requests, as the adapters compute it."""
    return pod_request(msgspec.convert(b.pod_spec({"cpu": "1", GPU: str(gpus)}), PodSpec))


def unbound_pod(
    uid: str, *, gpus: int = 1, gated: bool = True, host: str | None = None,
    owner: str = "train",
) -> Pod:
    spec: dict[str, Any] = b.pod_spec({"cpu": "1", GPU: str(gpus)})
    if gated:
        spec["schedulingGates"] = [{"name": PLACEMENT_GATE}]
    if host is not None:
        spec["nodeSelector"] = {HOSTNAME: host}
    raw = {
        "metadata": {"name": uid, "namespace": "default", "uid": uid,
                     "ownerReferences": [{"kind": "Job", "name": owner, "controller": True}]},
        "spec": spec,
        "status": {"phase": "Pending"},
    }
    return msgspec.convert(raw, Pod)


class World:
    def __init__(self, *nodes: tuple[str, int], admitted: tuple[JobKey, ...] = (JOB,)) -> None:
        self.cache = CapacityCache()
        for name, gpus in nodes:
            self.cache.upsert_node(b.node(name, gpu=gpus, labels={HOSTNAME: f"host-{name}"}))
        self.reservations = Reservations(self.cache)
        self.admitted = set(admitted)
        self.pins = Pins(self.cache, self.reservations, self.resolve, self.admitted.__contains__)

    @staticmethod
    def resolve(owner: PodOwner) -> tuple[JobKey, str | None]:
        return owner

    def hold(self, job: JobKey, pods: int, gpus: int = 1) -> list[tuple[str, int]]:
        placed = self.hold_if_fits(job, pods, gpus)
        assert placed is not None
        return placed

    def hold_if_fits(self, job: JobKey, pods: int, gpus: int = 1) -> list[tuple[str, int]] | None:
        """Admit ``job`` (pods x gpus) with real holds where the fit puts them, if it fits."""
        ps = [PodSet("main", pods, request(gpus), NodeConstraints())]
        placed = place(ps, self.cache)
        if placed is None:
            return None
        self.reservations.hold(job, ps, placed)
        return [(a.node, a.count) for a in placed]

    def gate(self, pod: Pod, job: JobKey = JOB) -> None:
        owner: PodOwner = (job, None)
        assert self.pins.upsert(pod, owner)

    def pin_all(self) -> list[tuple[str, str | None]]:
        return [(p.outcome, p.node) for p in map(self.pins.choose, self.pins.take())]


def test_gated_pods_take_the_held_slots_one_each() -> None:
    w = World(("a", 2), ("b", 2))
    held = dict(w.hold(JOB, 3))
    for i in range(3):
        w.gate(unbound_pod(f"p{i}"))
    pins = w.pin_all()
    assert all(outcome == "planned" for outcome, _ in pins)
    assert Counter(node for _, node in pins) == Counter(held)


def test_a_pod_beyond_the_plan_is_replanned_and_without_room_left_unpinned() -> None:
    w = World(("a", 2))
    w.hold(JOB, 1)
    for i in range(3):
        w.gate(unbound_pod(f"p{i}"))
    # 1 held slot; a second pod fits on the free GPU; a third has no room at all.
    assert w.pin_all() == [("planned", "a"), ("replanned", "a"), ("unpinned", None)]


def test_pods_of_jobs_not_admitted_or_already_pinned_are_only_ungated() -> None:
    w = World(("a", 4), admitted=())
    w.gate(unbound_pod("p0"))
    w.gate(unbound_pod("p1", host="a"))
    assert w.pin_all() == [("unpinned", None), ("unpinned", None)]


def test_a_pinned_pod_not_bound_yet_counts_against_its_node_also_after_a_restart() -> None:
    w = World(("a", 1), ("b", 1))
    w.hold(JOB, 2)
    # Seen ungated with a pin to a (pinned by a previous leader), not bound: a is taken.
    assert not w.pins.upsert(unbound_pod("old", gated=False, host="host-a"), (JOB, None))
    w.gate(unbound_pod("new"))
    assert w.pin_all() == [("planned", "b")]
    # It left the unbound watch: bound (or deleted). Its slot stays taken until the bound
    # watch shows it (the cache does not count it before), then nothing is counted twice.
    w.pins.delete("old")
    assert w.pins.pinned_on(JOB, "main") == {"host-a": 1, "host-b": 1}
    w.pins.bound(unbound_pod("old", gated=False, host="host-a"), (JOB, None))
    assert w.pins.pinned_on(JOB, "main") == {"host-b": 1}
    # One deleted unbound never shows up bound: its slot comes back after a deadline.
    now = [0.0]
    w.pins.clock = lambda: now[0]
    w.pins.delete("new")
    assert w.pins.pinned_on(JOB, "main") == {"host-b": 1}
    now[0] = 31.0
    w.gate(unbound_pod("again"))
    assert w.pin_all() == [("planned", "a")]  # (old's hold on a: this test reconciles none)
    assert w.pins.pinned_on(JOB, "main") == {"host-a": 1}, "new's slot on b came back"


def test_a_refused_pin_frees_its_slot() -> None:
    w = World(("a", 1))
    w.hold(JOB, 1)
    w.gate(unbound_pod("p0"))
    [first] = w.pin_all()
    assert first == ("planned", "a")
    assert not w.pins.failed("p0", retry=False)
    w.gate(unbound_pod("p1"))
    assert w.pin_all() == [("planned", "a")]


def test_a_stale_gated_event_during_the_write_keeps_the_slot_taken() -> None:
    """The scheduler marks a gated pod SchedulingGated: an event that still shows the gate
    arrives after the choice, before the write's own. It must not free the chosen slot (the
    next pod would take it too) nor queue the pod again."""
    w = World(("a", 1), ("b", 1))
    w.hold(JOB, 2)
    w.gate(unbound_pod("p0"))
    assert w.pin_all() == [("planned", "a")]
    assert not w.pins.upsert(unbound_pod("p0"), (JOB, None))  # stale: still gated
    w.gate(unbound_pod("p1"))
    assert w.pin_all() == [("planned", "b")]
    # p0's write failed because the pod changed: its newest gated view waits again, and
    # its slot is free for it.
    assert w.pins.failed("p0", retry=True)
    assert w.pin_all() == [("planned", "a")]


@settings(max_examples=200, deadline=None)
@given(
    nodes=st.lists(st.integers(1, 8), min_size=1, max_size=5),
    jobs=st.lists(st.tuples(st.integers(1, 6), st.integers(1, 4)), min_size=1, max_size=4),
    extra=st.integers(0, 3),
)
def test_pins_never_put_more_pods_on_a_node_than_its_jobs_hold_or_its_room(
    nodes: list[int], jobs: list[tuple[int, int]], extra: int
) -> None:
    """Soundness against the holds: a planned pin is a held slot of the pod's own job (never
    more pods of a job on a node than it holds there), a replanned one had free room, and every
    pod of a held job is pinned as planned when it has no more pods than its plan."""
    keys = [("Job", "default", f"j{i}") for i in range(len(jobs))]
    w = World(*((f"n{i}", g) for i, g in enumerate(nodes)), admitted=tuple(keys))
    holds: dict[JobKey, Counter[str]] = {}
    for key, (pods, gpus) in zip(keys, jobs, strict=True):
        placed = w.hold_if_fits(key, pods, gpus)
        if placed is None:
            continue
        holds[key] = Counter(dict(placed))
        for i in range(pods + extra):
            w.gate(unbound_pod(f"{key[2]}-{i}", gpus=gpus, owner=key[2]), key)
        pinned = Counter[str]()
        planned = 0
        for pin in map(w.pins.choose, w.pins.take()):
            if pin.outcome == "planned":
                assert pin.node is not None
                pinned[pin.node] += 1
                planned += 1
        assert all(pinned[n] <= holds[key][n] for n in pinned)
        assert planned == pods  # every held slot used, each by one pod


def test_the_webhook_gates_owned_unbound_pods_once() -> None:
    owned = {"metadata": {"ownerReferences": [{"kind": "Job", "name": "j", "controller": True}]},
             "spec": {"containers": []}}
    gated = apply_patch(owned, pod_gate("Pod", owned))
    assert gated["spec"]["schedulingGates"] == [{"name": PLACEMENT_GATE}]
    assert gated["metadata"]["labels"] == {PLACEMENT_LABEL: "gated"}  # what the watch selects
    assert pod_gate("Pod", gated) == []  # already ours
    other = {**owned, "spec": {"schedulingGates": [{"name": "x"}]},
             "metadata": {**owned["metadata"], "labels": {"app": "a"}}}
    both = apply_patch(other, pod_gate("Pod", other))
    assert both["spec"]["schedulingGates"] == [{"name": "x"}, {"name": PLACEMENT_GATE}]
    assert both["metadata"]["labels"] == {"app": "a", PLACEMENT_LABEL: "gated"}
    assert pod_gate("Pod", {"metadata": {}, "spec": {}}) == []  # no controller: not queued
    assert pod_gate("Pod", {**owned, "spec": {"nodeName": "n"}}) == []  # bound at creation
    assert pod_gate("Job", owned) == []


def test_ungating_removes_only_our_gate_and_adds_the_pin() -> None:
    pod = {"metadata": {"uid": "u"},
           "spec": {"schedulingGates": [{"name": "x"}, {"name": PLACEMENT_GATE}],
                    "nodeSelector": {"zone": "z"}}}
    done = apply_patch(pod, ungate_ops("u", ("x", PLACEMENT_GATE), "node-1", True, False))
    assert done["spec"]["schedulingGates"] == [{"name": "x"}]
    assert done["spec"]["nodeSelector"] == {"zone": "z", HOSTNAME: "node-1"}
    assert done["metadata"]["labels"] == {PLACEMENT_LABEL: "pinned"}
    alone = {"metadata": {"uid": "u", "labels": {PLACEMENT_LABEL: "gated"}},
             "spec": {"schedulingGates": [{"name": PLACEMENT_GATE}]}}
    done = apply_patch(alone, ungate_ops("u", (PLACEMENT_GATE,), None, False, True))
    assert "schedulingGates" not in done["spec"] and "nodeSelector" not in done["spec"]
    assert done["metadata"]["labels"] == {PLACEMENT_LABEL: "unpinned"}
    try:  # another controller removed its gate meanwhile: refused, not put back
        apply_patch(alone, ungate_ops("u", ("x", PLACEMENT_GATE), "n", False, True))
    except PatchFailed:
        pass
    else:
        raise AssertionError("the gates test must fail")


def test_a_replanned_pod_keeps_its_room_until_it_binds_or_goes() -> None:
    w = World(("a", 1))
    w.gate(unbound_pod("extra", owner="train"))
    w.hold(JOB, 0)  # admitted with nothing left to hold (its pods already accounted)
    [pin] = w.pin_all()
    assert pin == ("replanned", "a")
    assert w.cache.nodes["a"].free[GPU] == 0, "its room is reserved"
    # Seen ungated with its pin: still its own room, not one of the plan's slots.
    w.pins.upsert(unbound_pod("extra", gated=False, host="host-a"), (JOB, None))
    assert w.cache.nodes["a"].free[GPU] == 0
    # It left the unbound watch: the room stays reserved until the bound watch shows it (in
    # between the cache counts neither the pod nor, else, its room), then the pod counts.
    w.pins.delete("extra")
    assert w.cache.nodes["a"].free[GPU] == 0
    w.pins.bound(unbound_pod("extra", gated=False, host="host-a"), (JOB, None))
    assert w.cache.nodes["a"].free[GPU] == 1000  # (this test's cache is not shown the pod)


def test_a_hold_a_pinned_pod_counts_on_is_dropped_last() -> None:
    """Holds are interchangeable for pods the scheduler places, not for pinned ones: when the
    job needs one hold less (a sibling bound elsewhere, or ended), the hold kept must be the
    one its pinned pod will bind on, or another job could be admitted into that room."""
    w = World(("a", 4), ("b", 4))
    ps = [PodSet("main", 2, request(1), NodeConstraints())]
    # Held on b first, then a: for nodes not stranded, _drop used to go in that order.
    from kubequeue.capacity.fit import Assignment

    w.reservations.hold(JOB, ps, [Assignment("main", "b", 1, request(1)),
                                  Assignment("main", "a", 1, request(1))])
    # A pod pinned to b (not bound yet) and nothing pinned to a.
    assert not w.pins.upsert(unbound_pod("p-b", gated=False, host="host-b"), (JOB, None))
    w.reservations.track(JOB, [PodSet("main", 1, request(1), NodeConstraints())])
    assert w.reservations.placed(JOB) == [("b", request(1), 1)]


def test_a_pod_pinned_at_creation_holds_its_slot_until_seen_then_hands_it_over() -> None:
    """The leader's webhook pins a new pod before it has a uid: its slot is counted per (job,
    host, pod set) until the pod shows up (unbound or bound) and takes the count over, or a
    deadline passes (its create failed after the webhook answered)."""
    w = World(("a", 1), ("b", 1))
    w.hold(JOB, 2)
    now = [0.0]
    w.pins.clock = lambda: now[0]
    assert w.pins.pin_at_creation(unbound_pod("new", gated=False), (JOB, None)) == "host-a"
    w.gate(unbound_pod("p1"))
    assert w.pin_all() == [("planned", "b")], "a's slot is taken by the pod pinned at creation"
    # It shows up unbound, pinned to a: the count is handed over, not doubled.
    assert not w.pins.upsert(unbound_pod("new", gated=False, host="host-a"), (JOB, None))
    assert w.pins.pinned_on(JOB, "main") == {"host-a": 1, "host-b": 1}
    # A second pod pinned at creation that binds before its unbound event is ever seen.
    w2 = World(("a", 1))
    w2.hold(JOB, 1)
    assert w2.pins.pin_at_creation(unbound_pod("x", gated=False), (JOB, None)) == "host-a"
    w2.pins.bound(unbound_pod("x", gated=False, host="host-a"), (JOB, None))
    assert w2.pins.pinned_on(JOB, "main") == {}
    # A create that failed after the webhook answered: the slot comes back after the deadline.
    w3 = World(("a", 1))
    w3.hold(JOB, 1)
    later = [0.0]
    w3.pins.clock = lambda: later[0]
    assert w3.pins.pin_at_creation(unbound_pod("lost", gated=False), (JOB, None)) == "host-a"
    assert w3.pins.pin_at_creation(unbound_pod("next", gated=False), (JOB, None)) is None
    later[0] = 31.0
    assert w3.pins.pin_at_creation(unbound_pod("next", gated=False), (JOB, None)) == "host-a"


def test_the_leaders_webhook_pins_at_creation_and_a_dry_run_only_gates() -> None:
    owned = {"metadata": {"ownerReferences": [{"kind": "Job", "name": "j", "controller": True}]},
             "spec": {"containers": []}}
    pinned = apply_patch(owned, pod_gate("Pod", owned, pin=lambda obj: "host-a"))
    assert pinned["spec"]["nodeSelector"] == {HOSTNAME: "host-a"}
    assert "schedulingGates" not in pinned["spec"]
    assert pinned["metadata"]["labels"] == {PLACEMENT_LABEL: "pinned"}
    gated = apply_patch(owned, pod_gate("Pod", owned, pin=lambda obj: None))
    assert gated["spec"]["schedulingGates"] == [{"name": PLACEMENT_GATE}]


def test_a_stale_gated_event_after_the_write_answered_keeps_the_slot_taken_too() -> None:
    """The write's answer can come back before the watch delivers events older than it (CI
    caught both pods of a gang pinned to one node that way): the pod counts as being written
    until the watch shows it ungated."""
    w = World(("a", 1), ("b", 1))
    w.hold(JOB, 2)
    w.gate(unbound_pod("p0"))
    assert w.pin_all() == [("planned", "a")]
    w.pins.written("p0")
    assert not w.pins.upsert(unbound_pod("p0"), (JOB, None))  # older than the write
    w.gate(unbound_pod("p1"))
    assert w.pin_all() == [("planned", "b")]
    assert not w.pins.upsert(unbound_pod("p0", gated=False, host="host-a"), (JOB, None))
    assert w.pins.pinned_on(JOB, "main") == {"host-a": 1, "host-b": 1}


def test_when_a_pod_binds_with_room_to_spare_the_hold_beside_it_is_the_one_dropped() -> None:
    """A node with room to spare is not over-committed when its planned pod binds, so the hold
    dropped used to be whichever came first; the holds of the job's pods not created yet then
    moved (CI-free repro of a pod pinned off its plan): the hold beside the bound pod goes."""
    from kubequeue.capacity.fit import Assignment

    w = World(("a", 8), ("b", 8))
    ps = [PodSet("main", 2, request(1), NodeConstraints())]
    w.reservations.hold(JOB, ps, [Assignment("main", "b", 1, request(1)),
                                  Assignment("main", "a", 1, request(1))])
    w.reservations.bound_pods = lambda job: w.cache.bound_pods(job)
    w.cache.upsert_pod(b.pod("p-a", "a", {"cpu": "1", GPU: "1"}, owner_job="train"),
                       (JOB, None))
    w.reservations.reconcile(JOB)
    assert w.reservations.placed(JOB) == [("b", request(1), 1)]


def test_a_stale_unbound_event_of_a_bound_pod_does_not_take_a_siblings_slot() -> None:
    """Two watches: the bound pod's event can come before the unbound watch's older one. That
    stale event used to take over a sibling's slot pinned at creation (and uncount it), so the
    node looked free and a fifth 2-GPU pod was pinned onto an 8-GPU node holding four (the
    topology benchmark: an admitted gang pod left Unschedulable)."""
    w = World(("a", 2), ("b", 1))
    w.hold(JOB, 3)
    w.reservations.bound_pods = lambda job: w.cache.bound_pods(job)
    assert w.pins.pin_at_creation(unbound_pod("x", gated=False), (JOB, None)) == "host-a"
    assert w.pins.pin_at_creation(unbound_pod("y", gated=False), (JOB, None)) == "host-a"
    # x binds (the bound watch: pins first, then the cache, then the reservation shrinks) ...
    x = unbound_pod("x", gated=False, host="host-a")
    w.pins.bound(x, (JOB, None))
    w.cache.upsert_pod(
        b.pod("x", "a", {"cpu": "1", GPU: "1"}, owner_job="train", uid="x"), (JOB, None)
    )
    w.reservations.reconcile(JOB)
    # ... then the unbound watch delivers x's older, unbound event.
    assert not w.pins.upsert(x, (JOB, None))
    assert w.pins.pinned_on(JOB, "main") == {"host-a": 1}, "y still holds a's second slot"
    assert w.pins.pin_at_creation(unbound_pod("z", gated=False), (JOB, None)) == "host-b"


def test_a_replacement_pod_of_a_gang_held_in_a_domain_is_replanned_in_that_domain() -> None:
    """A pod beyond its job's holds (a failed pod's replacement, created while the old one
    still terminates) is replanned where room is: first in the domain its pod set is held in
    (the reservation's pod set carries it), then anywhere rather than nowhere."""
    rack = "example.com/rack"
    w = World()
    for name, gpus, r in (("a", 3, "r0"), ("b0", 8, "r1"), ("b1", 8, "r1")):
        w.cache.upsert_node(b.node(name, gpu=gpus, labels={HOSTNAME: f"host-{name}", rack: r}))
    ps = [PodSet("main", 1, request(3), NodeConstraints(((rack, "r1"),)))]
    placed = place(ps, w.cache)
    assert placed is not None
    w.reservations.hold(JOB, ps, placed)
    w.gate(unbound_pod("p0", gpus=3))
    assert w.pin_all() == [("planned", "b0")]
    # a (3 GPUs free) is the tightest fit, but in another rack; b0 has 5 left.
    for uid, where in (("r1", "b0"), ("r2", "b1"), ("r3", "b1"), ("r4", "a")):
        w.gate(unbound_pod(uid, gpus=3))
        assert w.pin_all() == [("replanned", where)], uid


def test_later_events_of_a_bound_pod_do_not_take_a_siblings_slot() -> None:
    """The bound-pod watch calls ``bound`` on every event of a bound pod (Running, Completed,
    ...), not only on its bind: only the first may settle its slot pinned at creation. Later
    ones took a sibling's provisional slot on the same host, so the node looked free and more
    pods were pinned to it than it holds (the topology benchmark: ten 1-GPU pods pinned to an
    8-GPU node)."""
    w = World(("a", 2), ("b", 1))
    w.hold(JOB, 3)
    assert w.pins.pin_at_creation(unbound_pod("x", gated=False), (JOB, None)) == "host-a"
    assert w.pins.pin_at_creation(unbound_pod("y", gated=False), (JOB, None)) == "host-a"

    def seen_bound(phase: str) -> None:
        pod = b.pod("x", "a", {"cpu": "1", GPU: "1"}, owner_job="train", uid="x", phase=phase)
        typed = msgspec.structs.replace(
            pod, spec=msgspec.structs.replace(pod.spec, nodeSelector={HOSTNAME: "host-a"})
        )
        w.pins.bound(typed, (JOB, None))  # as PodHandler: pins, then the cache
        w.cache.upsert_pod(typed, (JOB, None))
        w.reservations.reconcile(JOB)

    w.reservations.bound_pods = lambda job: w.cache.bound_pods(job)
    for phase in ("Pending", "Running", "Running"):
        seen_bound(phase)
        assert w.pins.pinned_on(JOB, "main") == {"host-a": 1}, phase
    assert w.pins.pin_at_creation(unbound_pod("z", gated=False), (JOB, None)) == "host-b"
    for phase in ("Succeeded", "Succeeded"):  # ended: y's slot still stays y's
        seen_bound(phase)
        assert w.pins.pinned_on(JOB, "main") == {"host-a": 1, "host-b": 1}, phase
