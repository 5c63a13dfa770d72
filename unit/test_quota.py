"""Quota arithmetic on the queue tree: accounting, ceilings and borrowing at every level, the
fair-share order, and two properties over random trees and admission sequences."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kubequeue.demand import PodSet, total_demand
from kubequeue.queueing.quota import QuotaLedger
from kubequeue.queueing.spec import parse_queue
from kubequeue.queueing.tree import QueueTree
from kubequeue.resources import PODS

GPU = "nvidia.com/gpu"
G = 1000  # one GPU in milli-units


def queue(name: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": spec}


def ledger(*objs: dict[str, Any]) -> QuotaLedger:
    return QuotaLedger(QueueTree(parse_queue(o) for o in objs))


def two_teams(**research: Any) -> QuotaLedger:
    """The issue's example: two teams under research, min 8 and max 16 GPUs each."""
    return ledger(
        queue("research", **research),
        queue("team-a", parent="research", quota={"min": {GPU: 8}, "max": {GPU: 16}}),
        queue("team-b", parent="research", quota={"min": {GPU: 8}, "max": {GPU: 16}}),
    )


def gpus(n: int) -> dict[str, int]:
    return {GPU: n * G, "cpu": n * 4000}


def test_usage_is_charged_to_the_queue_and_its_ancestors() -> None:
    q = two_teams()
    q.charge(("Job", "ns", "a1"), "team-a", gpus(4))
    q.charge(("Job", "ns", "b1"), "team-b", gpus(2))
    assert q.used("team-a") == {GPU: 4 * G, "cpu": 16000}
    assert q.used("research")[GPU] == 6 * G
    assert (q.admitted("team-a"), q.admitted("team-b")) == (1, 1)
    q.charge(("Job", "ns", "a1"), "team-a", gpus(3))  # demand shrank (a Job progressed)
    assert q.used("research")[GPU] == 5 * G
    q.release(("Job", "ns", "a1"))
    assert q.used("team-a") == {} and q.used("research")[GPU] == 2 * G


def test_a_team_borrows_the_idle_team_s_guarantee_up_to_its_max() -> None:
    q = two_teams()
    first = q.check("team-a", gpus(8))
    assert first.allowed and not first.borrowing
    q.charge(("Job", "ns", "a1"), "team-a", gpus(8))
    second = q.check("team-a", gpus(8))
    assert second.allowed and second.borrowing, "team-b's unused 8 are lent"
    q.charge(("Job", "ns", "a2"), "team-a", gpus(8))
    third = q.check("team-a", gpus(1))
    assert not third.allowed
    assert third.reason.startswith("queue team-a at max nvidia.com/gpu (16/16")
    assert q.borrowed("team-a") == {GPU: 8 * G}
    # team-b is under its min: never refused for quota (reclaiming is preemption's job).
    assert q.check("team-b", gpus(8)).allowed


def test_the_pool_is_the_sum_of_guarantees_at_every_level() -> None:
    q = ledger(
        queue("org", quota={"min": {GPU: 32}}),
        queue("research", parent="org", quota={"min": {GPU: 16}}),
        queue("team-a", parent="research", quota={"min": {GPU: 8}}),
        queue("team-b", parent="research", quota={"min": {GPU: 8}}),
        queue("prod", parent="org", quota={"min": {GPU: 16}, "max": {GPU: 24}}),
    )
    q.charge(("Job", "p", "p1"), "prod", gpus(16))
    q.charge(("Job", "a", "a1"), "team-a", gpus(8))
    # Covered by research's min (team-b idle), then nothing left in org's pool of 32.
    assert q.check("team-a", gpus(8)).allowed
    q.charge(("Job", "a", "a2"), "team-a", gpus(8))
    refused = q.check("team-a", gpus(1))
    assert not refused.allowed
    assert refused.reason.startswith("org borrowing limit: 32 of its 32 nvidia.com/gpu")
    # prod frees 8: team-a may borrow them through org.
    q.charge(("Job", "p", "p1"), "prod", gpus(8))
    assert q.check("team-a", gpus(8)).allowed
    # prod's own ceiling also binds while team-a leaves it room.
    q.release(("Job", "a", "a2"))
    q.release(("Job", "a", "a1"))
    assert not q.check("prod", gpus(17)).allowed


def test_a_borrower_leaves_room_under_a_ceiling_for_other_queues_guarantees() -> None:
    q = ledger(
        queue("research", quota={"max": {GPU: 16}}),
        queue("team-a", parent="research", quota={"min": {GPU: 8}, "max": {GPU: 16}}),
        queue("team-b", parent="research", quota={"min": {GPU: 8}}),
        queue("other", quota={"min": {GPU: 16}}),
    )
    q.charge(("Job", "a", "a1"), "team-a", gpus(8))
    # research's pool would lend, but research's max 16 must keep 8 for team-b's min.
    refused = q.check("team-a", gpus(1))
    assert not refused.allowed and "kept for other queues' unused min" in refused.reason
    assert q.check("team-b", gpus(8)).allowed


