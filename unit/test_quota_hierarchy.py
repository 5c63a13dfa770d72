"""Guarantees set on a parent queue (issue 30, item 1), through the admission cycle: they are
kept for the parent's subtree against borrowers, a job of a team without a min of its own is
within its department's guarantee (not borrowing) and may reclaim with it, and a team within
its department's guarantee is not a reclaim victim of another department's team."""

from __future__ import annotations

from typing import Any

from kubequeue.labels import BORROWING
from kubequeue.resources import GPU
from unit import builders as b
from unit.simcluster import Cluster, queue

RECLAIM = {"reclaimWithinTree": "Any"}


def department_tree(research: dict[str, Any], **b1: Any) -> list[dict[str, Any]]:
    """research -> team-a (leaf, min 8) and team-b (min 8) -> b1, b2 (leaves, no min)."""
    return [
        queue("research", **research),
        queue(
            "team-a",
            parent="research",
            quota={"min": {GPU: 8}, "max": {GPU: 16}},
            namespaceSelector={"matchLabels": {"team": "a"}},
            preemption=RECLAIM,
        ),
        queue("team-b", parent="research", quota={"min": {GPU: 8}}),
        queue("b1", parent="team-b", namespaceSelector={"matchLabels": {"team": "b1"}}, **b1),
        queue("b2", parent="team-b", namespaceSelector={"matchLabels": {"team": "b2"}}),
    ]


def cluster(research: dict[str, Any], *nodes: Any, **b1: Any) -> Cluster:
    c = Cluster(department_tree(research, **b1), *nodes)
    c.tracker.set_namespace("ns-b1", {"team": "b1"})
    c.tracker.set_namespace("ns-b2", {"team": "b2"})
    return c


def test_a_department_s_unused_guarantee_is_kept_from_borrowers_under_a_max() -> None:
    c = cluster(
        {"quota": {"min": {GPU: 16}, "max": {GPU: 16}}},
        *(b.node(f"n{i}", gpu=8) for i in range(3)),
    )
    for i in range(4):
        c.submit(f"a{i}", "ns-a", 4, i)
    # team-a may use its own 8; team-b's 8 are kept for it although b1 and b2 name no min
    # (the two 4-GPU jobs more used to be admitted, and team-b then refused at research's max).
    assert c.cycle_admits() == ["a0", "a1"]
    waiting = c.tracker.queue.get(("Job", "ns-a", "a2"))
    assert waiting is not None and "kept for other queues' unused min" in waiting.quota_reason
    c.submit("b0", "ns-b1", 4, 10)
    c.submit("b9", "ns-b2", 4, 11)
    assert c.cycle_admits() == ["b0", "b9"]
    # Within team-b's guarantee: not borrowing.
    assert c.objects["b0"]["metadata"]["annotations"].get(BORROWING) != "true"


def test_a_team_without_a_min_reclaims_within_its_department_s_guarantee() -> None:
    c = cluster(
        {"quota": {"min": {GPU: 16}}}, b.node("n1", gpu=8), b.node("n2", gpu=8), preemption=RECLAIM
    )
    for i in range(4):
        c.submit(f"a{i}", "ns-a", 4, i)
    assert c.cycle_admits() == ["a0", "a1", "a2", "a3"]  # a2, a3 borrow team-b's 8
    c.submit("b0", "ns-b1", 8, 10)
    assert c.cycle_admits() == []
    [plan] = c.last.preemptions  # was: b0 counted as borrowing and could not reclaim
    assert plan.reason.startswith("reclaiming")
    assert sorted(v.key[2] for v in plan.victims) == ["a2", "a3"]
    c.preempted()
    c.pods_leave("a2")
    c.pods_leave("a3")
    assert c.cycle_admits() == ["b0"]
    assert c.objects["b0"]["metadata"]["annotations"].get(BORROWING) != "true"


