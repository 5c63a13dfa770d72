"""admission/loop.py with the real tracker, cycle and capacity, over a fake API server whose writes
fail in scripted ways. The informer is played by the test: ``see()`` delivers the job as the
server now has it, as a watch event would.

The invariant checked throughout: a job's capacity is held from the decision until the outcome of
its write is known, so a second job competing for the same GPUs is never admitted meanwhile, and
a job is admitted (written) at most once.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc
import pytest

from kubequeue.admission.cycle import AdmissionCycle
from kubequeue.admission.loop import AdmissionLoop
from kubequeue.admission.preemption import PreemptionPolicy
from kubequeue.admission.requeue import RequeuePolicy
from kubequeue.admission.tracker import JobTracker
from kubequeue.capacity.cache import CapacityCache
from kubequeue.capacity.reservations import Reservations
from kubequeue.kinds.job import JobKind
from kubequeue.labels import (
    ADMITTED_AT,
    GAVE_UP,
    PREEMPTED_BY,
    PREEMPTIBLE,
    QUEUE_LABEL,
    REQUEUED_AT,
    REQUEUES,
    STOPPED,
    TOPOLOGY_DOMAIN,
)
from kubequeue.observability import metrics
from kubequeue.queueing.queue import JobQueue
from kubequeue.queueing.spec import parse_queue
from kubequeue.resources import GPU
from kubequeue.status import admitted_rows
from unit import builders as b
from unit.clock import wait_until
from unit.fakes import FakeClient
from unit.jsonpatch import NOT_APPLIED

JOB = JobKind()
JOBS = "/apis/batch/v1/namespaces/default/jobs"


def key(name: str) -> tuple[str, str, str]:
    return ("Job", "default", name)


class Events:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str, str]] = []  # (job name, type, reason)
        self.messages: list[tuple[str, str, str]] = []  # (job name, reason, message)

    def emit(self, obj: Any, type_: str, reason: str, message: str) -> None:
        self.sent.append((obj.name, type_, reason))
        self.messages.append((obj.name, reason, message))

    def reasons(self, name: str) -> list[str]:
        return [reason for job, _, reason in self.sent if job == name]

    def message(self, name: str, reason: str) -> str:
        [found] = [m for job, r, m in self.messages if (job, r) == (name, reason)]
        return found


class World:
    def __init__(self, gpus: int = 4, **cycle: Any) -> None:
        cache = CapacityCache()
        cache.upsert_node(b.node("n", gpu=gpus))
        self.tracker = JobTracker(cache, JobQueue(), Reservations(cache))
        self.tracker.register(JOB)
        self.tracker.set_priority_classes({}, 0)
        self.client = FakeClient()
        self.events = Events()
        self.loop = AdmissionLoop(
            self.tracker,
            AdmissionCycle(self.tracker, **cycle),
            self.client,  # type: ignore[arg-type]
            self.events,  # type: ignore[arg-type]
            tick=0.05,
            settle_timeout=0.3,
            retry_delay=0.01,
            max_retry_delay=0.05,
            rejected_pause=0.01,
        )
        self.tracker._on_change = self.loop.wake
        self.cache = cache

    def submit(
        self, name: str, gpus: int = 4, created: str = "2026-01-01T00:00:00Z", **kw: Any
    ) -> None:
        obj = self.client.store.put(
            f"{JOBS}/{name}", b.job(name, {GPU: str(gpus)}, created=created, **kw)
        )
        self.tracker.observe(JOB, obj)

    def see(self, name: str) -> None:
        """The informer delivers the job as the server has it now (or its deletion)."""
        path = f"{JOBS}/{name}"
        if path in self.client.store.objects:
            self.tracker.observe(JOB, self.client.store.get(path))
        else:
            self.tracker.forget(key(name))

    def patches(self, name: str) -> int:
        return self.client.calls.count(("PATCH", f"{JOBS}/{name}"))

    def admitted_writes(self, name: str) -> int:
        return self.client.applied.count(("PATCH", f"{JOBS}/{name}"))

    def running(self, name: str) -> bool:
        obj = self.client.store.objects.get(f"{JOBS}/{name}")
        return obj is not None and obj["spec"]["suspend"] is False

    def holding(self, name: str) -> bool:
        return self.tracker.reservations.held_pods(key(name)) > 0

    def in_doubt(self, name: str) -> bool:
        """Outcome unknown: in flight (so no cycle considers it, even when an observation of
        the suspended job has put it in the queue again) and holding its capacity."""
        k = key(name)
        return k in self.tracker.unknown and k in self.tracker.inflight and self.holding(name)


@asynccontextmanager
async def running(world: World) -> AsyncIterator[anyio.abc.TaskGroup]:
    async with anyio.create_task_group() as tg:
        tg.start_soon(world.loop.run)
        yield tg
        tg.cancel_scope.cancel()


def errors(reason: str) -> float:
    return metrics.ADMISSION_ERRORS.labels("job", reason)._value.get()


def transport(operation: str) -> float:
    return metrics.TRANSPORT_ERRORS.labels(operation)._value.get()


async def test_a_disconnect_on_the_admission_patch_costs_one_retry_not_the_process() -> None:
    """The reported crash: ServerDisconnectedError from the PATCH ended the task group. The
    server never applied it; the loop holds the capacity, reads the job back unchanged after
    settle_timeout, and sends the same write again."""
    w = World()
    w.client.fail["PATCH"] = ["cut"]
    before = errors("Transport"), transport("admission")
    async with running(w):
        w.submit("a")
        await wait_until(lambda: w.patches("a") == 1)
        await wait_until(lambda: w.in_doubt("a"))
        await wait_until(lambda: w.running("a"))
    assert w.patches("a") == 2
    assert w.admitted_writes("a") == 1
    assert ("LIST", JOBS) in w.client.calls  # the fresh read that found it unchanged
    assert (errors("Transport"), transport("admission")) == (before[0] + 1, before[1] + 1)
    assert w.events.reasons("a") == ["Admitted"]
    assert key("a") not in w.tracker.inflight and not w.tracker.unknown


async def test_an_applied_write_whose_answer_was_lost_is_settled_by_the_next_observation() -> None:
    w = World()
    w.client.fail["PATCH"] = ["drop"]
    async with running(w):
        w.submit("a")
        w.submit("b", created="2026-01-01T00:00:01Z")  # wants the same four GPUs
        await wait_until(lambda: w.in_doubt("a"))
        await anyio.sleep(0.1)  # cycles run meanwhile (the tick is 0.05 s)
        assert w.patches("b") == 0, "b was admitted onto capacity a may be using"
        w.see("a")  # the watch event of a's applied write
        await wait_until(lambda: not w.tracker.unknown)
        assert w.holding("a")  # now as a tracked admitted job: its pod has not bound yet
        await anyio.sleep(0.1)
        assert w.patches("b") == 0
    assert w.patches("a") == 1, "a was written twice"
    assert ("LIST", JOBS) not in w.client.calls  # the observation came before settle_timeout
    assert w.events.reasons("a") == ["Admitted"]
    assert key("a") not in w.tracker.inflight
    assert key("b") in w.tracker.queue


async def test_without_an_observation_a_fresh_read_settles_an_applied_write() -> None:
    w = World()
    w.client.fail["PATCH"] = ["drop"]
    async with running(w):
        w.submit("a")
        w.submit("b", created="2026-01-01T00:00:01Z")
        await wait_until(lambda: w.in_doubt("a"))
        await wait_until(lambda: not w.tracker.unknown)
        await anyio.sleep(0.1)
    assert ("LIST", JOBS) in w.client.calls
    assert w.patches("a") == 1
    assert w.patches("b") == 0
    assert w.holding("a")
    assert w.events.reasons("a") == ["Admitted"]


async def test_an_observation_of_a_newer_suspended_job_releases_and_requeues_it() -> None:
    """The write did not apply and the user changed the job's spec meanwhile (so the write can
    no longer apply): the job waits again and is decided anew from its latest version."""
    w = World()
    w.client.fail["PATCH"] = ["cut"]
    async with running(w):
        w.submit("a")
        await wait_until(lambda: w.in_doubt("a"))
        obj = w.client.store.get(f"{JOBS}/a")
        obj["metadata"]["generation"] = 2
        w.client.store.put(f"{JOBS}/a", obj)
        w.see("a")
        await wait_until(lambda: w.running("a"))
    assert w.patches("a") == 2
    assert w.admitted_writes("a") == 1
    assert ("LIST", JOBS) not in w.client.calls


async def test_a_newer_version_the_write_still_applies_to_does_not_settle_it() -> None:
    """A status write (or a label nobody reads) moves the resourceVersion but not what the
    decision read: the write in doubt could still apply, so the job keeps its hold until a
    fresh read; the write is then sent again, and exactly one copy applies."""
    w = World()
    w.client.fail["PATCH"] = ["cut"]
    async with running(w):
        w.submit("a")
        await wait_until(lambda: w.in_doubt("a"))
        obj = w.client.store.get(f"{JOBS}/a")
        obj["metadata"]["labels"]["edited"] = "yes"
        obj["status"] = {"conditions": [{"type": "Suspended", "status": "True"}]}
        w.client.store.put(f"{JOBS}/a", obj)
        w.see("a")
        await anyio.sleep(0.05)
        assert w.in_doubt("a") and w.holding("a"), "not settled by a version it still fits"
        await wait_until(lambda: w.running("a"))
    assert ("LIST", JOBS) in w.client.calls  # the fresh read after settle_timeout
    assert w.patches("a") == 2
    assert w.admitted_writes("a") == 1


async def test_a_job_deleted_while_in_doubt_frees_its_capacity() -> None:
    w = World()
    w.client.fail["PATCH"] = ["cut"]
    async with running(w):
        w.submit("a")
        w.submit("b", created="2026-01-01T00:00:01Z")
        await wait_until(lambda: w.in_doubt("a"))
        del w.client.store.objects[f"{JOBS}/a"]
        w.see("a")
        await wait_until(lambda: w.running("b"))
    assert not w.holding("a")
    assert key("a") not in w.tracker.queue
    assert w.patches("a") == 1


@pytest.mark.parametrize("mode", ["drop", "cut"])
async def test_a_job_deleted_while_in_doubt_is_found_gone_by_the_read(mode: str) -> None:
    w = World()
    w.client.fail["PATCH"] = [mode]
    async with running(w):
        w.submit("a")
        w.submit("b", created="2026-01-01T00:00:01Z")
        await wait_until(lambda: w.in_doubt("a"))
        del w.client.store.objects[f"{JOBS}/a"]  # and the DELETED event is not seen (yet)
        await wait_until(lambda: w.running("b"))
    assert not w.holding("a")
    assert w.patches("a") == 1


async def test_a_refused_connection_keeps_the_hold_and_sends_again_without_a_read() -> None:
    w = World()
    w.client.fail["PATCH"] = ["refuse", "refuse"]
    before = errors("Transport")
    async with running(w):
        w.submit("a")
        w.submit("b", created="2026-01-01T00:00:01Z")
        await wait_until(lambda: w.running("a"))
        await anyio.sleep(0.1)
    assert w.patches("a") == 3
    assert w.patches("b") == 0
    assert ("LIST", JOBS) not in w.client.calls  # never sent: nothing to settle
    assert errors("Transport") == before + 2
    assert w.events.reasons("a") == ["Admitted"]


async def test_a_gateway_timeout_is_an_unknown_outcome_too() -> None:
    w = World()
    w.client.fail["PATCH"] = ["timeout"]
    before = errors("Timeout")
    async with running(w):
        w.submit("a")
        await wait_until(lambda: w.in_doubt("a"))
        await wait_until(lambda: w.running("a"))
    assert errors("Timeout") == before + 1
    assert w.admitted_writes("a") == 1
    assert "AdmissionFailed" not in w.events.reasons("a")


async def test_read_failures_back_off_and_retry() -> None:
    w = World()
    w.client.fail["PATCH"] = ["cut"]
    w.client.fail["LIST"] = ["refuse", "drop", "reject"]
    before = transport("admission_read")
    async with running(w):
        w.submit("a")
        await wait_until(lambda: w.running("a"), timeout=10)
    assert w.client.calls.count(("LIST", JOBS)) == 4
    assert transport("admission_read") == before + 2
    assert w.admitted_writes("a") == 1


async def test_a_resend_that_conflicts_waits_for_the_observation() -> None:
    """Read back unchanged, sent again, but the first write landed late in between (409): the
    job is not released; the observation of the late write settles it as admitted."""
    w = World()
    w.client.fail["PATCH"] = ["cut"]
    late: dict[str, Any] = {}

    def land_late(method: str, path: str) -> None:
        if method == "PATCH" and w.patches("a") == 2:  # the re-send: the first one lands now
            obj = w.client.store.get(path)
            obj["spec"]["suspend"] = False
            obj["metadata"]["annotations"][ADMITTED_AT] = "earlier"
            late.update(w.client.store.put(path, obj))

    w.client.on_call = land_late
    async with running(w):
        w.submit("a")
        w.submit("b", created="2026-01-01T00:00:01Z")
        await wait_until(lambda: w.patches("a") == 2)
        await anyio.sleep(0.1)
        assert w.in_doubt("a"), "a 409 after a lost answer must not release the hold"
        assert w.patches("b") == 0
        w.see("a")
        await wait_until(lambda: not w.tracker.unknown)
    assert w.holding("a")
    assert w.patches("b") == 0
    assert w.events.reasons("a") == ["Admitted"]


async def test_leadership_lost_mid_write_keeps_the_hold_and_the_next_term_settles_it() -> None:
    w = World()
    w.client.fail["PATCH"] = ["hang"]
    async with running(w):
        w.submit("a")
        w.submit("b", created="2026-01-01T00:00:01Z")
        await wait_until(lambda: w.patches("a") == 1)
    # The loop was cancelled mid-write (as on leadership loss): the write may have landed.
    assert w.in_doubt("a")
    async with running(w):  # the next term
        await wait_until(lambda: w.running("a"))
        await anyio.sleep(0.1)
    assert w.patches("a") == 2
    assert w.admitted_writes("a") == 1
    assert w.patches("b") == 0


async def test_cancelled_before_sending_is_undone_as_before() -> None:
    w = World()
    w.loop.max_inflight = 1
    w.client.fail["PATCH"] = ["hang"]
    async with running(w):
        w.submit("a", gpus=1)
        w.submit("b", gpus=1, created="2026-01-01T00:00:01Z")
        await wait_until(lambda: key("b") in w.tracker.inflight)
        await anyio.sleep(0.05)  # b waits for the limiter behind a's hung write
    assert w.patches("b") == 0
    assert key("b") not in w.tracker.inflight
    assert key("b") in w.tracker.queue
    assert not w.holding("b")
    assert w.in_doubt("a")


@pytest.mark.parametrize(
    ("status", "reason", "message", "warned"),
    [
        (409, "Conflict", "no", False),
        (422, "Invalid", NOT_APPLIED, False),  # a failed precondition test: decided again
        (422, "Invalid", "spec.suspend: Invalid value", True),  # validation: a real refusal
        (500, "InternalError", "no", True),
        (403, "Forbidden", "no", True),
    ],
)
async def test_a_refusal_is_undone_and_the_job_waits_again(
    status: int, reason: str, message: str, warned: bool
) -> None:
    from kubequeue.kube.client import ApiError

    w = World()
    calls = 0
    original = w.client.json_patch

    async def refuse_once(path: str, ops: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            w.client.calls.append(("PATCH", path))
            raise ApiError(status, reason, message, path)
        return await original(path, ops)

    w.client.json_patch = refuse_once  # type: ignore[method-assign]
    before = errors(reason)
    async with running(w):
        w.submit("a")
        await wait_until(lambda: w.running("a"))
    assert errors(reason) == before + 1
    assert ("AdmissionFailed" in w.events.reasons("a")) is warned
    assert not w.tracker.unknown


# ----------------------------------------------------------------- follow-ups


def follow_up(w: World, name: str) -> tuple[str, dict[str, Any]]:
    obj = w.client.store.put(f"{JOBS}/{name}", b.job(name, {"cpu": "1"}, suspend=False))
    entry = (obj["metadata"]["resourceVersion"], {"status": {"resumed": "yes"}})
    w.tracker.follow_ups[key(name)] = entry
    return entry


def followed_up(w: World, name: str) -> bool:
    return w.client.store.objects[f"{JOBS}/{name}"].get("status", {}).get("resumed") == "yes"


@pytest.mark.parametrize("mode", ["refuse", "cut", "timeout", "reject"])
async def test_a_failed_follow_up_is_tried_again(mode: str) -> None:
    w = World()
    w.client.fail["PATCH"] = [mode, mode]
    async with running(w):
        follow_up(w, "wf")
        w.loop.wake()
        await wait_until(lambda: followed_up(w, "wf"))
        await wait_until(lambda: not w.loop._following)
    assert w.patches("wf") == 3
    assert key("wf") not in w.tracker.follow_ups


async def test_a_follow_up_whose_answer_was_lost_is_not_applied_twice() -> None:
    w = World()
    w.client.fail["PATCH"] = ["drop"]
    async with running(w):
        follow_up(w, "wf")
        w.loop.wake()
        await wait_until(lambda: w.patches("wf") == 2)
        await wait_until(lambda: not w.loop._following)
    assert w.admitted_writes("wf") == 1  # the repeat met the precondition and got 409
    assert key("wf") not in w.tracker.follow_ups


async def test_a_follow_up_cut_off_by_leadership_loss_is_kept_for_the_next_term() -> None:
    w = World()
    w.client.fail["PATCH"] = ["hang"]
    async with running(w):
        entry = follow_up(w, "wf")
        w.loop.wake()
        await wait_until(lambda: w.patches("wf") == 1)
    assert w.tracker.follow_ups[key("wf")] == entry
    async with running(w):
        await wait_until(lambda: followed_up(w, "wf"))


# ----------------------------------------------------------------- the tracker's rule, alone


@pytest.mark.parametrize("change", ["admitted", "spec", "queue label", "status", "other label"])
def test_only_an_observation_the_write_can_no_longer_apply_to_settles(change: str) -> None:
    w = World()
    w.submit("a")
    [admission] = w.loop.cycle.run().admitted
    outcomes: list[bool] = []
    w.tracker.admission_unknown(key("a"), admission.job.guard, outcomes.append)
    w.see("a")  # a relist replaying the object the decision was made on
    assert outcomes == []
    assert w.in_doubt("a")
    assert w.loop.cycle.run().admitted == []  # in flight: not decided again
    obj = w.client.store.get(f"{JOBS}/a")
    if change == "admitted":
        obj["spec"]["suspend"] = False
        obj["metadata"]["annotations"][ADMITTED_AT] = "now"
    elif change == "spec":
        obj["metadata"]["generation"] = 2
    elif change == "queue label":
        obj["metadata"]["labels"][QUEUE_LABEL] = "team-b"
    elif change == "status":
        obj["status"] = {"conditions": [{"type": "Suspended", "status": "True"}]}
    else:
        obj["metadata"]["labels"]["edited"] = "yes"
    w.client.store.put(f"{JOBS}/a", obj)
    w.see("a")
    if change in ("status", "other label"):  # the write could still apply: says nothing
        assert outcomes == []
        assert w.in_doubt("a") and w.holding("a")
        return
    admitted = change == "admitted"
    assert outcomes == [admitted]
    assert key("a") not in w.tracker.inflight
    assert not w.tracker.unknown
    assert w.holding("a") is admitted
    assert (key("a") in w.tracker.queue) is not admitted


PODS = "/api/v1/namespaces/default/pods"


def _unschedulable_pod(job: str) -> dict[str, Any]:
    """A pod of ``job`` the scheduler tried and found no node for."""
    return {
        "metadata": {
            "name": f"{job}-0",
            "namespace": "default",
            "uid": f"{job}-0",
            "ownerReferences": [{"kind": "Job", "name": job, "controller": True}],
        },
        "spec": {"containers": [{"name": "c"}]},
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/1 nodes are available: 1 Insufficient nvidia.com/gpu.",
                }
            ],
        },
    }


def _displaced(w: World) -> None:
    """'big' is admitted and seen; another pod takes a GPU of the node planned for its pod."""
    w.see("big")
    assert w.tracker.admitted.get(key("big")) is not None
    w.cache.upsert_pod(b.pod("intruder", "n", {GPU: "1"}, uid="intruder"), None)
    w.loop.wake()


@pytest.mark.parametrize("confirmed", [True, False])
async def test_an_unplaceable_job_is_requeued_only_once_its_pods_say_unschedulable(
    confirmed: bool,
) -> None:
    """Owed room by our count for longer than the grace, the job's pods are read: a pod the
    scheduler found no node for confirms it, and the job is suspended (no attempt counted);
    without one (pod not created or not tried yet) it is left running and looked at again."""
    w = World()
    w.loop.cycle.requeue = RequeuePolicy(unplaceable=0.2)
    if confirmed:
        w.client.store.put(f"{PODS}/big-0", _unschedulable_pod("big"))
    async with running(w):
        w.submit("big")
        await wait_until(lambda: w.running("big"))
        _displaced(w)
        await wait_until(lambda: ("LIST", PODS) in w.client.calls)
        if confirmed:
            await wait_until(lambda: not w.running("big"))
            await wait_until(lambda: "Requeued" in w.events.reasons("big"))
        else:
            await anyio.sleep(0.3)
    obj = w.client.store.get(f"{JOBS}/big")
    annotations = obj["metadata"].get("annotations") or {}
    assert "kube-queue.io/requeues" not in annotations, "no attempt is counted"
    if confirmed:
        assert obj["spec"]["suspend"] is True and ADMITTED_AT not in annotations
        why, _, at = annotations[STOPPED].partition(" ")
        assert why == "Unplaceable" and at.endswith("Z"), "the suspension is stamped as ours"
    else:
        assert w.running("big") and "Requeued" not in w.events.reasons("big")
        assert STOPPED not in annotations
    assert key("big") not in w.tracker.victims


# ----------------------------------------------------------------- preemption and requeue writes


def annotations_of(w: World, name: str) -> dict[str, str]:
    return dict(w.client.store.objects[f"{JOBS}/{name}"]["metadata"].get("annotations") or {})


def status_update(w: World, name: str) -> None:
    """The job's controller updates its status: a newer version the tracker has not seen yet,
    so a write guarded by the version it has is refused (409)."""
    path = f"{JOBS}/{name}"
    obj = w.client.store.get(path)
    obj["status"]["active"] = 1
    w.client.store.put(path, obj)


def preempting() -> World:
    """Four GPUs; jobs of the "high" PriorityClass may preempt lower-priority ones."""
    w = World(preemption=PreemptionPolicy(lower_priority=True))
    w.tracker.set_priority_classes({"high": 1000}, 0)
    return w


def requeueing(**policy: Any) -> tuple[World, list[float]]:
    """The cycle's wall clock runs ``skew[0]`` seconds ahead of the admission stamps, so a test
    moves it past a pods-ready deadline (60 s) when it is ready for the requeue."""
    skew = [0.0]
    w = World(
        requeue=RequeuePolicy(**{"timeout": 60, **policy}),
        wall_clock=lambda: time.time() + skew[0],
    )
    return w, skew


async def test_a_preempted_job_admitted_again_no_longer_says_it_was_preempted() -> None:
    w = preempting()
    async with running(w):
        w.submit("low")
        await wait_until(lambda: w.running("low"))
        w.submit("urgent", created="2026-01-01T00:00:01Z", priority_class="high")
        await wait_until(lambda: not w.running("low"))
        assert annotations_of(w, "low")[PREEMPTED_BY] == "Job/default/urgent"
        w.see("low")  # suspended: its (held) capacity is free for urgent
        await wait_until(lambda: w.running("urgent"))
        del w.client.store.objects[f"{JOBS}/urgent"]  # urgent is done
        w.see("urgent")
        await wait_until(lambda: w.running("low"))
    found = annotations_of(w, "low")
    assert ADMITTED_AT in found
    assert PREEMPTED_BY not in found, "removed by the very write that admits it again"
    said = [r for r in w.events.reasons("low") if r != "Queued"]  # Queued while urgent ran
    assert said == ["Admitted", "Preempted", "Admitted"]


@pytest.mark.parametrize("mode", ["conflict", "refuse", "cut", "reject"])
async def test_a_failed_preemption_write_is_sent_again_until_the_victim_stops(mode: str) -> None:
    w = preempting()
    before = transport("preemption"), errors("preemption:InternalError")
    async with running(w):
        w.submit("low")
        await wait_until(lambda: w.running("low"))
        if mode == "conflict":
            status_update(w, "low")
        else:
            w.client.fail["PATCH"] = [mode]  # the next write: the suspension of low
        w.submit("urgent", created="2026-01-01T00:00:01Z", priority_class="high")
        await wait_until(lambda: w.patches("low") == 2)
        if mode == "conflict":
            w.see("low")  # the informer brings the newer version: the retry is guarded by it
        await wait_until(lambda: not w.running("low"))
        await wait_until(lambda: "Preempted" in w.events.reasons("low"))
        w.see("low")
        await wait_until(lambda: w.running("urgent"))
    assert w.patches("low") == 3, "admission, the failed suspension, the one that applied"
    found = annotations_of(w, "low")
    assert found[PREEMPTED_BY] == "Job/default/urgent" and ADMITTED_AT not in found
    assert found[STOPPED].startswith("Preempted ")
    assert w.events.reasons("low")[:2] == ["Admitted", "Preempted"]  # then Queued
    assert key("low") not in w.tracker.victims and not w.tracker.preempting
    transport_errors = 1 if mode in ("refuse", "cut") else 0
    rejected = 1 if mode == "reject" else 0
    assert (transport("preemption"), errors("preemption:InternalError")) == (
        before[0] + transport_errors,
        before[1] + rejected,
    )


@pytest.mark.parametrize("mode", ["conflict", "refuse", "cut", "reject"])
async def test_a_failed_requeue_write_is_sent_again_until_the_job_stops(mode: str) -> None:
    w, skew = requeueing()
    before = transport("requeue")
    async with running(w):
        w.submit("stuck")
        await wait_until(lambda: w.running("stuck"))
        if mode == "conflict":
            status_update(w, "stuck")
        else:
            w.client.fail["PATCH"] = [mode]
        skew[0] = 120  # past its pods-ready deadline, with none of its pods started
        await wait_until(lambda: w.patches("stuck") == 2)
        if mode == "conflict":
            w.see("stuck")
        await wait_until(lambda: "Requeued" in w.events.reasons("stuck"))
    assert w.patches("stuck") == 3
    assert not w.running("stuck")
    found = annotations_of(w, "stuck")
    assert found[REQUEUES] == "1" and REQUEUED_AT in found and ADMITTED_AT not in found
    assert found[STOPPED].startswith("Requeued ")
    assert key("stuck") not in w.tracker.victims
    assert transport("requeue") == before + (1 if mode in ("refuse", "cut") else 0)


async def test_a_give_up_mark_lost_to_a_transport_error_leaves_the_job_requeued() -> None:
    """The last attempt: suspended, then the GaveUp mark's write is cut off. The loop goes on
    (the next job is admitted); the job is suspended with its count, unmarked, and the mark is
    tried again at its next timeout."""
    w, skew = requeueing(limit=1, backoff=3600)

    def cut_the_mark(method: str, path: str) -> None:
        if method == "PATCH" and path.endswith("/stuck") and w.patches("stuck") == 3:
            w.client.fail["PATCH"] = ["cut"]  # admission, suspension, then this: the mark

    w.client.on_call = cut_the_mark
    async with running(w):
        w.submit("stuck")
        await wait_until(lambda: w.running("stuck"))
        skew[0] = 120
        await wait_until(lambda: "Requeued" in w.events.reasons("stuck"))
        assert w.patches("stuck") == 3
        skew[0] = 0  # the next job gets its own minute to start
        w.see("stuck")
        w.submit("next", created="2026-01-01T00:00:01Z")
        await wait_until(lambda: w.running("next"))
    assert not w.running("stuck")
    found = annotations_of(w, "stuck")
    assert found[REQUEUES] == "1" and GAVE_UP not in found
    assert "(attempt 1 of 1)" in w.events.message("stuck", "Requeued")


async def test_pods_that_cannot_be_read_do_not_stop_a_requeue() -> None:
    """The pods are read only to say why; when they cannot be, the job is requeued anyway and
    the Event says they could not be read."""
    w, skew = requeueing()
    async with running(w):
        w.submit("stuck")
        await wait_until(lambda: w.running("stuck"))
        w.client.fail["LIST"] = ["refuse"]
        skew[0] = 120
        await wait_until(lambda: "Requeued" in w.events.reasons("stuck"))
    assert ("LIST", PODS) in w.client.calls
    assert not w.running("stuck")
    assert annotations_of(w, "stuck")[REQUEUES] == "1"
    assert "its pods could not be read" in w.events.message("stuck", "Requeued")


async def test_an_unplaceable_job_whose_pods_cannot_be_read_is_looked_at_again() -> None:
    """Unconfirmed (its pods could not be read): left running, judged again after the grace."""
    w = World()
    w.loop.cycle.requeue = RequeuePolicy(unplaceable=0.2)
    w.client.store.put(f"{PODS}/big-0", _unschedulable_pod("big"))
    async with running(w):
        w.submit("big")
        await wait_until(lambda: w.running("big"))
        w.client.fail["LIST"] = ["refuse"]
        _displaced(w)
        await wait_until(lambda: w.client.calls.count(("LIST", PODS)) == 1)
        assert w.running("big")
        await wait_until(lambda: not w.running("big"))
        await wait_until(lambda: "Requeued" in w.events.reasons("big"))
    assert w.client.calls.count(("LIST", PODS)) == 2
    assert annotations_of(w, "big")[STOPPED].startswith("Unplaceable ")


async def test_a_job_that_cannot_be_requeued_gets_a_not_started_event_once() -> None:
    w, skew = requeueing()
    async with running(w):
        w.submit("kept", annotations={PREEMPTIBLE: "false"})
        await wait_until(lambda: w.running("kept"))
        skew[0] = 120
        await wait_until(lambda: "NotStarted" in w.events.reasons("kept"))
        await anyio.sleep(0.2)  # cycles run meanwhile (the tick is 0.05 s)
    assert w.events.sent.count(("kept", "Warning", "NotStarted")) == 1
    assert w.running("kept") and w.patches("kept") == 1
    assert "kube-queue leaves it running" in w.events.message("kept", "NotStarted")


async def test_the_requeued_event_names_the_timeout_of_the_jobs_queue() -> None:
    """A Queue's podsReadyTimeoutSeconds (30) overrides the flag (60): the Event says 30."""
    w, skew = requeueing()
    w.tracker.set_queues(
        [parse_queue({"metadata": {"name": "default"}, "spec": {"podsReadyTimeoutSeconds": 30}})]
    )
    async with running(w):
        w.submit("stuck")
        await wait_until(lambda: w.running("stuck"))
        skew[0] = 45  # past the queue's deadline, not the flag's
        await wait_until(lambda: "Requeued" in w.events.reasons("stuck"))
    assert w.events.message("stuck", "Requeued").startswith(
        "its pods did not all start within 30s of admission"
    )