def test_resources_no_queue_names_are_not_limited() -> None:
    q = two_teams()
    assert q.check("team-a", {"memory": 10**15, "example.com/fpga": 64 * G}).allowed
    only_max = ledger(queue("capped", quota={"max": {"cpu": "10"}}))
    assert only_max.check("capped", {GPU: 100 * G, "cpu": 10_000}).allowed
    assert not only_max.check("capped", {"cpu": 10_001}).allowed
    assert QuotaLedger().check("", {GPU: 10**9}).allowed, "the implicit queue has no limits"


def test_fair_share_prefers_the_queue_furthest_below_its_share() -> None:
    q = two_teams()
    q.charge(("Job", "a", "a1"), "team-a", gpus(12))  # 4 borrowed of a pool of 16
    assert q.shares("team-a") == (0.0, 0.25)
    assert q.shares("team-b") == (0.0, 0.0)
    assert q.needs_to_borrow("team-a", gpus(1))
    assert not q.needs_to_borrow("team-b", gpus(8))
    weighted = ledger(
        queue("root", quota={"min": {GPU: 10}}),
        queue("heavy", parent="root", weight=2),
        queue("light", parent="root"),
    )
    weighted.charge(("Job", "h", "1"), "heavy", gpus(4))
    weighted.charge(("Job", "l", "1"), "light", gpus(3))
    assert weighted.shares("heavy") < weighted.shares("light"), "weight 2 halves the share"


def test_separate_trees_compare_from_their_roots_and_missing_levels_count_zero() -> None:
    """Issue 30, item 3: trees lend nothing to each other, so between them the root's own share
    (how far the tree is above its whole guarantee) comes first; a queue that is a tree by
    itself is compared level by level with zeros below it, so an exact tie is left to the heads'
    priority and age (a shorter tuple used to win every tie)."""
    q = ledger(
        queue("x", quota={"min": {GPU: 4}}),
        queue("xa", parent="x", quota={"min": {GPU: 2}}),
        queue("xb", parent="x", quota={"min": {GPU: 2}}),
        queue("y", quota={"min": {GPU: 4}}),
        queue("ya", parent="y", quota={"min": {GPU: 1}}),
        queue("yb", parent="y", quota={"min": {GPU: 3}}),
        queue("solo", quota={"min": {GPU: 4}}),
    )
    # Tree x is 2 GPUs above its whole guarantee (xa 4 over its 2, xb at its 2): its leaves go
    # after tree y's, whose leaf ya is further above its own min (3 of a pool of 4) but whose
    # tree as a whole is within its guarantee.
    q.charge(("Job", "x", "1"), "xa", gpus(4))
    q.charge(("Job", "x", "2"), "xb", gpus(2))
    q.charge(("Job", "y", "1"), "ya", gpus(4))
    assert q.shares("xa") == (0.5, 0.5) and q.shares("ya") == (0.0, 0.75)
    assert q.shares("ya") < q.shares("xa")
    assert q.shares("solo") == (0.0, 0.0) == q.shares("yb")
    assert q.tree.depth == 2


def test_a_new_tree_reaggregates_admitted_jobs() -> None:
    q = two_teams()
    q.charge(("Job", "a", "a1"), "team-a", gpus(4))
    q.set_tree(QueueTree([parse_queue(queue("team-a", quota={"max": {GPU: 4}}))]))
    assert q.used("team-a")[GPU] == 4 * G
    assert q.used("research") == {}
    assert not q.check("team-a", gpus(1)).allowed


# --------------------------------------------- resources a queue's path does not name (issue 10)
def cpu_on_one_team(**research: Any) -> QuotaLedger:
    """The issue's tree: team-a is guaranteed 200 CPU, its sibling team-b names no CPU at all."""
    return ledger(
        queue("research", **research),
        queue("team-a", parent="research", quota={"min": {GPU: 8, "cpu": "200"}}),
        queue("team-b", parent="research", quota={"min": {GPU: 8}, "max": {GPU: 16}}),
    )


def cpus(n: int) -> dict[str, int]:
    return {"cpu": n * 1000}


