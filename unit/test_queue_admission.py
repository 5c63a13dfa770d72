"""Queues in the admission cycle, with the tracker and the capacity cache: who goes first when
teams compete, what a queue at its max or a StrictFIFO head does, unknown queues."""

from __future__ import annotations

from kubequeue.labels import BORROWING, QUEUE_ANNOTATION
from kubequeue.queueing.spec import parse_queue
from kubequeue.resources import GPU
from unit import builders as b
from unit.simcluster import JOB, TWO_TEAMS, Cluster, make, queue


def test_one_team_borrows_everything_then_the_other_gets_freed_gpus_until_its_min() -> None:
    """The issue's scenario: 2 nodes x 8 GPUs, team-a and team-b under research, min 8 and
    max 16 each."""
    c = Cluster(TWO_TEAMS, b.node("n1", gpu=8), b.node("n2", gpu=8))
    for i in range(6):
        c.submit(f"a{i}", "ns-a", 4, i)
    assert c.cycle_admits() == ["a0", "a1", "a2", "a3"], "team-a borrows team-b's idle 8"
    borrowed = [
        c.objects[n]["metadata"]["annotations"][BORROWING] for n in ("a0", "a1", "a2", "a3")
    ]
    assert borrowed == ["false", "false", "true", "true"]
    assert c.objects["a0"]["metadata"]["annotations"][QUEUE_ANNOTATION] == "team-a"
    assert c.tracker.ledger.used("team-a")[GPU] == 16000
    # team-b arrives later than a4 and a5, and gets the freed GPUs first, up to its min.
    c.submit("b0", "ns-b", 4, 30)
    c.submit("b1", "ns-b", 4, 31)
    c.submit("b2", "ns-b", 4, 32)
    assert c.cycle_admits() == []
    c.finish("a0")
    assert c.cycle_admits() == ["b0"]
    c.finish("a1")
    assert c.cycle_admits() == ["b1"]
    # team-b at its min: the next freed GPUs go to the queue with the smaller share (team-a
    # uses 8 = its min, team-b 8 = its min: a tie, so the older job, a4, goes first).
    c.finish("a2")
    assert c.cycle_admits() == ["a4"]
    assert c.tracker.ledger.borrowed("team-a") == {}


def test_a_queue_at_its_max_holds_its_next_job_although_gpus_are_free() -> None:
    c = Cluster(TWO_TEAMS, *(b.node(f"n{i}", gpu=8) for i in range(3)))
    for i in range(5):
        c.submit(f"a{i}", "ns-a", 4, i)
    assert c.cycle_admits() == ["a0", "a1", "a2", "a3"]
    waiting = c.tracker.queue.get(("Job", "ns-a", "a4"))
    assert waiting is not None
    assert waiting.quota_reason == "queue team-a at max nvidia.com/gpu (16/16, needs 4 more)"
    [notice] = [n for n in c.last.notices if n.key[2] == "a4"]
    assert (notice.reason, notice.message) == (
        "Queued",
        "waiting for quota: queue team-a is at its max nvidia.com/gpu",
    )
    assert c.tracker.cache.nodes["n2"].free[GPU] == 8000, "8 GPUs are free on the cluster"
    c.finish("a1")
    assert c.cycle_admits() == ["a4"]


def test_a_strict_fifo_head_blocks_only_its_own_queue() -> None:
    queues = [dict(q) for q in TWO_TEAMS]
    queues[1] = queue(
        "team-a",
        parent="research",
        strategy="StrictFIFO",
        quota={"min": {GPU: 8}, "max": {GPU: 16}},
        namespaceSelector={"matchLabels": {"team": "a"}},
    )
    c = Cluster(queues, b.node("n1", gpu=8), b.node("n2", gpu=8))
    for node in ("n1", "n2"):  # someone else's pods leave 2 GPUs free per node
        c.tracker.cache.upsert_pod(b.pod(f"other-{node}", node, {GPU: "6"}), None)
    c.submit("a-head", "ns-a", 4, 0)
    c.submit("a-small", "ns-a", 1, 1)
    c.submit("b-small", "ns-b", 2, 2)
    assert c.cycle_admits() == ["b-small"]
    assert c.cycle.blocked["team-a"].key[2] == "a-head"


def test_a_job_naming_a_missing_queue_waits_and_moves_on_when_it_is_created() -> None:
    c = Cluster(TWO_TEAMS, b.node("n1", gpu=8))
    c.submit("lost", "ns-a", 1, 0, labels={"kube-queue.io/queue-name": "team-z"})
    assert c.cycle_admits() == []
    [notice] = c.last.notices
    assert (notice.type, notice.reason) == ("Warning", "UnknownQueue")
    assert "queue team-z does not exist" in notice.message
    c.tracker.set_queues(parse_queue(q) for q in [*TWO_TEAMS, queue("team-z")])
    assert c.cycle_admits() == ["lost"]
    assert c.objects["lost"]["metadata"]["annotations"][QUEUE_ANNOTATION] == "team-z"


def test_namespace_labels_move_queued_jobs_and_admitted_usage_survives_a_restart() -> None:
    c = Cluster(TWO_TEAMS, b.node("n1", gpu=8))
    c.submit("j", "ns-c", 2, 0)
    assert c.tracker.queue.get(("Job", "ns-c", "j")).queue == ""  # type: ignore[union-attr]
    c.tracker.set_namespace("ns-c", {"team": "b"})
    assert c.tracker.queue.get(("Job", "ns-c", "j")).queue == "team-b"  # type: ignore[union-attr]
    assert c.cycle_admits() == ["j"]
    # A new controller: the admitted job is read back from its annotation, wherever its
    # namespace's labels point now.
    fresh, _ = make(TWO_TEAMS, b.node("n1", gpu=8))
    fresh.set_namespace("ns-c", {"team": "a"})
    fresh.observe(JOB, c.objects["j"])
    assert fresh.ledger.used("team-b")[GPU] == 2000
    assert fresh.ledger.used("team-a") == {}


def test_a_job_above_its_queue_s_max_never_blocks_and_says_so() -> None:
    queues = [queue("small", strategy="StrictFIFO", quota={"max": {GPU: 2}})]
    c = Cluster(queues, b.node("n1", gpu=8))
    c.submit("huge", "ns-a", 4, 0, labels={"kube-queue.io/queue-name": "small"})
    c.submit("fits", "ns-a", 1, 1, labels={"kube-queue.io/queue-name": "small"})
    assert c.cycle_admits() == ["fits"]
    [notice] = [n for n in c.last.notices if n.key[2] == "huge"]
    assert (notice.type, notice.reason) == ("Warning", "QuotaExceeded")
    assert "above queue small's max of 2" in notice.message