def test_a_team_within_its_department_s_guarantee_is_not_reclaimed_by_another_team() -> None:
    # team-b's b2 runs 8 GPUs: all of team-b's guarantee, nothing borrowed (b2 has no min of
    # its own, which used to make all of its usage look borrowed). The other node is taken by
    # a queue of another tree. team-a, under its min, finds no room and nobody to reclaim.
    trees = [*department_tree({"quota": {"min": {GPU: 16}}}), queue("other")]
    c = Cluster(trees, b.node("n1", gpu=8), b.node("n2", gpu=8))
    c.tracker.set_namespace("ns-b2", {"team": "b2"})
    c.tracker.set_namespace("ns-o", {"team": "o"})
    c.submit("b0", "ns-b2", 8, 0)
    c.submit("o0", "ns-o", 8, 1, labels={"kube-queue.io/queue-name": "other"})
    assert sorted(c.cycle_admits()) == ["b0", "o0"]
    assert c.tracker.ledger.borrowed("team-b") == {}
    c.submit("a0", "ns-a", 8, 10)
    assert c.cycle_admits() == []
    assert c.last.preemptions == [], "team-b uses only its own guarantee"


def test_an_unusable_queue_keeps_no_guarantee_under_a_max() -> None:
    """Issue 30, also: one rule for unusable queues, nothing is kept for them. team-b's
    children guarantee 6 GPUs under its min of 4 (invalid), so team-b and b1, b2 take no jobs;
    their guarantees used to be kept all the same (as leaves' mins) under research's max."""
    from kubequeue.queueing.quota import QuotaLedger
    from kubequeue.queueing.spec import parse_queue
    from kubequeue.queueing.tree import QueueTree

    ledger = QuotaLedger(
        QueueTree(
            parse_queue(q)
            for q in [
                queue("research", quota={"max": {GPU: 16}}),
                queue("team-a", parent="research", quota={"min": {GPU: 8}}),
                queue("team-b", parent="research", quota={"min": {GPU: 4}}),
                queue("b1", parent="team-b", quota={"min": {GPU: 3}}),
                queue("b2", parent="team-b", quota={"min": {GPU: 3}}),
            ]
        )
    )
    assert ledger.tree.nodes["b1"].unusable is not None
    ledger.charge(("Job", "a", "a0"), "team-a", {GPU: 8000})
    # The tree's pool (8 + team-b's 4) has team-b's 4, which nobody can claim while team-b is
    # unusable (so they are no loan); research's max keeps nothing for b1 and b2 (it kept
    # their 6, and refused).
    verdict = ledger.check("team-a", {GPU: 4000})
    assert verdict.allowed and not verdict.borrowing, verdict.reason


def test_a_reclaim_may_take_a_job_holding_more_than_its_queue_borrowed() -> None:
    """Issue 30, also: jobs are stopped whole. team-a (min 3) runs x (1 GPU) and, borrowing 1,
    the low-priority y (3 GPUs); team-b's 3-GPU reclaim takes y alone, the cheapest: team-a
    ends below its min by 2, less than y holds, and x keeps running."""
    trees = [
        queue("research"),
        queue(
            "team-a",
            parent="research",
            quota={"min": {GPU: 3}, "max": {GPU: 8}},
            namespaceSelector={"matchLabels": {"team": "a"}},
        ),
        queue(
            "team-b",
            parent="research",
            quota={"min": {GPU: 3}, "max": {GPU: 8}},
            namespaceSelector={"matchLabels": {"team": "b"}},
            preemption=RECLAIM,
        ),
    ]
    c = Cluster(trees, b.node("n1", gpu=4))
    c.submit("x", "ns-a", 1, 0)
    c.submit("y", "ns-a", 3, 1, priority_class="low")
    assert c.cycle_admits() == ["x", "y"]
    assert c.tracker.ledger.borrowed("team-a") == {GPU: 1000}
    c.submit("b0", "ns-b", 3, 5)
    c.cycle_admits()
    [plan] = c.last.preemptions
    assert [v.key[2] for v in plan.victims] == ["y"]
