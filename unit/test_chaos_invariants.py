"""The chaos checker's rules, fed hand-written object sequences: each violation it exists to find
is found, and the legitimate histories around it are not flagged (a checker that never fires
would make the whole fault campaign pass vacuously)."""

from __future__ import annotations

from typing import Any

from e2e.chaos.checker import ADMITTED_AT, STOPPED, Invariants


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def job(name: str, suspend: bool, stamp: str | None = None, done: bool = False,
        stopped: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "annotations": {}}
    if stamp:
        meta["annotations"][ADMITTED_AT] = stamp
    if stopped:
        meta["annotations"][STOPPED] = stopped
    status = {"conditions": [{"type": "Complete", "status": "True"}]} if done else {}
    return {"metadata": meta, "spec": {"suspend": suspend}, "status": status}


def pod(name: str, job_name: str, node: str = "", gpus: int = 1, unschedulable: bool = False,
        phase: str = "Pending") -> dict[str, Any]:
    conditions = ([{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
                  if unschedulable else [])
    return {
        "metadata": {"name": name, "labels": {"batch.kubernetes.io/job-name": job_name}},
        "spec": {"nodeName": node, "containers": [
            {"resources": {"requests": {"nvidia.com/gpu": str(gpus), "cpu": "100m"}}}]},
        "status": {"phase": phase, "conditions": conditions},
    }


def node(name: str, gpus: int) -> dict[str, Any]:
    return {"metadata": {"name": name},
            "status": {"allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "8",
                                       "memory": "16Gi"}}}


def test_one_admission_is_fine_and_a_second_without_suspension_is_flagged() -> None:
    inv = Invariants(clock=Clock())
    inv.job_seen(job("a", True))
    inv.job_seen(job("a", False, "t1"))
    inv.job_seen(job("a", False, "t1"))  # a status update: same episode
    assert inv.found.violations == []
    assert len(inv.admission_times) == 1
    inv.job_seen(job("a", False, "t2"))  # re-stamped while running: admitted twice
    assert any("admitted 2 times" in v for v in inv.found.violations)


def test_readmission_after_the_test_suspended_it_is_a_new_episode() -> None:
    inv = Invariants(clock=Clock())
    inv.job_seen(job("a", True))
    inv.job_seen(job("a", False, "t1"))
    inv.user_suspended("a")
    inv.job_seen(job("a", True, "t1"))
    inv.job_seen(job("a", False, "t2"))
    assert inv.found.violations == []


def test_suspension_by_someone_else_is_flagged() -> None:
    inv = Invariants(clock=Clock())
    inv.job_seen(job("a", True))
    inv.job_seen(job("a", False, "t1"))
    inv.job_seen(job("a", True, "t1"))
    assert any("suspended again" in v for v in inv.found.violations)


def test_a_suspension_kube_queue_stamped_starts_a_new_episode() -> None:
    """The unplaceable requeue (on by default) suspends a starting job and admits it again:
    legitimate, because the suspending write carries a new stopped stamp."""
    inv = Invariants(clock=Clock())
    inv.job_seen(job("a", True))
    inv.job_seen(job("a", False, "t1"))
    inv.job_seen(job("a", True, stopped="Unplaceable t2"))
    inv.job_seen(job("a", False, "t3", stopped="Unplaceable t2"))
    assert inv.found.violations == []
    # A third admission needs a third stamp, not the old one seen again.
    inv.job_seen(job("a", False, "t4", stopped="Unplaceable t2"))
    assert any("admitted 3 times" in v for v in inv.found.violations)


def test_a_missed_stamped_suspension_still_counts_but_an_unstamped_one_does_not() -> None:
    """A relist can hide the suspended state: the stamp on the re-admitted job still shows a
    stop happened. Without a stamp, a re-admission is flagged."""
    inv = Invariants(clock=Clock())
    inv.job_seen(job("a", True))
    inv.job_seen(job("a", False, "t1"))
    inv.job_seen(job("a", False, "t3", stopped="Unplaceable t2"))
    assert inv.found.violations == []
    other = Invariants(clock=Clock())
    other.job_seen(job("b", True))
    other.job_seen(job("b", False, "t1"))
    other.job_seen(job("b", True, stopped="Preempted t0"))  # an old stamp...
    other.job_seen(job("b", False, "t2", stopped="Preempted t0"))
    other.job_seen(job("b", True, stopped="Preempted t0"))  # ...excuses one stop, not two
    assert any("suspended again" in v for v in other.found.violations)


def test_node_over_commit_is_flagged_and_terminal_pods_do_not_count() -> None:
    inv = Invariants(clock=Clock())
    inv.node_seen(node("n", 2))
    inv.pod_seen(pod("p1", "a", "n", gpus=2, phase="Succeeded"))
    inv.pod_seen(pod("p2", "b", "n", gpus=2, phase="Running"))
    assert inv.found.violations == []
    inv.pod_seen(pod("p3", "c", "n", gpus=1, phase="Running"))
    assert inv.found.violations == ["node n over-committed on nvidia.com/gpu: 3 > 2"]


def test_unschedulable_pod_of_an_admitted_job_is_flagged_only_after_the_grace() -> None:
    clock = Clock()
    inv = Invariants(unschedulable_grace_s=15, clock=clock)
    inv.job_seen(job("a", True))
    inv.pod_seen(pod("p", "other-unqueued", unschedulable=True))  # not a job we watch
    inv.job_seen(job("a", False, "t1"))
    inv.pod_seen(pod("q", "a", unschedulable=True))
    clock.now += 14
    inv.pod_seen(pod("q", "a", unschedulable=True))  # still pending: the clock keeps running
    inv.check_unschedulable()
    assert inv.found.violations == []
    clock.now += 2
    inv.check_unschedulable()
    assert inv.found.violations == ["pod q of admitted job a unschedulable for more than 15s"]


def test_a_pod_that_gets_scheduled_in_time_is_not_flagged() -> None:
    clock = Clock()
    inv = Invariants(clock=clock)
    inv.job_seen(job("a", True))
    inv.job_seen(job("a", False, "t1"))
    inv.pod_seen(pod("q", "a", unschedulable=True))
    clock.now += 10
    inv.node_seen(node("n", 8))
    inv.pod_seen(pod("q", "a", node="n", phase="Running"))
    clock.now += 30
    inv.check_unschedulable()
    assert inv.found.violations == []


def test_final_liveness_and_nothing_lost() -> None:
    inv = Invariants(clock=Clock())
    for name in ("done", "running", "deleted", "stuck", "explained", "silent"):
        inv.job_seen(job(name, True))
    inv.job_seen(job("done", False, "t", done=True))
    inv.job_seen(job("running", False, "t"))
    inv.user_deleted("deleted")
    inv.event_seen({"type": "Warning", "reason": "NeverFits",
                    "involvedObject": {"kind": "Job", "name": "explained"}})
    fits = {"stuck"}.__contains__
    assert inv.final(fits, 60) == [
        "job silent waits with no Event saying why",
        "job stuck fits the empty cluster but was not admitted within 60s",
    ]
