"""Preemption through the admission cycle: reclaim of borrowed quota, lower-priority
preemption, the per-node choice, holding the preemptor's capacity until the victims' pods are
gone, and what a restarted controller does in the middle."""

from __future__ import annotations

from typing import Any

from kubequeue.admission.cycle import AdmissionCycle
from kubequeue.admission.preemption import PreemptionPolicy
from kubequeue.labels import PREEMPTIBLE
from kubequeue.resources import GPU
from unit import builders as b
from unit.simcluster import JOB, Cluster, make, two_teams

RECLAIMING = two_teams(preemption={"reclaimWithinTree": "Any"})


def two_nodes(**kw: Any) -> Cluster:
    return Cluster(RECLAIMING, b.node("n1", gpu=8), b.node("n2", gpu=8), **kw)


def test_a_team_under_its_min_reclaims_exactly_what_it_needs_from_the_borrower() -> None:
    c = two_nodes()
    for i in range(4):
        c.submit(f"a{i}", "ns-a", 4, i)
    assert c.cycle_admits() == ["a0", "a1", "a2", "a3"]  # a2, a3 borrow team-b's 8
    c.submit("b0", "ns-b", 8, 10)
    assert c.cycle_admits() == []
    [plan] = c.last.preemptions
    assert plan.job.key[2] == "b0" and plan.reason.startswith("reclaiming")
    # The two most recently admitted (borrowed) jobs, and only they; both on one node.
    assert sorted(v.key[2] for v in plan.victims) == ["a2", "a3"]
    assert len({a.node for a in plan.placement}) == 1
    [notice] = [n for n in c.last.notices if n.reason == "Preempting"]
    assert "Job ns-a/a2" in notice.message and "Job ns-a/a3" in notice.message
    # The preemptor holds its capacity: nothing else gets it while the victims stop.
    assert c.preempted() == ["a2", "a3"]
    c.submit("a9", "ns-a", 1, 11)
    assert c.cycle_admits() == [], "the freed GPUs are held for b0"
    assert c.tracker.queue.get(("Job", "ns-a", "a2")) is not None, "a victim waits again"
    c.pods_leave("a2")
    assert c.cycle_admits() == [], "one victim's pods are still there"
    c.pods_leave("a3")
    assert c.cycle_admits() == ["b0"], "admitted once the victims' pods are gone"
    assert c.tracker.ledger.used("team-a")[GPU] == 8000
    # Nothing is preempted twice: a2/a3 wait in team-a's line (at its min now).
    assert c.last.preemptions == []


def test_a_reclaim_finds_borrowed_jobs_that_share_a_node_when_the_cheapest_do_not() -> None:
    """The scheduler spread team-a's jobs (a0, a2 on n1; a1, a3 on n2): the two most recent,
    a2 and a3, are on different nodes and freeing them makes no room for an 8-GPU pod, and
    team-a borrowed only 8 GPUs, so a reclaim may take only two jobs: the two on one node."""
    c = two_nodes()
    c.bind_to = {"a0": "n1", "a1": "n2", "a2": "n1", "a3": "n2"}
    for i in range(4):
        c.submit(f"a{i}", "ns-a", 4, i)
    assert c.cycle_admits() == ["a0", "a1", "a2", "a3"]
    c.submit("b0", "ns-b", 8, 10)
    c.cycle_admits()
    [plan] = c.last.preemptions
    victims = sorted(v.key[2] for v in plan.victims)
    assert victims in (["a0", "a2"], ["a1", "a3"])
    assert len(victims) == 2, "never more than team-a borrowed"


