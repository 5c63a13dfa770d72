"""Queue objects in, a validated forest out: parsing hostile specs, tree validation, and which
queue a job waits in."""

from __future__ import annotations

from typing import Any

import pytest

from kubequeue.queueing.spec import QueueSpec, parse_queue
from kubequeue.queueing.tree import QueueTree

GPU = "nvidia.com/gpu"


def queue(name: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": f"uid-{name}"}, "spec": spec}


def tree(*objs: dict[str, Any]) -> QueueTree:
    return QueueTree(parse_queue(o) for o in objs)


def test_a_queue_spec_reads_every_field() -> None:
    spec = parse_queue(
        queue(
            "team-a",
            parent="research",
            namespaceSelector={"matchLabels": {"team": "a"}},
            strategy="StrictFIFO",
            weight=2,
            quota={"min": {GPU: 16, "cpu": "200"}, "max": {GPU: 32}},
        )
    )
    assert spec.problem is None
    assert (spec.parent, spec.strategy, spec.weight) == ("research", "StrictFIFO", 2.0)
    assert spec.min == {GPU: 16000, "cpu": 200000}
    assert spec.max == {GPU: 32000}
    assert spec.selector is not None and spec.selector.matches({"team": "a"})
    assert not spec.selector.matches({"team": "b"})


@pytest.mark.parametrize(
    ("spec", "text"),
    [
        ({"strategy": "Fastest"}, "spec.strategy must be"),
        ({"weight": 0}, "spec.weight must be above 0"),
        ({"weight": "NaN"}, "spec.weight"),
        ({"weight": True}, "spec.weight must be a number"),
        ({"quota": {"min": {GPU: 8}, "max": {GPU: 4}}}, "is above spec.quota.max"),
        # Amounts as named, a max of 0 and pods included (they used to read "max nothing").
        ({"quota": {"min": {GPU: 1}, "max": {GPU: 0}}}, f"max {GPU}=0"),
        ({"quota": {"min": {"pods": 3}, "max": {"pods": 2}}}, "min pods=3 is above"),
        ({"quota": {"min": {GPU: -1}}}, "negative"),
        ({"quota": {"max": {GPU: "lots"}}}, "not a valid quantity"),
        ({"quota": ["x"]}, "spec.quota is not an object"),
        ({"parent": 7}, "spec.parent must be"),
        ({"parent": "self"}, "names the queue itself"),
        (
            {"namespaceSelector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}},
            "operator must be one of",
        ),
        ({"namespaceSelector": {"matchLabels": {"a": 1}}}, "string values"),
    ],
)
def test_invalid_specs_become_problems_not_exceptions(spec: dict[str, Any], text: str) -> None:
    parsed = parse_queue(queue("self", **spec))
    assert parsed.problem is not None and text in parsed.problem, parsed.problem


def test_tree_links_paths_and_effective_mins() -> None:
    t = tree(
        queue("org", quota={"min": {GPU: 32}}),
        queue("research", parent="org"),
        queue("team-a", parent="research", quota={"min": {GPU: 8}}),
        queue("team-b", parent="research", quota={"min": {GPU: 8}}),
        queue("prod", parent="org", quota={"min": {GPU: 16}}),
    )
    assert t.nodes["team-a"].path == ("org", "research", "team-a")
    assert t.nodes["research"].emin == {GPU: 16000}
    assert t.nodes["org"].emin == {GPU: 32000}
    assert t.pools == {"org": {GPU: 32000}}
    assert t.nodes["research"].leaves == ("team-a", "team-b")
    assert all(n.unusable is None for n in t.nodes.values())


def test_invalid_parts_of_a_tree_are_unusable_and_the_rest_works() -> None:
    t = tree(
        queue("research", quota={"min": {GPU: 10}}),
        queue("team-a", parent="research", quota={"min": {GPU: 8}}),
        queue("team-b", parent="research", quota={"min": {GPU: 8}}),
        queue("loop-1", parent="loop-2"),
        queue("loop-2", parent="loop-1"),
        queue("orphan", parent="missing"),
        queue("fine", quota={"max": {GPU: 4}}),
    )
    research = t.nodes["research"]
    assert research.problem is not None and "add up to 16" in research.problem
    assert t.nodes["team-a"].unusable is not None and "queue research" in t.nodes["team-a"].unusable
    assert "loops" in (t.nodes["loop-1"].problem or "")
    assert "parent queue missing does not exist" in (t.nodes["orphan"].problem or "")
    assert t.nodes["fine"].unusable is None
    a = t.assign({"kube-queue.io/queue-name": "team-a"}, {})
    assert (a.queue, a.reason) == ("team-a", "InvalidQueue")
    assert t.assign({"kube-queue.io/queue-name": "fine"}, {}).problem is None


def test_children_min_above_parent_max_is_invalid() -> None:
    t = tree(
        queue("research", quota={"max": {GPU: 12}}),
        queue("team-a", parent="research", quota={"min": {GPU: 8}}),
        queue("team-b", parent="research", quota={"min": {GPU: 8}}),
    )
    assert "more than its own max" in (t.nodes["research"].problem or "")


def test_which_queue_a_job_waits_in() -> None:
    t = tree(
        queue("research"),
        queue("team-a", parent="research", namespaceSelector={"matchLabels": {"team": "a"}}),
        queue("team-b", parent="research", namespaceSelector={}),  # every namespace
        queue("z-also-a", namespaceSelector={"matchLabels": {"team": "a"}}),
    )
    # The label wins; then the first leaf (by name) whose selector matches; a parent never.
    assert t.assign({"kube-queue.io/queue-name": "z-also-a"}, {"team": "a"}).queue == "z-also-a"
    assert t.assign({}, {"team": "a"}).queue == "team-a"
    assert t.assign({}, {"team": "c"}).queue == "team-b"
    unknown = t.assign({"kube-queue.io/queue-name": "team-z"}, {})
    assert unknown.reason == "UnknownQueue" and "does not exist" in (unknown.problem or "")
    parent = t.assign({"kube-queue.io/queue-name": "research"}, {})
    assert parent.reason == "UnknownQueue" and "team-a, team-b" in (parent.problem or "")


def test_without_a_default_queue_object_unmatched_jobs_go_to_the_implicit_queue() -> None:
    t = tree(queue("team-a", namespaceSelector={"matchLabels": {"team": "a"}}))
    assert t.assign({}, {"team": "b"}).queue == ""
    assert t.assign({}, None).queue == ""
    t = tree(queue("default", quota={"max": {GPU: 2}}))
    assert t.assign({}, {"team": "b"}).queue == "default", "an admin-made default queue limits"
    assert QueueTree().assign({}, {}).queue == ""


def test_absent_selector_selects_nothing_and_empty_selects_everything() -> None:
    assert QueueSpec("q").selector is None
    t = tree(queue("only-by-label"))
    assert t.assign({}, {"any": "thing"}).queue == ""


def test_a_parent_queue_s_namespace_selector_is_said_to_be_ignored() -> None:
    """A parent holds no jobs, so its namespaceSelector catches nothing: the queue still works
    and says so (Ready, reason SpecIgnored), instead of jobs silently going elsewhere."""
    t = tree(
        queue("research", namespaceSelector={"matchLabels": {"team": "r"}}),
        queue("team-a", parent="research", namespaceSelector={"matchLabels": {"team": "a"}}),
    )
    assert t.nodes["research"].ignored is not None
    assert "namespaceSelector is ignored" in t.nodes["research"].ignored
    assert t.nodes["research"].unusable is None and t.nodes["team-a"].ignored is None
    assert t.assign({}, {"team": "r"}).queue == ""  # the implicit queue, not the parent
    assert t.assign({}, {"team": "a"}).queue == "team-a"


def test_a_job_naming_a_queue_in_a_parent_loop_is_told_about_the_loop() -> None:
    """In a loop every queue is another's parent: "name one of its leaf queues ()" would send
    the user looking for leaves that do not exist; the loop is what to fix."""
    t = tree(queue("loop-1", parent="loop-2"), queue("loop-2", parent="loop-1"))
    a = t.assign({"kube-queue.io/queue-name": "loop-1"}, {})
    assert a.reason == "InvalidQueue" and a.problem is not None and "loops" in a.problem
