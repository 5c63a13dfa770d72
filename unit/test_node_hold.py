"""Nodes held across queues for a starved job (admission/node_hold.py, capacity/drain.py): a
whole-node job that other queues' small jobs keep out gets a node drained for it, and only
that node; jobs that cannot land there go on."""

from __future__ import annotations

import calendar
from typing import Any

from kubequeue.capacity.cache import CapacityCache
from kubequeue.capacity.drain import plan_drain
from kubequeue.demand import PodSet
from kubequeue.queueing.spec import parse_queue
from kubequeue.resources import GPU
from unit import builders as b
from unit.simcluster import Cluster, queue

START = calendar.timegm((2026, 1, 1, 0, 0, 0))
TEAMS = [
    queue("team-a", namespaceSelector={"matchLabels": {"team": "a"}}),
    queue("team-b", namespaceSelector={"matchLabels": {"team": "b"}}),
]


class Clock:
    def __init__(self) -> None:
        self.now = START + 10.0

    def __call__(self) -> float:
        return self.now


def crowded(
    starvation: float, clock: Clock, teams: list[dict[str, Any]] = TEAMS, **kw: Any
) -> Cluster:
    """Two 8-GPU nodes full of team-b's 2-GPU jobs, eight more of them waiting, and team-a's
    8-GPU job, older than all the waiting ones."""
    c = Cluster(
        teams,
        b.node("n1", gpu=8),
        b.node("n2", gpu=8),
        starvation_seconds=starvation,
        wall_clock=clock,
        **kw,
    )
    for i in range(8):
        c.submit(f"b{i}", "ns-b", 2, i)
    assert sorted(c.cycle_admits()) == [f"b{i}" for i in range(8)]
    c.submit("big", "ns-a", 8, 10)
    for i in range(8, 16):
        c.submit(f"b{i}", "ns-b", 2, 20 + i)
    assert c.cycle_admits() == []
    return c


def _node(c: Cluster, name: str) -> str:
    [uid] = c.pods[name]
    return c.tracker.cache._pods[uid].node


def starved(
    clock: Clock, teams: list[dict[str, Any]] = TEAMS, **kw: Any
) -> tuple[Cluster, list[str], list[str]]:
    """``crowded``, then the big job starved and one 2-GPU job on n1 finished (no cycle run
    yet): the cluster, and the running jobs on n1 and on n2 before that."""
    c = crowded(60.0, clock, teams, **kw)
    clock.now = START + 75.0
    running = [f"b{i}" for i in range(8)]
    on_n1 = [n for n in running if _node(c, n) == "n1"]
    on_n2 = [n for n in running if _node(c, n) == "n2"]
    c.finish(on_n1[0])
    return c, on_n1, on_n2


def test_without_the_hold_other_queues_refill_every_freed_node_and_the_big_job_waits() -> None:
    clock = Clock()
    c = crowded(0.0, clock)
    clock.now = START + 10_000.0
    for i in range(8):
        c.finish(f"b{i}")
        assert c.cycle_admits() == [f"b{i + 8}"]
    assert c.tracker.queue.get(("Job", "ns-a", "big")) is not None
    assert c.cycle.hold is None


