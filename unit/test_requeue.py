"""Admitted jobs whose pods never all start: suspended again after the pods-ready timeout,
queued with a backoff that doubles, given up on after the limit until a user edits the job."""

from __future__ import annotations

import datetime

import msgspec

from kubequeue.admission.cycle import AdmissionCycle
from kubequeue.admission.requeue import RequeuePolicy, not_running
from kubequeue.kinds.spark import SparkApplicationKind
from kubequeue.labels import ADMITTED_AT, PREEMPTIBLE
from kubequeue.objects import PodDiagnosis
from kubequeue.resources import GPU
from unit import builders as b
from unit.simcluster import JOB, Cluster, gpu_job, two_teams

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC).timestamp()


def stamp(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(T0 + seconds, datetime.UTC).strftime(
        "%Y-%m-%dT%H:%M:%SZ"
    )


def cluster(
    now: list[float], queues: list[dict[str, object]] | None = None, gpus: int = 4, **policy: float
) -> Cluster:
    c = Cluster(queues or [], b.node("n1", gpu=gpus))
    c.cycle = AdmissionCycle(
        c.tracker,
        requeue=RequeuePolicy(**{"timeout": 60, "limit": 3, "backoff": 10, **policy}),
        wall_clock=lambda: T0 + now[0],
    )
    return c


def admit_at(c: Cluster, now: list[float], name: str) -> None:
    """Admit, with the admission time the writer would have stamped."""
    assert admit_all_at(c, now) == [name]


def admit_all_at(c: Cluster, now: list[float]) -> list[str]:
    """Run a cycle; stamp what it admitted with the admission time the writer would have."""
    names = c.cycle_admits()
    for name in names:
        obj = c.objects[name]
        obj["metadata"]["annotations"][ADMITTED_AT] = stamp(now[0])
        c.tracker.observe(JOB, obj)
    return names


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


def test_the_backoff_doubles_from_its_base_and_stops_at_its_cap() -> None:
    policy = RequeuePolicy()  # 1 min, doubling, at most 30 min
    assert [policy.delay(n) for n in range(8)] == [0, 60, 120, 240, 480, 960, 1800, 1800]
    assert policy.delay(10**6) == 1800, "no overflow for absurd counts"
    assert RequeuePolicy(backoff=10, backoff_max=50).delay(4) == 50


def test_a_queues_pods_ready_timeout_overrides_the_flag() -> None:
    """team-b says 20 s (podsReadyTimeoutSeconds), the flag 60 s: team-b's jobs are judged at
    20 s, team-a's at 60 s; an Event of a job left running names the timeout that applied."""
    now = [0.0]
    c = cluster(now, two_teams(podsReadyTimeoutSeconds=20), gpus=12)
    c.stuck.update(("a", "b", "b-kept"))
    c.submit("a", "ns-a", 4, 0)
    c.submit("b", "ns-b", 4, 1)
    c.submit("b-kept", "ns-b", 4, 2, annotations={PREEMPTIBLE: "false"})
    assert admit_all_at(c, now) == ["a", "b", "b-kept"]
    now[0] = 19
    c.cycle_admits()
    assert c.last.requeues == [] and c.last.notices == []
    now[0] = 21
    c.cycle_admits()
    assert [r.job.key[2] for r in c.last.requeues] == ["b"]
    [notice] = c.last.notices
    assert (notice.key[2], notice.reason) == ("b-kept", "NotStarted")
    assert notice.message.startswith("its pods did not all start within 20s of admission")
    c.requeued(stamp(now[0]))
    now[0] = 59
    c.cycle_admits()
    assert c.last.requeues == []
    now[0] = 61
    c.cycle_admits()
    assert [r.job.key[2] for r in c.last.requeues] == ["a"]


def test_a_queue_may_set_a_longer_timeout_than_the_flag() -> None:
    now = [0.0]
    c = cluster(now, two_teams(podsReadyTimeoutSeconds=300), gpus=8)
    c.stuck.add("b")
    c.submit("b", "ns-b", 4, 0)
    admit_at(c, now, "b")
    now[0] = 299
    c.cycle_admits()
    assert c.last.requeues == []
    now[0] = 301
    c.cycle_admits()
    assert [r.job.key[2] for r in c.last.requeues] == ["b"]


def test_a_job_marked_not_preemptible_whose_pods_never_start_gets_one_warning() -> None:
    """It cannot be requeued; it is left running, and its owner is told so in an Event (not
    only the admin, in a log line), once."""
    now = [0.0]
    c = cluster(now)
    c.stuck.add("kept")
    c.submit("kept", "ns", 4, 0, annotations={PREEMPTIBLE: "false"})
    admit_at(c, now, "kept")
    now[0] = 59
    c.cycle_admits()
    assert c.last.notices == []
    now[0] = 61
    c.cycle_admits()
    assert c.last.requeues == []
    [notice] = c.last.notices
    assert (notice.key, notice.uid, notice.type, notice.reason) == (
        ("Job", "ns", "kept"), "uid-kept", "Warning", "NotStarted")
    assert notice.message == (
        "its pods did not all start within 60s of admission (0 of 1 running and ready); its "
        "kind cannot be suspended once running (or it is marked preemptible: false), so "
        "kube-queue leaves it running"
    )
    for later in (62, 600, 3600):
        now[0] = later
        c.cycle_admits()
        assert c.last.notices == [], "said once"
    assert ("Job", "ns", "kept") in c.tracker.admitted


def test_a_kind_that_cannot_be_suspended_once_running_gets_the_warning_too() -> None:
    """A SparkApplication (its operator does not stop a running application on suspend)."""
    now = [0.0]
    c = cluster(now)
    spark = SparkApplicationKind()
    c.tracker.register(spark)
    obj = {
        "apiVersion": "sparkoperator.k8s.io/v1beta2",
        "kind": "SparkApplication",
        "metadata": {
            "name": "etl",
            "namespace": "ns",
            "uid": "uid-etl",
            "resourceVersion": "7",
            "creationTimestamp": stamp(0),
            "annotations": {ADMITTED_AT: stamp(0)},
        },
        "spec": {
            "suspend": False,
            "type": "Python",
            "driver": {"cores": 1, "memory": "1g"},
            "executor": {"instances": 1, "cores": 1, "memory": "1g",
                         "gpu": {"name": GPU, "quantity": 1}},
        },
    }
    c.tracker.observe(spark, obj)
    key = ("SparkApplication", "ns", "etl")
    assert c.tracker.admitted[key].preemption_patch is None
    now[0] = 61
    c.cycle_admits()
    assert c.last.requeues == []
    [notice] = c.last.notices
    assert (notice.key, notice.type, notice.reason) == (key, "Warning", "NotStarted")
    assert "(0 of 2 running and ready)" in notice.message
    now[0] = 120
    c.cycle_admits()
    assert c.last.notices == []


def test_a_requeued_job_goes_behind_the_jobs_of_its_priority_never_ahead_of_its_creation() -> None:
    """Issue 11: requeued behind jobs of its priority. Its requeue time is its place in line
    (a job submitted before the requeue goes first), but a requeued-at a user wrote earlier
    than the job's creation never moves it forward."""
    from kubequeue.labels import REQUEUED_AT, REQUEUES

    c = cluster([0.0])
    for name, created in (("early", 0), ("later", 100)):
        obj = gpu_job(name, "default", 4, 0)
        obj["metadata"]["creationTimestamp"] = stamp(created)
        c.objects[name] = obj
    c.objects["early"]["metadata"]["annotations"] = {REQUEUES: "1", REQUEUED_AT: stamp(200)}
    for name in ("early", "later"):
        c.tracker.observe(JOB, c.objects[name])
    assert [j.key[2] for j in c.tracker.queue.ordered()] == ["later", "early"]
    # Hostile: requeued "before" it existed, to jump the line. Its creation stands.
    c.objects["later"]["metadata"]["annotations"] = {REQUEUES: "1", REQUEUED_AT: stamp(-500)}
    c.tracker.observe(JOB, c.objects["later"])
    early = c.tracker.queue.get(("Job", "default", "early"))
    assert [j.key[2] for j in c.tracker.queue.ordered()] == ["later", "early"]
    assert early is not None and early.created == stamp(200)
    c.objects["early"]["metadata"]["annotations"] = {}
    c.tracker.observe(JOB, c.objects["early"])
    assert [j.key[2] for j in c.tracker.queue.ordered()] == ["early", "later"]