# ----------------------------------------------------------------- the topology domain written
RACK = "example.com/rack"
ASKS_RACK = {"kube-queue.io/topology-required": RACK}


def racked(w: World, *racks: tuple[str, str]) -> World:
    """Add 4-GPU nodes (name, rack) to the world."""
    for name, rack in racks:
        w.cache.upsert_node(b.node(name, gpu=4, labels={RACK: rack}))
    return w


@pytest.mark.parametrize("mode", [None, "drop"])
async def test_the_admission_records_the_domain_it_chose_on_the_job(mode: str | None) -> None:
    """The domain the placement chose goes into the Admitted Event and, in the admission write
    itself, onto the job as kube-queue.io/topology-domain; the tracker reads it back (status).
    With the write's answer lost, the observation of the applied write settles it as usual."""
    w = racked(World(gpus=0), ("r1-a", "r1"), ("r2-a", "r2"), ("r2-b", "r2"))
    if mode is not None:
        w.client.fail["PATCH"] = [mode]
    async with running(w):
        w.submit("gang", gpus=4, parallelism=2, annotations=ASKS_RACK)
        await wait_until(lambda: w.running("gang"))
        if mode == "drop":
            w.see("gang")
        await wait_until(lambda: "Admitted" in w.events.reasons("gang"))
    assert annotations_of(w, "gang")[TOPOLOGY_DOMAIN] == f"{RACK}=r2"
    assert w.events.message("gang", "Admitted").startswith(f"capacity reserved in {RACK}=r2 on ")
    w.see("gang")
    assert w.tracker.admitted[key("gang")].domain == f"{RACK}=r2"
    [row] = admitted_rows(w.tracker)
    assert (row["domain"], row["nodes"], row["nodes_text"]) == (
        f"{RACK}=r2",
        ["r2-a", "r2-b"],
        "r2-a, r2-b",
    )