def test_a_starved_job_gets_one_node_drained_for_it_and_other_queues_use_the_rest() -> None:
    clock = Clock()
    c = crowded(60.0, clock)
    # Not starved yet: team-b refills what frees.
    clock.now = START + 30.0
    c.finish("b0")
    assert c.cycle_admits() == ["b8"]
    # Starved: the next freed room is not refilled where the hold is.
    clock.now = START + 75.0
    on_n1 = [n for n in (f"b{i}" for i in range(1, 9)) if _node(c, n) == "n1"]
    on_n2 = [n for n in (f"b{i}" for i in range(1, 9)) if _node(c, n) == "n2"]
    assert len(on_n1) == len(on_n2) == 4
    c.finish(on_n1[0])
    assert c.cycle_admits() == []
    hold = c.cycle.hold
    assert hold is not None and hold.key == ("Job", "ns-a", "big")
    assert hold.nodes == ("n1",), "the node with the least left to drain (n1: 6 of 8 GPUs)"
    [held] = [n for n in c.last.notices if n.reason == "NodesHeld"]
    assert held.key == ("Job", "ns-a", "big") and "n1" in held.message
    waiting = [n for n in c.last.notices if n.key[2] == "b9"]
    assert [n.reason for n in waiting] == ["Queued"]
    assert "held for a job that has waited past the starvation timeout" in waiting[0].message
    job = c.tracker.queue.get(("Job", "ns-b", "b9"))
    assert job is not None and "node n1, held for Job ns-a/big" in job.wait_reason
    # Room that frees on n2 is not used either by a job whose pod fits on n1's free room: the
    # scheduler, not kube-queue, binds pods, and could put it on n1.
    c.finish(on_n2[0])
    assert c.cycle_admits() == []
    # n1 drains; the big job starts there, the hold ends, and the room on n2 is used again.
    admitted: list[str] = []
    for name in on_n1[1:]:
        c.finish(name)
        admitted += c.cycle_admits()
        assert ("big" in admitted) == (name == on_n1[-1])
    assert _node(c, "big") == "n1"
    assert c.cycle.hold is None
    admitted += c.cycle_admits()
    assert sorted(admitted) == ["b9", "big"], "the 2 GPUs freed on n2 meanwhile"


def test_jobs_that_cannot_land_on_a_held_node_are_admitted_meanwhile() -> None:
    clock = Clock()
    c, _, on_n2 = starved(clock)
    assert c.cycle_admits() == []
    assert c.cycle.hold is not None and c.cycle.hold.nodes == ("n1",)
    # A 4-GPU job does not fit in the 2 GPUs free on n1 (the scheduler cannot put it there);
    # when n2 frees 4 it is admitted although it is younger than every waiting 2-GPU job.
    c.submit("b-four", "ns-b", 4, 59)
    c.finish(on_n2[0])
    c.finish(on_n2[1])
    assert c.cycle_admits() == ["b-four"]


def team_a(**spec: Any) -> list[dict[str, Any]]:
    return [queue("team-a", namespaceSelector={"matchLabels": {"team": "a"}}, **spec), TEAMS[1]]


def test_the_held_jobs_own_queue_goes_on_where_it_cannot_take_the_held_room() -> None:
    """A starved job without held nodes stops its whole queue, since any room the jobs behind
    it take might be room it needs. With nodes held for it, it is known where it will start:
    the jobs behind it that cannot land there start as other queues' jobs do (backfill)."""
    clock = Clock()
    c, _, on_n2 = starved(clock)
    assert c.cycle_admits() == []
    assert c.cycle.hold is not None and c.cycle.hold.nodes == ("n1",)
    c.submit("a-two", "ns-a", 2, 58)  # fits in n1's free room: the scheduler could put it there
    c.submit("a-four", "ns-a", 4, 59)  # cannot fit on n1 as it is
    c.finish(on_n2[0])
    c.finish(on_n2[1])
    assert c.cycle_admits() == ["a-four"], "behind big in its queue, on n2's 4 free GPUs"
    assert _node(c, "a-four") == "n2"
    job = c.tracker.queue.get(("Job", "ns-a", "a-two"))
    assert job is not None and "node n1, held for Job ns-a/big" in job.wait_reason
    assert c.cycle.blocked == {}, "big does not stop its queue while nodes are held for it"


