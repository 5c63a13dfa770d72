"""Admitted jobs whose pods never all start: suspended again after the pods-ready timeout,
queued with a backoff that doubles, given up on after the limit until a user edits the job."""

from __future__ import annotations

import datetime

import msgspec

from kubequeue.admission.cycle import AdmissionCycle
from kubequeue.admission.requeue import RequeuePolicy, not_running
from kubequeue.objects import PodDiagnosis
from unit import builders as b
from unit.simcluster import JOB, Cluster, gpu_job

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC).timestamp()


def stamp(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(T0 + seconds, datetime.UTC).strftime(
        "%Y-%m-%dT%H:%M:%SZ"
    )


def cluster(now: list[float], **policy: float) -> Cluster:
    c = Cluster([], b.node("n1", gpu=4))
    c.cycle = AdmissionCycle(
        c.tracker,
        requeue=RequeuePolicy(**{"timeout": 60, "limit": 3, "backoff": 10, **policy}),
        wall_clock=lambda: T0 + now[0],
    )
    return c


def admit_at(c: Cluster, now: list[float], name: str) -> None:
    """Admit, with the admission time the writer would have stamped."""
    assert c.cycle_admits() == [name]
    obj = c.objects[name]
    obj["metadata"]["annotations"]["kube-queue.io/admitted-at"] = stamp(now[0])
    c.tracker.observe(JOB, obj)


def test_a_job_whose_pods_never_start_is_requeued_with_a_doubling_backoff_then_given_up() -> None:
    now = [0.0]
    c = cluster(now)
    c.stuck.add("stuck")
    c.submit("stuck", "ns", 4, 0)
    admit_at(c, now, "stuck")
    now[0] = 59
    c.cycle_admits()
    assert c.last.requeues == [], "not before the timeout"
    now[0] = 61
    c.submit("next", "ns", 4, 5)
    assert c.cycle_admits() == []  # the stuck job still holds its GPUs...
    [requeue] = c.last.requeues
    assert (requeue.attempt, requeue.gave_up, requeue.started, requeue.expected) == (1, False, 0, 1)
    assert c.requeued(stamp(61)) == ["stuck"]
    c.pods_leave("stuck")
    assert c.cycle_admits() == ["next"], "...until it is requeued: its GPUs go to the next job"
    c.finish("next")
    now[0] = 65
    assert c.cycle_admits() == [], "backing off 10 s after the first requeue"
    waiting = c.tracker.queue.get(("Job", "ns", "stuck"))
    assert waiting is not None and waiting.wait_reason.startswith("backing off after 1 failed")
    now[0] = 72
    admit_at(c, now, "stuck")
    now[0] = 72 + 61
    c.cycle_admits()
    assert [r.attempt for r in c.last.requeues] == [2]
    c.requeued(stamp(now[0]))
    c.pods_leave("stuck")
    now[0] += 19
    assert c.cycle_admits() == [], "the second backoff is 20 s"
    now[0] += 2
    admit_at(c, now, "stuck")
    now[0] += 61
    c.cycle_admits()
    [last] = c.last.requeues
    assert (last.attempt, last.gave_up) == (3, True)
    c.requeued(stamp(now[0]))
    c.pods_leave("stuck")
    now[0] += 3600
    assert c.cycle_admits() == []
    [notice] = [n for n in c.last.notices if n.key[2] == "stuck"]
    assert (notice.type, notice.reason) == ("Warning", "GaveUp")
    # A user edits the job: it is queued again, from zero.
    edited = gpu_job("stuck", "ns", 4, 0, annotations=dict(c.kept["stuck"]))
    assert c.tracker.queue.get(("Job", "ns", "stuck")).problem_reason == "GaveUp"  # type: ignore[union-attr]
    edited["spec"]["template"]["spec"]["containers"][0]["image"] = "fixed:2"
    c.stuck.discard("stuck")
    c.tracker.observe(JOB, edited)
    job = c.tracker.queue.get(("Job", "ns", "stuck"))
    assert job is not None and job.problem is None and job.requeues == 0
    assert c.cycle_admits() == ["stuck"]


def test_a_job_whose_pods_start_is_left_alone() -> None:
    now = [0.0]
    c = cluster(now)
    c.submit("fine", "ns", 4, 0)
    admit_at(c, now, "fine")
    now[0] = 3600
    c.cycle_admits()
    assert c.last.requeues == []


def test_the_timeout_can_be_turned_off() -> None:
    now = [0.0]
    c = cluster(now, timeout=0)
    c.stuck.add("stuck")
    c.submit("stuck", "ns", 4, 0)
    admit_at(c, now, "stuck")
    now[0] = 10**6
    c.cycle_admits()
    assert c.last.requeues == []


def test_the_reason_comes_from_the_pods_own_state() -> None:
    def diag(name: str, status: dict[str, object]) -> PodDiagnosis:
        return msgspec.convert({"metadata": {"name": name}, "status": status}, PodDiagnosis)

    pods = [
        diag(
            "p0",
            {
                "phase": "Pending",
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": "0/2 nodes are available: 2 node(s) didn't match pod "
                        "affinity rules.",
                    }
                ],
            },
        ),
        diag(
            "p1",
            {
                "phase": "Pending",
                "containerStatuses": [
                    {
                        "name": "c",
                        "state": {"waiting": {"reason": "ErrImagePull", "message": "nope"}},
                    }
                ],
            },
        ),
        diag(
            "p2",
            {
                "phase": "Pending",
                "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
                ],
            },
        ),
        diag("p3", {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}),
    ]
    reason, text = not_running(pods, expected=5)
    assert reason == "Unschedulable"
    assert text.startswith("1 of 5 pods running and ready; p0 Unschedulable: 0/2 nodes")
    assert "p1 ErrImagePull: nope" in text and "1 pod(s) not created" in text


def test_a_job_whose_pods_all_started_is_not_requeued_when_some_finish_early() -> None:
    """A job that once had every pod running is fine even if some of its pods have finished
    (and left) by the deadline."""
    now = [0.0]
    c = cluster(now)
    c.submit("quick", "ns", 2, 0)
    admit_at(c, now, "quick")
    c.pods_leave("quick")  # its pod ran and finished; the Job object is still running
    now[0] = 3600
    c.cycle_admits()
    assert c.last.requeues == []
