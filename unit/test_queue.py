from hypothesis import given, settings
from hypothesis import strategies as st

from kubequeue.queueing.queue import JobQueue, QueuedJob


def qj(
    name: str,
    priority: int = 0,
    created: str = "2026-01-01T00:00:00Z",
    namespace: str = "ns",
    kind: str = "Job",
) -> QueuedJob:
    return QueuedJob(
        key=(kind, namespace, name),
        uid=name,
        resource_version="1",
        priority=priority,
        created=created,
    )


def names(q: JobQueue) -> list[str]:
    return [j.key[2] for j in q.ordered()]


def test_priority_then_age_then_name() -> None:
    q = JobQueue()
    q.upsert(qj("old-low", 0, "2026-01-01T00:00:00Z"))
    q.upsert(qj("new-high", 100, "2026-01-02T00:00:00Z"))
    q.upsert(qj("b-same", 0, "2026-01-01T00:00:01Z"))
    q.upsert(qj("a-same", 0, "2026-01-01T00:00:01Z"))
    assert names(q) == ["new-high", "old-low", "a-same", "b-same"]
    assert q.position(("Job", "ns", "old-low")) == 1


def test_upsert_moves_a_job_when_its_priority_changes() -> None:
    q = JobQueue()
    q.upsert(qj("a", 0))
    q.upsert(qj("b", 0, "2026-01-01T00:00:01Z"))
    q.upsert(qj("b", 10, "2026-01-01T00:00:01Z"))
    assert names(q) == ["b", "a"]
    assert len(q) == 2


def test_remove_and_depth_by_kind() -> None:
    q = JobQueue()
    q.upsert(qj("a"))
    q.upsert(qj("r", kind="RayJob"))
    assert q.depth_by_kind() == {"Job": 1, "RayJob": 1}
    assert q.remove(("Job", "ns", "a")) is not None
    assert q.remove(("Job", "ns", "a")) is None
    assert names(q) == ["r"]


ops = st.lists(
    st.tuples(
        st.sampled_from(["up", "rm"]), st.integers(0, 15), st.integers(-3, 3), st.integers(0, 5)
    ),
    max_size=80,
)


@settings(max_examples=200, deadline=None)
@given(ops=ops)
def test_matches_a_sorted_reference_under_any_operations(ops) -> None:
    q = JobQueue()
    ref: dict[str, tuple[int, str]] = {}
    for op, n, prio, t in ops:
        name = f"j{n:02d}"
        if op == "up":
            created = f"2026-01-01T00:00:0{t}Z"
            q.upsert(qj(name, prio, created))
            ref[name] = (prio, created)
        else:
            q.remove(("Job", "ns", name))
            ref.pop(name, None)
    expected = sorted(ref, key=lambda k: (-ref[k][0], ref[k][1], k))
    assert names(q) == expected
    assert len(q) == len(ref)