def test_the_preemptor_waits_for_leaving_pods_instead_of_preempting_more_after_a_restart() -> None:
    c = two_nodes()
    for i in range(4):
        c.submit(f"a{i}", "ns-a", 4, i)
    c.cycle_admits()
    c.submit("b0", "ns-b", 8, 10)
    c.cycle_admits()
    c.preempted()  # the victims are suspended; their pods are terminating
    # A restarted controller: it re-reads everything and knows nothing of the plan.
    fresh = Cluster(RECLAIMING, b.node("n1", gpu=8), b.node("n2", gpu=8))
    for name, obj in c.objects.items():
        fresh.gpus[name] = c.gpus[name]
        fresh.tracker.observe(JOB, obj)
        for uid in c.pods.get(name, []):
            pod = c.tracker.cache._pods[uid]
            fresh.tracker.pod_changed(
                fresh.tracker.cache.upsert_pod(
                    b.pod(
                        uid,
                        pod.node,
                        {"cpu": "1", GPU: str(c.gpus[name])},
                        uid=uid,
                        namespace="ns-a",
                        owner_job=name,
                    ),
                    (("Job", "ns-a", name), None),
                )
            )
        fresh.pods[name] = list(c.pods.get(name, []))
    fresh.submit("b0", "ns-b", 8, 10)
    assert fresh.cycle_admits() == []
    [plan] = fresh.last.preemptions
    assert plan.victims == [], "it only waits for a2 and a3, who are already leaving"
    fresh.pods_leave("a2")
    fresh.pods_leave("a3")
    assert fresh.cycle_admits() == ["b0"]


def test_lower_priority_preemption_frees_the_node_that_can_hold_the_job() -> None:
    """The issue's per-node case: 2 nodes x 8 GPUs; low-priority 4-GPU jobs A, B on node 1 and
    C on node 2 beside a foreign 4-GPU pod; a high-priority 8-GPU job preempts A and B, not C."""
    c = Cluster(
        [],
        b.node("n1", gpu=8),
        b.node("n2", gpu=8),
        preemption=PreemptionPolicy(lower_priority=True),
    )
    c.tracker.cache.upsert_pod(b.pod("foreign", "n2", {GPU: "4"}), None)
    for i, name in enumerate(["a", "b", "c"]):
        c.submit(name, "ns", 4, i)
    assert c.cycle_admits() == ["a", "b", "c"]
    node_of = {n: c.tracker.cache._pods[c.pods[n][0]].node for n in "abc"}
    pair = sorted(n for n in "abc" if node_of[n] != "n2")  # tightest first: one went to n2
    assert len(pair) == 2 and node_of[pair[0]] == node_of[pair[1]] == "n1"
    c.submit("urgent", "ns", 8, 9, priority_class="high")
    c.cycle_admits()
    [plan] = c.last.preemptions
    assert sorted(v.key[2] for v in plan.victims) == pair, "never the one beside the foreign pod"
    assert {a.node for a in plan.placement} == {"n1"}


def test_equal_priority_and_opted_out_jobs_are_never_victims() -> None:
    c = Cluster([], b.node("n1", gpu=8), preemption=PreemptionPolicy(lower_priority=True))
    c.submit("same", "ns", 4, 0, priority_class="high")
    c.submit("kept", "ns", 4, 1, annotations={PREEMPTIBLE: "false"})
    assert c.cycle_admits() == ["same", "kept"]
    c.submit("urgent", "ns", 8, 9, priority_class="high")
    assert c.cycle_admits() == []
    assert c.last.preemptions == []


def test_without_a_policy_nothing_is_ever_preempted() -> None:
    c = Cluster([], b.node("n1", gpu=8))
    c.submit("low", "ns", 8, 0)
    c.cycle_admits()
    c.submit("urgent", "ns", 8, 9, priority_class="high")
    assert c.cycle_admits() == [] and c.last.preemptions == []


def test_a_preemptor_whose_victims_do_not_stop_in_time_gives_up_and_decides_again() -> None:
    now = [0.0]
    tracker, _ = make([], b.node("n1", gpu=8))
    cycle = AdmissionCycle(
        tracker,
        preemption=PreemptionPolicy(lower_priority=True),
        preemption_timeout=60,
        clock=lambda: now[0],
    )
    c = Cluster([], b.node("n1", gpu=8))
    c.tracker, c.cycle = tracker, cycle
    c.submit("low", "ns", 8, 0)
    c.cycle_admits()
    c.submit("urgent", "ns", 8, 9, priority_class="high")
    c.cycle_admits()
    assert ("Job", "ns", "urgent") in tracker.preempting
    now[0] = 61.0  # the victim was never stopped (say its write kept failing)
    c.cycle_admits()
    reasons = [n.reason for n in c.last.notices if n.key[2] == "urgent"]
    assert reasons[0] == "PreemptionTimedOut"
    # Back in its queue, it is judged again at once: the same plan, started afresh.
    assert tracker.preempting[("Job", "ns", "urgent")].started == 61.0
    assert tracker.reservations.held_pods(("Job", "ns", "urgent")) == 1
