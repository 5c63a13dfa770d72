"""A starting job whose pods the scheduler cannot place (it bound other pods where they were
planned, and no node has room now) is requeued after a short grace, not after the pods-ready
timeout: the cycle's side (which jobs, when; admission/requeue.py) and the reservations'."""

from __future__ import annotations

import datetime

import msgspec

from kubequeue.admission.cycle import AdmissionCycle
from kubequeue.admission.requeue import RequeuePolicy, unschedulable
from kubequeue.admission.tracker import JobTracker
from kubequeue.labels import ADMITTED_AT
from kubequeue.objects import PodDiagnosis
from kubequeue.resources import GPU
from unit import builders as b
from unit.simcluster import JOB, gpu_job, make

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC).timestamp()
KEY = ("Job", "ns", "big")


def stamp(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(T0 + seconds, datetime.UTC).strftime(
        "%Y-%m-%dT%H:%M:%SZ"
    )


def setup(now: list[float], **policy: float) -> tuple[JobTracker, AdmissionCycle]:
    """'big' (8 GPUs) admitted onto the only node with 8 free, its pod not bound yet."""
    tracker, cycle = make(
        [],
        b.node("whole", gpu=8),
        b.node("tight", gpu=8),
        requeue=RequeuePolicy(**{"timeout": 600, "unplaceable": 5, **policy}),
        wall_clock=lambda: T0 + now[0],
    )
    theirs = b.pod("theirs", "tight", {"cpu": "1", GPU: "7"}, uid="theirs")
    tracker.cache.upsert_pod(theirs, None)
    tracker.observe(JOB, gpu_job("big", "ns", 8, 0))
    result = cycle.run()
    assert [a.job.key for a in result.admitted] == [KEY]
    assert [a.node for a in result.admitted[0].assignments] == ["whole"]
    obj = gpu_job("big", "ns", 8, 0)
    obj["spec"]["suspend"] = False
    obj["metadata"]["annotations"] = {ADMITTED_AT: stamp(now[0])}
    obj["metadata"]["resourceVersion"] = "2"
    tracker.admission_succeeded(KEY, JOB, obj)
    return tracker, cycle


def displace(tracker: JobTracker) -> None:
    """Another pod (no queue's) is bound where big's pod was planned: no node has 8 free."""
    pod = b.pod("intruder", "whole", {"cpu": "1", GPU: "1"}, uid="intruder")
    tracker.cache.upsert_pod(pod, None)


def test_a_displaced_starting_job_is_requeued_after_the_grace_without_an_attempt() -> None:
    now = [0.0]
    tracker, cycle = setup(now)
    now[0] = 1
    assert cycle.run().requeues == [], "room is not owed: nothing to do"
    displace(tracker)
    assert tracker.reservations.stranded_jobs() == {KEY}
    now[0] = 2
    result = cycle.run()
    assert result.requeues == [], "not before the grace"
    assert result.wake_in == 5, "the loop wakes when it comes due"
    now[0] = 7
    [requeue] = cycle.run().requeues
    assert requeue.unplaceable and requeue.job.key == KEY
    assert (requeue.attempt, requeue.gave_up, requeue.started, requeue.expected) == (0, False, 0, 1)
    assert tracker.victims.get(KEY) == KEY, "nobody preempts it while it is stopped"
    del tracker.victims[KEY]  # the loop's part, once written
    now[0] = 8
    assert cycle.run().requeues == [], "once per spell of being owed room"


def test_unconfirmed_it_comes_up_again_after_another_grace() -> None:
    now = [0.0]
    tracker, cycle = setup(now)
    displace(tracker)
    now[0] = 1
    cycle.run()
    now[0] = 6
    assert [r.job.key for r in cycle.run().requeues] == [KEY]
    del tracker.victims[KEY]
    tracker.unplaceable_cleared(KEY, T0 + now[0])  # no pod of it was Unschedulable yet
    now[0] = 10
    assert cycle.run().requeues == []
    now[0] = 11
    assert [r.job.key for r in cycle.run().requeues] == [KEY]


def test_room_found_again_within_the_grace_resets_it() -> None:
    now = [0.0]
    tracker, cycle = setup(now)
    displace(tracker)
    now[0] = 1
    cycle.run()
    tracker.cache.delete_pod("intruder")  # gone: big's pod has its node back
    now[0] = 3
    assert cycle.run().requeues == []
    displace(tracker)
    now[0] = 4
    assert cycle.run().requeues == []
    now[0] = 8
    assert cycle.run().requeues == [], "a new spell, counted from when a cycle saw it"
    now[0] = 9
    assert [r.job.key for r in cycle.run().requeues] == [KEY]


def test_jobs_that_started_or_are_not_owed_room_or_with_it_off_are_left_alone() -> None:
    # Its pod started (bound and Running): a job that ran is never requeued for this.
    now = [0.0]
    tracker, cycle = setup(now)
    started = b.pod("big-0", "whole", {"cpu": "1", GPU: "8"}, owner_job="big", uid="big-0")
    tracker.pod_changed(tracker.cache.upsert_pod(started, (KEY, None)))
    displace(tracker)  # the node is over-filled, but nothing of big is held any more
    now[0] = 60
    assert cycle.run().requeues == []
    # Off: such a job waits for the pods-ready timeout like any other.
    for policy in ({"unplaceable": 0}, {"timeout": 0}):
        now = [0.0]
        tracker, cycle = setup(now, **policy)
        displace(tracker)
        now[0] = 60
        assert cycle.run().requeues == [], policy
    # A kind that cannot be suspended once running (or preemptible: "false") waits for room.
    now = [0.0]
    tracker, cycle = setup(now)
    tracker.admitted[KEY].preemption_patch = None
    displace(tracker)
    now[0] = 1
    cycle.run()
    now[0] = 60
    assert cycle.run().requeues == []


def test_the_timeout_requeue_and_this_one_never_both_take_a_job() -> None:
    now = [0.0]
    tracker, cycle = setup(now, timeout=10)
    displace(tracker)
    now[0] = 11  # past the pods-ready timeout and the grace at once
    result = cycle.run()
    assert [(r.job.key, r.unplaceable) for r in result.requeues] == [(KEY, False)]


def test_only_unschedulable_pods_confirm_it() -> None:
    def diag(status: dict[str, object]) -> PodDiagnosis:
        return msgspec.convert({"metadata": {"name": "p"}, "status": status}, PodDiagnosis)

    unscheduled = diag(
        {
            "phase": "Pending",
            "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "message": "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."}
            ],
        }
    )
    pulling = diag(
        {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "True"}],
            "containerStatuses": [{"name": "c", "state": {"waiting": {"reason": "ErrImagePull"}}}],
        }
    )
    not_tried = diag({"phase": "Pending"})
    assert unschedulable([unscheduled, pulling, not_tried]) == 1
    assert unschedulable([pulling, not_tried]) == 0
