"""The tracker + reservations + cycle together, driven with objects as the informers deliver
them. Pure logic: the same behaviours are proven against a real API server in e2e/."""

from __future__ import annotations

from kubequeue.admission.cycle import AdmissionCycle
from kubequeue.admission.tracker import JobTracker
from kubequeue.capacity.cache import CapacityCache
from kubequeue.capacity.reservations import Reservations
from kubequeue.kinds.job import JobKind
from kubequeue.labels import ADMITTED_AT
from kubequeue.queueing.queue import JobQueue
from kubequeue.resources import GPU
from unit import builders as b

JOB = JobKind()


def make(*nodes, strict: bool = False):
    cache = CapacityCache()
    for n in nodes:
        cache.upsert_node(n)
    tracker = JobTracker(cache, JobQueue(), Reservations(cache))
    tracker.register(JOB)
    tracker.set_priority_classes({"high": 1000}, 0)
    return tracker, AdmissionCycle(tracker, strict_fifo=strict)


def admitted_names(result) -> list[str]:
    return [a.job.key[2] for a in result.admitted]


def gpu_job(name: str, gpus: int = 2, pods: int = 1, **kw):
    return b.job(name, {"cpu": "1", GPU: str(gpus)}, parallelism=pods, **kw)


def as_admitted(obj: dict) -> dict:
    obj = {
        **obj,
        "spec": {**obj["spec"], "suspend": False},
        "metadata": {**obj["metadata"], "annotations": {ADMITTED_AT: "now"}},
    }
    return obj


def test_three_two_gpu_jobs_on_four_gpus_admit_exactly_two() -> None:
    tracker, cycle = make(b.node("n", gpu=4))
    for i in range(3):
        tracker.observe(JOB, gpu_job(f"j{i}", created=f"2026-01-01T00:00:0{i}Z"))
    result = cycle.run()
    assert admitted_names(result) == ["j0", "j1"]
    assert [n.reason for n in result.notices] == ["Queued"]
    assert "needs 2 nvidia.com/gpu on one node" in result.notices[0].message
    # Nothing changed: the next cycle admits nothing and re-evaluates nothing.
    again = cycle.run()
    assert again.admitted == []
    assert again.evaluated == 0


def test_reservation_blocks_double_admission_until_pods_arrive_then_hands_over() -> None:
    tracker, cycle = make(b.node("n", gpu=4))
    tracker.observe(JOB, gpu_job("a", gpus=4))
    tracker.observe(JOB, gpu_job("b", gpus=4, created="2026-01-01T00:00:01Z"))
    first = cycle.run()
    assert admitted_names(first) == ["a"]
    tracker.admission_succeeded(("Job", "default", "a"), JOB, as_admitted(gpu_job("a", gpus=4)))
    assert tracker.reservations.held_pods(("Job", "default", "a")) == 1
    # The pod binds: the reservation hands over to the real pod; still no room for b.
    pod = b.pod("a-xyz", "n", {"cpu": "1", GPU: "4"}, owner_job="a")
    tracker.pod_changed(tracker.cache.upsert_pod(pod, (("Job", "default", "a"), None)))
    assert tracker.reservations.held_pods(("Job", "default", "a")) == 0
    assert cycle.run().admitted == []
    # a completes: its pod ends, the Job finishes; b is admitted.
    tracker.pod_changed(tracker.cache.delete_pod(pod.metadata.uid))
    done = as_admitted(gpu_job("a", gpus=4, conditions=[{"type": "Complete", "status": "True"}]))
    tracker.observe(JOB, done)
    assert admitted_names(cycle.run()) == ["b"]


def test_restart_rebuilds_holds_for_admitted_jobs_without_pods() -> None:
    """A fresh tracker that sees an admitted job (annotation) before its pods holds capacity."""
    tracker, cycle = make(b.node("n", gpu=4))
    tracker.observe(JOB, as_admitted(gpu_job("running", gpus=4)))
    tracker.observe(JOB, gpu_job("waiting", gpus=2))
    assert cycle.run().admitted == []
    assert tracker.reservations.held_pods(("Job", "default", "running")) == 1


