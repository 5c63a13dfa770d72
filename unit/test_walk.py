"""The multi-queue walk (admission/walk.py) visits what a walk with every entry present would,
in the same order, when parking leaves entries out and puts some back in the middle of it."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kubequeue.admission.parking import END
from kubequeue.admission.walk import Walk
from kubequeue.queueing.queue import JobQueue, Parked, QueuedJob


class _Claims:
    """What Walk asks of the ledger, with a fixed claim per line (no job is admitted here)."""

    def __init__(self, shares: dict[str, float]) -> None:
        self._shares = shares

    def guarantee_room(self, line: str) -> tuple[tuple[str, int], ...]:
        return ()

    def shares(self, line: str) -> tuple[float, ...]:
        return (self._shares[line],)


line_st = st.lists(  # per job: (second created, parked, when to put it back, or None)
    st.tuples(st.integers(0, 59), st.booleans(), st.none() | st.integers(0, 40)),
    min_size=1,
    max_size=12,
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(line_st, st.sampled_from([0.0, 0.0, 0.5])), min_size=2, max_size=4),
    st.randoms(use_true_random=False),
)
def test_entries_put_back_are_visited_in_order(
    spec: list[tuple[list[tuple[int, bool, int | None]], float]], rnd: Any
) -> None:
    """Lines of equal claims are merged by their jobs' order; an entry put back into any line of
    the group being merged (its own, or another, whose next entry the merge has read already)
    is visited in its place, as if it had been there all along."""
    queue = JobQueue()
    shares: dict[str, float] = {}
    back: dict[int, list[QueuedJob]] = {}  # visit number -> parked jobs put back after it
    for i, (jobs, share) in enumerate(spec):
        line = f"q{i}"
        shares[line] = share
        for k, (second, parked, when) in enumerate(jobs):
            job = QueuedJob(
                key=("Job", line, f"j{k}"),
                uid=f"{line}-{k}",
                resource_version="1",
                priority=0,
                created=f"2026-01-01T00:00:{second:02d}Z",
                queue=line,
            )
            queue.upsert(job)
            if parked:
                queue.park(job, Parked())
                if when is not None:
                    back.setdefault(when, []).append(job)
    lines = queue.lines()
    walk = Walk(queue, lines, _Claims(shares))  # type: ignore[arg-type]
    visited: list[QueuedJob] = []
    put_back: list[QueuedJob] = []
    for job in walk:
        visited.append(job)
        pending = back.pop(len(visited), [])
        rnd.shuffle(pending)
        for other in pending:
            entry = queue.entry(other)
            assert entry is not None
            position = walk.position(other.queue)
            if position is END or (position is not None and entry <= position):
                continue  # the walk has passed it (parking puts back only what it has not)
            queue.unpark(other)
            walk.insert(other.queue, entry)
            put_back.append(other)
    # With every entry present: by claim, then each claim's lines merged by their jobs' order.
    expected = [
        entry[-1]
        for entry in sorted(
            (entry for line in lines for entry in queue.entries(line)),
            key=lambda entry: (shares[entry[-1].queue], entry[:-1]),
        )
        if entry[-1].park is None
    ]
    assert [job.key for job in visited] == [job.key for job in expected]
