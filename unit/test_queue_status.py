"""The Queue status writer runs every 2 s in the leader's task group: a failed write must cost
one round, never the process (a TransportError escaping it ended the controller), and the
status must be written again by the next round, since it is level-triggered."""

from __future__ import annotations

from typing import Any

import pytest

from kubequeue.kube.queue_status import QUEUE_API, QueueStatusWriter
from kubequeue.observability import metrics
from unit.fakes import FakeClient


def queue(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": f"uid-{name}", "generation": 1}, "status": {}}


def ready_status(pending: int) -> dict[str, Any]:
    return {
        "pending": pending,
        "admitted": 0,
        "used": {},
        "borrowed": {},
        "conditions": [{"type": "Ready", "status": "True", "reason": "Valid", "message": ""}],
    }


@pytest.mark.parametrize("mode", ["refuse", "cut", "drop", "timeout", "reject"])
async def test_a_failed_status_write_costs_one_round_and_the_next_round_writes_it(
    mode: str,
) -> None:
    client = FakeClient()
    for name in ("team-a", "team-b"):
        client.store.put(f"{QUEUE_API}/{name}/status", queue(name))
    observed = {name: queue(name) for name in ("team-a", "team-b")}
    desired = {"team-a": ready_status(3), "team-b": ready_status(1)}
    writer = QueueStatusWriter(client, lambda: desired, lambda: observed)
    before = metrics.TRANSPORT_ERRORS.labels("queue_status")._value.get()
    client.fail["PATCH"] = [mode]
    written = await writer.write_once()  # the first write fails; the other queue is written
    assert written == 1
    transport = mode in ("refuse", "cut", "drop")
    after = metrics.TRANSPORT_ERRORS.labels("queue_status")._value.get()
    assert after - before == (1 if transport else 0)
    assert await writer.write_once() == 2  # nothing observed changed: both are written again
    stored = client.store.get(f"{QUEUE_API}/team-a/status")
    assert stored["status"]["pending"] == 3
    assert stored["status"]["conditions"][0]["observedGeneration"] == 1


async def test_a_status_already_as_wanted_is_not_written() -> None:
    client = FakeClient()
    obj = queue("team-a")
    client.store.put(f"{QUEUE_API}/team-a/status", obj)
    desired = {"team-a": ready_status(0)}
    observed = {"team-a": obj}
    writer = QueueStatusWriter(client, lambda: desired, lambda: observed)
    assert await writer.write_once() == 1
    observed["team-a"] = client.store.get(f"{QUEUE_API}/team-a/status")
    assert await writer.write_once() == 0
    assert [c for c in client.calls if c[0] == "PATCH"] == [("PATCH", f"{QUEUE_API}/team-a/status")]


class Emitted:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def emit(self, obj: Any, type_: str, reason: str, message: str) -> None:
        self.events.append((type_, reason, message))


def ready(status: str, reason: str, message: str) -> dict[str, Any]:
    return {**ready_status(0), "conditions": [
        {"type": "Ready", "status": status, "reason": reason, "message": message}]}


async def test_a_queue_problem_is_warned_once_per_problem_and_again_after_it_was_fixed() -> None:
    client = FakeClient()
    obj = queue("team-a")
    client.store.put(f"{QUEUE_API}/team-a/status", obj)
    desired: dict[str, dict[str, Any]] = {}
    events = Emitted()
    writer = QueueStatusWriter(client, lambda: desired, lambda: {"team-a": obj},
                               events)  # type: ignore[arg-type]
    loop = ready("False", "InvalidSpec", "the parent chain loops (a -> b -> a)")
    for status in (loop, loop, ready("True", "Ready", "the queue admits jobs"), loop):
        desired["team-a"] = status
        await writer.write_once()
    assert [e[1] for e in events.events] == ["InvalidSpec", "InvalidSpec"]
    assert events.events[0][2] == (
        "queue team-a takes no jobs until fixed: the parent chain loops (a -> b -> a)")
    ignored = ready("True", "SpecIgnored", "the queue admits jobs, but its namespaceSelector "
                    "is ignored: a queue with children holds no jobs")
    desired["team-a"] = ignored
    await writer.write_once()
    await writer.write_once()
    assert events.events[-1][:2] == ("Warning", "SpecIgnored")
    assert events.events[-1][2].startswith("queue team-a: the queue admits jobs, but")
    assert len(events.events) == 3