def test_priority_jumps_the_line_and_unknown_class_is_a_problem() -> None:
    tracker, cycle = make(b.node("n", gpu=2))
    tracker.observe(JOB, gpu_job("early", created="2026-01-01T00:00:00Z"))
    tracker.observe(JOB, gpu_job("vip", created="2026-01-01T00:00:09Z", priority_class="high"))
    tracker.observe(JOB, gpu_job("typo", priority_class="hihg"))
    result = cycle.run()
    assert admitted_names(result) == ["vip"]
    problems = [n for n in result.notices if n.type == "Warning"]
    assert [n.reason for n in problems] == ["UnknownPriorityClass"]
    assert "'hihg' does not exist" in problems[0].message
    # The class appears: the job becomes admissible (it is re-judged, not lost).
    tracker.set_priority_classes({"high": 1000, "hihg": 5}, 0)
    assert tracker.queue.get(("Job", "default", "typo")).problem is None


def test_bad_quantity_is_a_warning_and_never_admitted() -> None:
    tracker, cycle = make(b.node("n", gpu=8))
    tracker.observe(JOB, b.job("bad", {"cpu": "one"}))
    result = cycle.run()
    assert result.admitted == []
    assert [(n.type, n.reason) for n in result.notices] == [("Warning", "InvalidJob")]
    assert "'one' is not a valid quantity" in result.notices[0].message
    assert cycle.run().notices == []  # reported once, not on every cycle


def test_never_fitting_job_warns_and_does_not_block_others_even_in_strict_fifo() -> None:
    tracker, cycle = make(b.node("n", gpu=4), strict=True)
    tracker.observe(JOB, gpu_job("huge", gpus=16, created="2026-01-01T00:00:00Z"))
    tracker.observe(JOB, gpu_job("small", gpus=1, created="2026-01-01T00:00:01Z"))
    result = cycle.run()
    assert admitted_names(result) == ["small"]
    assert [n.reason for n in result.notices] == ["NeverFits"]


def test_strict_fifo_blocks_behind_a_job_that_could_fit_later() -> None:
    for strict, expected in ((True, []), (False, ["small"])):
        tracker, cycle = make(b.node("n", gpu=4), strict=strict)
        tracker.cache.upsert_pod(b.pod("busy", "n", {GPU: "2"}), None)
        tracker.observe(JOB, gpu_job("big", gpus=4, created="2026-01-01T00:00:00Z"))
        tracker.observe(JOB, gpu_job("small", gpus=1, created="2026-01-01T00:00:01Z"))
        assert admitted_names(cycle.run()) == expected, f"strict={strict}"


def test_failed_write_releases_the_hold_and_requeues() -> None:
    tracker, cycle = make(b.node("n", gpu=4))
    tracker.observe(JOB, gpu_job("a", gpus=4))
    assert admitted_names(cycle.run()) == ["a"]
    assert ("Job", "default", "a") not in tracker.queue
    tracker.admission_failed(("Job", "default", "a"))
    assert ("Job", "default", "a") in tracker.queue
    assert tracker.reservations.held_pods(("Job", "default", "a")) == 0
    assert admitted_names(cycle.run()) == ["a"]


def test_job_deleted_while_its_admission_is_in_flight_is_not_requeued() -> None:
    tracker, cycle = make(b.node("n", gpu=4))
    tracker.observe(JOB, gpu_job("a", gpus=4))
    cycle.run()
    tracker.forget(("Job", "default", "a"))
    tracker.admission_failed(("Job", "default", "a"))
    assert len(tracker.queue) == 0
    assert tracker.reservations.held_pods(("Job", "default", "a")) == 0