async def test_a_job_placed_in_no_domain_loses_a_domain_left_from_before() -> None:
    """A user suspended a job kube-queue had admitted into a rack: its annotations stay. Its
    next admission (the guard tested the stale domain at its value) removes it."""
    w = racked(World(gpus=4), ("r1-a", "r1"))
    stale = {ADMITTED_AT: "2026-01-01T00:00:00Z", TOPOLOGY_DOMAIN: f"{RACK}=r1"}
    async with running(w):
        w.submit("again", gpus=4, annotations=stale)
        await wait_until(lambda: w.running("again"))
    found = annotations_of(w, "again")
    assert TOPOLOGY_DOMAIN not in found and found[ADMITTED_AT] != stale[ADMITTED_AT]


async def test_a_preempted_job_no_longer_says_where_it_was_placed() -> None:
    """The suspension that removes admitted-at removes the domain too."""
    w = racked(World(gpus=0, preemption=PreemptionPolicy(lower_priority=True)), ("r1-a", "r1"))
    w.tracker.set_priority_classes({"high": 1000}, 0)
    async with running(w):
        w.submit("low", annotations=ASKS_RACK)
        await wait_until(lambda: w.running("low"))
        assert annotations_of(w, "low")[TOPOLOGY_DOMAIN] == f"{RACK}=r1"
        w.submit("urgent", created="2026-01-01T00:00:01Z", priority_class="high")
        await wait_until(lambda: not w.running("low"))
        w.see("low")
        await wait_until(lambda: w.running("urgent"))
    found = annotations_of(w, "low")
    assert ADMITTED_AT not in found and TOPOLOGY_DOMAIN not in found
    assert TOPOLOGY_DOMAIN not in annotations_of(w, "urgent")