def test_a_resource_nobody_on_the_queue_s_path_names_is_not_limited_nor_borrowed() -> None:
    q = cpu_on_one_team()
    q.charge(("Job", "a", "a1"), "team-a", cpus(150))
    verdict = q.check("team-b", cpus(60))
    assert verdict.allowed and not verdict.borrowing, verdict.reason
    assert q.beyond_limits("team-b", cpus(10_000)) == ""
    assert not q.needs_to_borrow("team-b", cpus(60))
    assert [res for res, _ in q.guarantee_room("team-b")] == [GPU]
    q.charge(("Job", "b", "b1"), "team-b", cpus(500))
    assert q.borrowed("team-b") == {} and q.borrowed("research") == {}
    assert q.shares("team-b") == (0.0, 0.0)
    # team-b's unlimited CPU is no guarantee of anyone's: team-a keeps all of its own.
    assert q.check("team-a", cpus(50)).allowed
    assert not q.check("team-a", cpus(51)).allowed, "nothing left to borrow above team-a's min"


def test_a_sibling_s_unlimited_usage_does_not_eat_what_another_may_borrow() -> None:
    q = ledger(
        queue("research"),
        queue("team-a", parent="research", quota={"min": {"cpu": "100"}}),
        queue("team-b", parent="research"),
        queue("team-c", parent="research", quota={"min": {"cpu": "100"}}),
    )
    q.charge(("Job", "b", "b1"), "team-b", cpus(1000))
    q.charge(("Job", "a", "a1"), "team-a", cpus(100))
    borrow = q.check("team-a", cpus(100))
    assert borrow.allowed and borrow.borrowing, "team-c's idle guarantee is lent"
    q.charge(("Job", "a", "a2"), "team-a", cpus(100))
    assert q.borrowed("team-a") == {"cpu": 100_000}
    assert q.shares("research") == (0.0, 0.0), "team-b's CPU is not the tree's borrowing"
    assert q.check("team-c", cpus(100)).allowed


def test_a_sibling_s_zero_min_does_not_freeze_the_resource_for_the_whole_tree() -> None:
    q = ledger(
        queue("research"),
        queue("team-a", parent="research", quota={"min": {"cpu": 0}}),
        queue("team-b", parent="research", quota={"min": {GPU: 8}}),
    )
    assert q.check("team-b", cpus(4)).allowed
    assert q.beyond_limits("team-b", cpus(4)) == ""
    assert not q.check("team-a", cpus(4)).allowed, "team-a named cpu: a pool of 0 lends none"


def test_an_ancestor_naming_the_resource_puts_every_queue_below_it_under_the_rules() -> None:
    q = cpu_on_one_team(quota={"max": {"cpu": "300"}})
    q.charge(("Job", "a", "a1"), "team-a", cpus(150))
    verdict = q.check("team-b", cpus(40))
    assert verdict.allowed and verdict.borrowing, "research's max names cpu for team-b"
    refused = q.check("team-b", cpus(60))
    assert not refused.allowed and refused.reason.startswith("research borrowing limit")
    assert q.needs_to_borrow("team-b", cpus(1))


# ----------------------------------------------------------------------------- pods
def test_a_pods_quota_counts_each_admitted_job_s_pods() -> None:
    q = ledger(
        queue("research", quota={"max": {"pods": 3}}),
        queue("team-a", parent="research", quota={"max": {"pods": 2}}),
        queue("team-b", parent="research"),
    )
    pod = {"cpu": 1000, PODS: 1000}
    two = total_demand([PodSet("workers", 2, pod)])
    q.charge(("Job", "a", "a1"), "team-a", two)
    assert q.used("team-a") == {"cpu": 2000, PODS: 2000}
    refused = q.check("team-a", total_demand([PodSet("w", 1, pod)]))
    assert not refused.allowed
    assert refused.reason == "queue team-a at max pods (2/2, needs 1 more)"
    assert q.check("team-b", total_demand([PodSet("w", 1, pod)])).allowed
    q.charge(("Job", "b", "b1"), "team-b", total_demand([PodSet("w", 1, pod)]))
    assert not q.check("team-b", total_demand([PodSet("w", 1, pod)])).allowed, "research: 3 pods"
    assert q.beyond_limits("team-a", total_demand([PodSet("w", 3, pod)])).startswith(
        "it needs 3 pods, above queue team-a's max of 2"
    )
    q.release(("Job", "a", "a1"))
    assert q.check("team-a", two).allowed


def test_pods_show_in_usage_only_where_the_queue_s_path_names_them() -> None:
    q = two_teams()
    q.charge(("Job", "a", "a1"), "team-a", {**gpus(4), PODS: 4000})
    assert q.used("team-a") == {GPU: 4 * G, "cpu": 16000}
    assert q.demand_of(("Job", "a", "a1"))[PODS] == 4000, "counted, only not shown"
    q.set_tree(QueueTree([parse_queue(queue("team-a", quota={"min": {PODS: 8}}))]))
    assert q.used("team-a") == {GPU: 4 * G, "cpu": 16000, PODS: 4000}
    assert q.guarantee_room("team-a") == ((PODS, 4000),)


# ---------------------------------------------------------------------------- properties
RESOURCES = (GPU, "cpu")