def test_jobs_that_are_not_ours_are_ignored() -> None:
    tracker, cycle = make(b.node("n", gpu=4))
    tracker.observe(JOB, gpu_job("running", suspend=False))
    tracker.observe(JOB, gpu_job("opted-out", annotations={"kube-queue.io/ignore": "true"}))
    tracker.observe(JOB, gpu_job("kueue", labels={"kueue.x-k8s.io/queue-name": "q"}))
    assert len(tracker.queue) == 0
    assert cycle.run().admitted == []


def test_job_demand_follows_completions_and_progress() -> None:
    obj = b.job("j", {"cpu": "1"}, parallelism=4, completions=6, succeeded=3, suspend=False)
    assert JOB.pod_sets(obj)[0].count == 3
    assert JOB.pod_sets(b.job("k", {"cpu": "1"}, parallelism=4, completions=2))[0].count == 2
    assert JOB.pod_sets(b.job("w", {"cpu": "1"}, parallelism=5))[0].count == 5


def test_work_queue_job_holds_nothing_for_pods_it_will_never_create() -> None:
    """A Job without completions creates no new pods once one succeeded (Job controller rule);
    regression: kube-queue kept holding parallelism (4) while only 2 pods ran."""
    tracker, cycle = make(b.node("n", gpu=4))
    obj = as_admitted(gpu_job("wq", gpus=1, pods=4))
    tracker.observe(JOB, obj)
    key = ("Job", "default", "wq")
    assert tracker.reservations.held_pods(key) == 4
    for i in range(2):
        pod = b.pod(f"wq-{i}", "n", {"cpu": "1", GPU: "1"}, owner_job="wq")
        tracker.pod_changed(tracker.cache.upsert_pod(pod, (key, None)))
    obj["status"] = {"succeeded": 1, "active": 2}
    tracker.observe(JOB, obj)
    assert JOB.pod_sets(obj)[0].count == 2
    assert tracker.reservations.held_pods(key) == 0
    assert tracker.cache.nodes["n"].free[GPU] == 2000
    tracker.observe(JOB, gpu_job("next", gpus=2, created="2026-01-01T00:00:05Z"))
    assert admitted_names(cycle.run()) == ["next"]


def test_hold_made_before_the_nodes_were_known_moves_onto_a_real_node() -> None:
    """After a restart the admitted job may be listed before the Node list: its hold must not
    stay on nothing (or on a stale node) while the real node looks free."""
    tracker, cycle = make()
    # A leftover pod on a node that no longer exists creates a placeholder node.
    tracker.cache.upsert_pod(b.pod("old", "gone-node", {GPU: "1"}), None)
    tracker.observe(JOB, as_admitted(gpu_job("running", gpus=4)))
    tracker.observe(JOB, gpu_job("waiting", gpus=4, created="2026-01-01T00:00:01Z"))
    tracker.cache.upsert_node(b.node("n", gpu=4))
    assert cycle.run().admitted == []
    held = tracker.reservations._held[("Job", "default", "running")].placed
    assert held == {"main": {"n": 1}}


def test_hold_moves_off_a_node_that_was_deleted() -> None:
    tracker, cycle = make(b.node("a", gpu=4), b.node("b", gpu=4))
    tracker.observe(JOB, gpu_job("first", gpus=4))
    [admission] = cycle.run().admitted
    tracker.admission_succeeded(admission.job.key, JOB, as_admitted(gpu_job("first", gpus=4)))
    reserved_on = admission.assignments[0].node
    tracker.cache.delete_node(reserved_on)
    tracker.observe(JOB, gpu_job("second", gpus=4, created="2026-01-01T00:00:01Z"))
    assert cycle.run().admitted == [], "the hold moved to the other node and blocks second"
    assert tracker.reservations._held[("Job", "default", "first")].placed["main"] == {
        ({"a", "b"} - {reserved_on}).pop(): 1
    }