def test_behind_the_held_job_its_queue_keeps_quota_for_it() -> None:
    """Backfill must not spend the quota the starved job will need when its nodes drain."""
    clock = Clock()
    c, _, on_n2 = starved(clock, team_a(quota={"max": {GPU: 10}}))
    assert c.cycle_admits() == []
    assert c.cycle.hold is not None
    c.submit("a-four", "ns-a", 4, 59)
    c.finish(on_n2[0])
    c.finish(on_n2[1])
    assert c.cycle_admits() == [], "8 + 4 GPUs is more than team-a's max of 10"
    job = c.tracker.queue.get(("Job", "ns-a", "a-four"))
    assert job is not None
    assert "quota is kept for Job ns-a/big" in job.wait_reason, job.wait_reason
    [told] = [n for n in c.last.notices if n.key[2] == "a-four"]
    assert told.reason == "Queued" and "quota is kept for a job ahead of it" in told.message
    # Room for both: it starts.
    c.tracker.set_queues(parse_queue(q) for q in team_a(quota={"max": {GPU: 12}}))
    assert c.cycle_admits() == ["a-four"]


def test_a_strict_fifo_queue_still_waits_behind_its_held_job() -> None:
    clock = Clock()
    c, _, on_n2 = starved(clock, team_a(strategy="StrictFIFO"))
    assert c.cycle_admits() == []
    assert c.cycle.hold is not None
    c.submit("a-four", "ns-a", 4, 59)
    c.finish(on_n2[0])
    c.finish(on_n2[1])
    assert c.cycle_admits() == []
    assert c.cycle.blocked[("team-a")].key == ("Job", "ns-a", "big")


def test_backfill_behind_the_held_job_is_the_same_with_and_without_parking() -> None:
    runs = []
    for parking in (True, False):
        clock = Clock()
        c, on_n1, on_n2 = starved(clock, team_a(quota={"max": {GPU: 14}}), parking=parking)
        trace = [(c.cycle_admits(), c.cycle.hold.nodes if c.cycle.hold else None)]
        for i, gpus in enumerate((4, 2, 4, 1, 8, 2)):
            c.submit(f"a{i}", "ns-a", gpus, 40 + i)
        for name in [*on_n2, *on_n1[1:], "b8", "b9"]:
            if name in c.objects:
                c.finish(name)
            admitted = c.cycle_admits()
            trace.append((admitted, c.cycle.hold.nodes if c.cycle.hold else None))
            clock.now += 5.0
        runs.append(trace)
    assert runs[0] == runs[1]
    assert any(a.startswith("a") for admitted, _ in runs[0] for a in admitted)


def test_no_node_is_held_when_the_job_waits_for_capacity_nobody_here_frees() -> None:
    """Room taken by pods kube-queue did not admit is not expected to leave: holding a node for
    it would only idle the node."""
    clock = Clock()
    c = Cluster(
        TEAMS,
        b.node("n1", gpu=8),
        b.node("n2", gpu=8),
        starvation_seconds=60.0,
        wall_clock=clock,
    )
    for node in ("n1", "n2"):
        c.tracker.cache.upsert_pod(b.pod(f"daemon-{node}", node, {GPU: "4"}), None)
    c.submit("big", "ns-a", 8, 0)
    c.submit("small", "ns-b", 2, 5)
    clock.now = START + 1000.0
    assert c.cycle_admits() == ["small"]
    assert c.cycle.hold is None


def test_the_hold_ends_when_its_job_is_deleted() -> None:
    clock = Clock()
    c, _, _ = starved(clock)
    assert c.cycle_admits() == []
    assert c.cycle.hold is not None
    c.tracker.forget(("Job", "ns-a", "big"))
    assert c.cycle_admits() == ["b8"]
    assert c.cycle.hold is None


def test_the_hold_is_the_same_with_and_without_parking() -> None:
    """Parking leaves out jobs whose visit changes nothing; a hold must not change that."""
    runs = []
    for parking in (True, False):
        clock = Clock()
        c = crowded(60.0, clock, parking=parking)
        clock.now = START + 75.0
        trace = []
        for i in range(8):
            c.finish(f"b{i}")
            trace.append((c.cycle_admits(), c.cycle.hold.nodes if c.cycle.hold else None))
        runs.append(trace)
    assert runs[0] == runs[1]


def _scratch(*nodes: Any) -> CapacityCache:
    cache = CapacityCache()
    for n in nodes:
        cache.upsert_node(n)
    return cache