@st.composite
def forests(draw: st.DrawFn) -> tuple[QuotaLedger, list[str]]:
    """Random valid trees up to 3 levels: mins nest within parents, max >= min."""
    objs: list[dict[str, Any]] = []
    leaves: list[str] = []

    def make(name: str, parent: str | None, depth: int, budget: dict[str, int]) -> None:
        quota: dict[str, dict[str, int]] = {}
        mins: dict[str, int] = {}
        for res in RESOURCES:
            if budget.get(res, 0) and draw(st.booleans()):
                mins[res] = draw(st.integers(0, budget[res]))
        if mins:
            quota["min"] = mins
        maxes: dict[str, int] = {}
        for res in RESOURCES:
            if draw(st.integers(0, 3)) == 0:
                maxes[res] = mins.get(res, 0) + draw(st.integers(0, 12))
        kids = draw(st.integers(0, 3)) if depth < 3 else 0
        child_budget = {r: mins.get(r, budget.get(r, 0)) for r in RESOURCES}
        if maxes:
            child_budget = {r: min(child_budget[r], maxes.get(r, 10**6)) for r in RESOURCES}
        if maxes:
            quota["max"] = maxes
        spec: dict[str, Any] = {"quota": quota, "weight": draw(st.sampled_from([1, 2, 3]))}
        if parent:
            spec["parent"] = parent
        objs.append(queue(name, **spec))
        if not kids:
            leaves.append(name)
            return
        share = {r: child_budget[r] // kids for r in RESOURCES}
        for i in range(kids):
            make(f"{name}-{i}", name, depth + 1, share)

    for i in range(draw(st.integers(1, 2))):
        make(f"r{i}", None, 1, {GPU: draw(st.integers(0, 24)), "cpu": draw(st.integers(0, 24))})
    q = ledger(*objs)
    return q, leaves


def _ceilings_hold(q: QuotaLedger) -> bool:
    for name, node in q.tree.nodes.items():
        for res, limit in node.spec.ceiling.items():
            if q.used(name).get(res, 0) > limit:
                return False
    return True


def _named_on_path(q: QuotaLedger, leaf: str) -> set[str]:
    nodes = q.tree.nodes
    return {
        res
        for name in nodes[leaf].path
        for res in (*nodes[name].spec.guaranteed, *nodes[name].spec.ceiling)
    }


@settings(max_examples=400, deadline=None)
@given(
    forests(),
    st.lists(
        st.tuples(
            st.integers(0, 50),  # which leaf
            st.integers(0, 10),  # gpus
            st.integers(0, 10),  # cpus
            st.booleans(),  # release a random earlier job instead
        ),
        max_size=40,
    ),
)
def test_no_sequence_of_checked_admissions_passes_a_max_and_guarantees_always_admit(
    forest: tuple[QuotaLedger, list[str]], steps: list[tuple[int, int, int, bool]]
) -> None:
    q, leaves = forest
    assert all(n.unusable is None for n in q.tree.nodes.values()), "generator makes valid trees"
    admitted: list[tuple[str, str, int]] = []
    for i, (which, g, c, release) in enumerate(steps):
        if release and admitted:
            q.release(("Job", "ns", admitted.pop(which % len(admitted))[0]))
            continue
        leaf = leaves[which % len(leaves)]
        demand = {GPU: g * G, "cpu": c * G}
        node = q.tree.nodes[leaf]
        pooled = q.tree.pools.get(node.root, {})
        within = all(
            (res in pooled and q.used(leaf).get(res, 0) + amount <= node.emin.get(res, 0))
            for res, amount in demand.items()
            if amount
        )
        verdict = q.check(leaf, demand)
        if within and any(demand.values()):
            # A queue under its min in every resource it asks for is never refused for quota.
            assert verdict.allowed, (leaf, demand, verdict.reason)
        if verdict.allowed:
            q.charge(("Job", "ns", f"j{i}"), leaf, demand)
            admitted.append((f"j{i}", leaf, g))
        assert _ceilings_hold(q), verdict
    # Whatever was borrowed, every queue can still take what is left of its guarantee.
    for leaf in leaves:
        node = q.tree.nodes[leaf]
        for res in q.tree.pools.get(node.root, {}):
            unused = node.emin.get(res, 0) - q.used(leaf).get(res, 0)
            if unused > 0:
                verdict = q.check(leaf, {res: unused})
                assert verdict.allowed, (leaf, res, unused, verdict.reason)
    # A resource the leaf's path does not name limits it nowhere, however much it asks.
    for leaf in leaves:
        for res in set(RESOURCES) - _named_on_path(q, leaf):
            assert q.check(leaf, {res: 10**9 * G}).allowed, (leaf, res)
            assert res not in q.borrowed(leaf) and not q.needs_to_borrow(leaf, {res: G})