def test_a_starved_job_stops_backfill_behind_it() -> None:
    """BestEffortFIFO lets small jobs pass a big one, but not forever."""
    for now, expected in ((1000.0, ["small"]), (5000.0, [])):
        tracker, _ = make(b.node("n", gpu=4))
        cycle = AdmissionCycle(tracker, starvation_seconds=1800, wall_clock=lambda now=now: now)
        tracker.cache.upsert_pod(b.pod("busy", "n", {GPU: "2"}), None)
        big = gpu_job("big", gpus=4, created="1970-01-01T00:00:00Z")
        tracker.observe(JOB, big)
        tracker.observe(JOB, gpu_job("small", gpus=1, created="1970-01-01T00:00:01Z"))
        assert admitted_names(cycle.run()) == expected, f"now={now}"
        assert cycle.blocked.get("") is (
            None if expected else tracker.queue.get(("Job", "default", "big"))
        )


def test_the_admission_patch_is_made_from_the_observed_object() -> None:
    """Kinds whose patch depends on the object (Kubeflow, Spark) must get the real object."""
    from kubequeue.kinds.tfjob import TFJobKind

    tf = TFJobKind()
    tracker, cycle = make(b.node("n", gpu=4))
    tracker.register(tf)
    obj = {
        "metadata": {
            "name": "t",
            "namespace": "default",
            "uid": "u",
            "resourceVersion": "7",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "annotations": {"scheduling.x-k8s.io/suspend": "true"},
        },
        "spec": {
            "runPolicy": {"suspend": True},
            "tfReplicaSpecs": {
                "Worker": {"replicas": 1, "template": {"spec": b.pod_spec({GPU: "1"})}}
            },
        },
    }
    tracker.observe(tf, obj)
    [admission] = cycle.run().admitted
    assert [dict(op) for op in admission.job.admission_ops] == [
        {"op": "add", "path": "/metadata/annotations/scheduling.x-k8s.io~1suspend",
         "value": "false"},
        {"op": "add", "path": "/spec/runPolicy/suspend", "value": False},
    ]
    # ... and its precondition from the same object: what the decision read.
    assert admission.job.guard.uid == "u"
    assert dict(admission.job.guard.annotations or ())["scheduling.x-k8s.io/suspend"] == "true"


class _BrokenAdapter(JobKind):
    """A kind whose demand reader trips over a value it did not expect (any exception type)."""

    def pod_sets(self, obj: dict) -> list:  # type: ignore[override]
        raise TypeError("unhashable type: 'list'")


def test_an_adapter_failure_is_an_invalid_job_verdict_not_a_vanished_job() -> None:
    from kubequeue.observability import metrics

    tracker, cycle = make(b.node("n", gpu=4))
    broken = _BrokenAdapter()
    tracker.register(broken)
    before = metrics.UNREADABLE_JOBS.labels("job")._value.get()
    tracker.observe(broken, gpu_job("weird"))
    job = tracker.queue.get(("Job", "default", "weird"))
    assert job is not None, "the job stays queued"
    assert job.problem_reason == "InvalidJob"
    assert "TypeError" in (job.problem or "") and "wrong type or size" in (job.problem or "")
    assert metrics.UNREADABLE_JOBS.labels("job")._value.get() == before + 1
    result = cycle.run()
    assert result.admitted == []
    [notice] = result.notices
    assert (notice.type, notice.reason) == ("Warning", "InvalidJob")
    # Fixed (here: read by a working adapter): judged again and admitted.
    tracker.observe(JOB, gpu_job("weird"))
    assert admitted_names(cycle.run()) == ["weird"]


def test_a_missing_priority_class_does_not_hide_a_demand_problem() -> None:
    tracker, _ = make(b.node("n", gpu=4))
    bad = gpu_job("bad", priority_class="nope")
    bad["spec"]["parallelism"] = -1
    tracker.observe(JOB, bad)
    job = tracker.queue.get(("Job", "default", "bad"))
    assert job is not None and job.problem_reason == "InvalidJob"
    tracker.set_priority_classes({"high": 1000, "other": 5}, 0)
    assert job.problem_reason == "InvalidJob", "re-judging priorities keeps the worse problem"