def test_the_drain_plan_uses_the_nodes_with_least_to_drain() -> None:
    cache = _scratch(*(b.node(f"n{i}", gpu=8) for i in range(6)))
    for i in range(6):
        cache.upsert_pod(b.pod(f"p{i}", f"n{i}", {GPU: "8"}), None)
    # Admitted jobs hold 8, 3, 8, 2, 8, 4 GPUs (the rest of each node is someone else's).
    drainable = {f"n{i}": {GPU: g * 1000} for i, g in enumerate((8, 3, 8, 2, 8, 4))}
    gang = [PodSet("w", 3, {GPU: 2000})]
    placed = plan_drain(gang, cache.scratch(), drainable)
    assert placed is not None
    # n3 (2 to drain), n1 (3) and n5 (4) hold the gang together; never a node whose admitted
    # jobs hold all of it.
    assert {a.node for a in placed} <= {"n1", "n3", "n5"}
    assert sum(a.count for a in placed) == 3


def test_the_drain_plan_is_none_when_draining_everything_is_not_enough() -> None:
    cache = _scratch(b.node("n1", gpu=8), b.node("n2", gpu=8))
    for node in ("n1", "n2"):
        cache.upsert_pod(b.pod(f"x-{node}", node, {GPU: "8"}), None)
    drainable = {"n1": {GPU: 4000}, "n2": {GPU: 4000}}
    assert plan_drain([PodSet("w", 1, {GPU: 8000})], cache.scratch(), drainable) is None
    assert plan_drain([PodSet("w", 2, {GPU: 4000})], cache.scratch(), drainable) is not None


def test_status_says_which_nodes_are_held_for_whom() -> None:
    from kubequeue.status import job_rows

    clock = Clock()
    c, _, _ = starved(clock)
    assert c.cycle_admits() == []
    why = {row["name"]: row["why"] for row in job_rows(c.tracker, c.cycle, now=clock.now)}
    assert why["big"].endswith("; node(s) n1 held for it (waited past the starvation timeout)")
    assert why["b8"].startswith("it fits, but a pod could land on node n1, held for Job ns-a/big")


def test_the_jobs_a_hold_keeps_waiting_are_told_within_the_reasons_budget() -> None:
    """A hold can keep thousands of jobs waiting; their Events share the API server with the
    admissions, so they come a budget's worth per cycle, once per job."""
    clock = Clock()
    c, _, _ = starved(clock, explain_budget=3)
    told: list[str] = []
    for _ in range(4):
        assert c.cycle_admits() == []
        held = [n.key[2] for n in c.last.notices if n.reason == "Queued" and "held" in n.message]
        assert len(held) <= 3
        told += held
    assert sorted(told) == sorted(f"b{i}" for i in range(8, 16)), "each waiting job, once"
    assert all(
        "held for Job ns-a/big" in job.wait_reason
        for job in c.tracker.queue.ordered("team-b")
    )


def test_the_hold_ends_when_its_queue_can_no_longer_take_the_job() -> None:
    clock = Clock()
    c, _, _ = starved(clock)
    assert c.cycle_admits() == []
    assert c.cycle.hold is not None
    capped = [dict(q) for q in TEAMS]
    capped[0] = queue(
        "team-a", namespaceSelector={"matchLabels": {"team": "a"}}, quota={"max": {GPU: 4}}
    )
    c.tracker.set_queues(parse_queue(q) for q in capped)
    assert c.cycle_admits() == ["b8"], "n1's free room is used again"
    assert c.cycle.hold is None


def test_a_job_named_twice_is_counted_once_in_what_can_drain() -> None:
    """A preemption victim is both admitted and leaving until it stops: counting it twice
    would plan a hold on room that never frees."""
    clock = Clock()
    c = crowded(0.0, clock)
    key = ("Job", "ns-b", "b0")
    once = c.tracker.footprints([key])
    assert once == c.tracker.footprint(key) and once
    assert c.tracker.footprints([key, key, key]) == once