def test_reasons_are_written_after_the_decisions_for_jobs_that_still_wait() -> None:
    """decide() leaves the reasons due; explain_deferred() writes them (the loop calls it once
    the admissions' writes have started), for jobs still waiting, about the capacity now."""
    tracker, cycle = make(b.node("n", gpu=4))
    for i in range(4):
        tracker.observe(JOB, gpu_job(f"j{i}", created=f"2026-01-01T00:00:0{i}Z"))
    decided = cycle.decide()
    assert admitted_names(decided) == ["j0", "j1"]
    assert decided.notices == []  # no scan of the nodes before the writes go out
    waiting = {j.key[2]: j for j in tracker.queue.ordered()}
    assert waiting["j2"].wait_reason == "" and waiting["j3"].wait_reason == ""
    tracker.forget(("Job", "default", "j3"))  # gone before its reason was written: none
    notices = cycle.explain_deferred()
    assert [(n.key[2], n.reason) for n in notices] == [("j2", "Queued")]
    assert "needs 2 nvidia.com/gpu on one node" in notices[0].message
    assert waiting["j2"].wait_reason in notices[0].message
    assert cycle.explain_deferred() == []  # written once


def test_a_job_that_fits_by_the_time_its_reason_is_due_gets_none_and_stays_due() -> None:
    tracker, cycle = make(b.node("n", gpu=4))
    tracker.observe(JOB, gpu_job("j0", created="2026-01-01T00:00:00Z"))
    tracker.observe(JOB, gpu_job("j1", gpus=4, created="2026-01-01T00:00:01Z"))
    assert admitted_names(cycle.decide()) == ["j0"]  # j1 waits for the 2 GPUs j0 holds
    tracker.cache.upsert_node(b.node("n", gpu=8))  # before its reason is written, it fits
    assert cycle.explain_deferred() == []
    [job] = tracker.queue.ordered()
    assert job.wait_reason == "" and job.explained_at is None  # due again if it still waits
    assert admitted_names(cycle.run()) == ["j1"]


def test_a_waiting_jobs_event_changes_with_its_reason_not_with_free_amounts() -> None:
    """Issue 10: Events change only when the reason changes. A job of two 3-GPU pods waits on
    an 8-GPU node while other pods end, freeing 1, 2, 3, then 4 GPUs: one Event while no node
    has 3 free (with the amount of its time in its text), one when the reason becomes "only 1
    of them fits", none when only the amounts move; the wait reason (`kube-queue status`)
    keeps them current. Parking off, so every cycle looks at the job again."""
    now = [0.0]
    tracker, _ = make(b.node("n", gpu=8))
    cycle = AdmissionCycle(tracker, clock=lambda: now[0], parking=False)
    for i in range(7):
        tracker.cache.upsert_pod(b.pod(f"busy{i}", "n", {GPU: "1"}, uid=f"busy{i}"), None)
    tracker.observe(JOB, gpu_job("big", gpus=3, pods=2))
    job = tracker.queue.get(("Job", "default", "big"))

    def after_one_ends(i: int) -> list[str]:
        if i >= 0:
            ended = b.pod(f"busy{i}", "n", {GPU: "1"}, uid=f"busy{i}", phase="Succeeded")
            tracker.cache.upsert_pod(ended, None)
        now[0] += 120.0  # past the report interval: the reason is written again
        result = cycle.run()
        return [n.message for n in [*result.notices, *cycle.explain_deferred()]
                if n.reason == "Queued"]

    first = after_one_ends(-1)
    assert len(first) == 1 and "the most any eligible node has free is 1" in first[0]
    assert after_one_ends(0) == []  # 2 free: the amount alone moved
    assert "has free is 2" in job.wait_reason
    second = after_one_ends(1)  # 3 free: one pod fits, the other does not
    assert len(second) == 1 and "only 1 fit on free capacity now" in second[0]
    assert after_one_ends(2) == []
