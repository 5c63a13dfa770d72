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


def _queued(line: str, name: str, second: int, demand: dict[str, int] | None = None) -> QueuedJob:
    return QueuedJob(
        key=("Job", line, name),
        uid=f"{line}-{name}",
        resource_version="1",
        priority=0,
        created=f"2026-01-01T00:00:{second:02d}Z",
        queue=line,
        _demand=demand,
    )


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
            job = _queued(line, f"j{k}", second)
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


# ------------------------------------------------ claims per head (issue 30, item 2)
GPU = "nvidia.com/gpu"


class _Rooms(_Claims):
    """A fixed share and guarantee room per line: a head asking more GPUs than its line's room
    would borrow."""

    def __init__(self, shares: dict[str, float], rooms: dict[str, int]) -> None:
        super().__init__(shares)
        self._rooms = rooms

    def guarantee_room(self, line: str) -> tuple[tuple[str, int], ...]:
        return ((GPU, self._rooms[line]),)


heads_st = st.lists(  # per job: (second created, gpus, parked)
    st.tuples(st.integers(0, 59), st.integers(0, 4), st.booleans()), min_size=1, max_size=10
)


def _lines_with_rooms(
    spec: list[tuple[list[tuple[int, int, bool]], float, int]],
) -> tuple[JobQueue, dict[str, float], dict[str, int]]:
    """Line q<i> of ``spec[i]`` = (its jobs (second created, gpus, parked), share, room in
    GPUs): the queue, and each line's share and room."""
    queue = JobQueue()
    queue.classify_by([GPU])
    shares: dict[str, float] = {}
    rooms: dict[str, int] = {}
    for i, (jobs, share, room) in enumerate(spec):
        line = f"q{i}"
        shares[line], rooms[line] = share, room * 1000
        for k, (second, gpus, parked) in enumerate(jobs):
            job = _queued(line, f"j{k}", second, {GPU: gpus * 1000} if gpus else {})
            queue.upsert(job)
            if parked:
                queue.park(job, Parked())
    return queue, shares, rooms


def _head_claim(
    entry: tuple[Any, ...], shares: dict[str, float], rooms: dict[str, int]
) -> tuple[Any, ...]:
    """The brute force's claim of a head: would it borrow, its line's share, its order."""
    job = entry[-1]
    need = job.demand.get(GPU, 0)
    return (bool(need) and need > rooms[job.queue], shares[job.queue], entry[:-1])


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(heads_st, st.sampled_from([0.0, 0.0, 0.5]), st.integers(-1, 4)),
        min_size=2,
        max_size=4,
    )
)
def test_the_line_whose_head_has_the_best_claim_goes_next_parked_heads_included(
    spec: list[tuple[list[tuple[int, int, bool]], float, int]],
) -> None:
    """docs/queues.md, "Who goes first": the head (first job not gone through, parked or not)
    that stays within its queue's guarantee goes before a head that would borrow, then smaller
    shares, then the head's own order. Parked jobs are not visited, but where they head their
    line they decide its claim, exactly as if the walk visited them (a brute force over every
    entry, picking the best head each step, is the reference)."""
    queue, shares, rooms = _lines_with_rooms(spec)
    lines = queue.lines()

    # The brute force: which entries each line has gone through when each job is visited.
    heads = {line: queue.entries(line) for line in lines}
    expected = []
    passed: list[set[int]] = []
    gone: set[int] = set()
    while any(heads.values()):
        best = min(
            (entries[0] for entries in heads.values() if entries),
            key=lambda e: _head_claim(e, shares, rooms),
        )
        heads[best[-1].queue].pop(0)
        gone.add(id(best))
        if best[-1].park is None:
            expected.append(best[-1].key)
            passed.append(set(gone))
    walk = Walk(queue, lines, _Rooms(shares, rooms))  # type: ignore[arg-type]
    visited = []
    for job in walk:
        visited.append(job.key)
        if len(visited) > len(passed):
            break
        # Parking asks the walk how far each line has gone: what the brute force went through
        # up to this visit, and nothing beyond it (nothing passed that it would still visit).
        went = passed[len(visited) - 1]
        for line in lines:
            position = walk.position(line)
            for entry in queue.entries(line):
                through = position is END or (position is not None and entry <= position)
                assert through == (id(entry) in went), (line, entry[:-1], position)
    assert visited == expected


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(heads_st, st.sampled_from([0.0, 0.0, 0.5]), st.integers(-1, 6)),
        min_size=2,
        max_size=4,
    ),
    st.sets(st.integers(0, 40), max_size=8),
)
def test_claims_follow_admissions_in_the_middle_of_the_walk(
    spec: list[tuple[list[tuple[int, int, bool]], float, int]], admit_at: set[int]
) -> None:
    """Admitting a visited job takes its demand out of its line's guarantee room (the ledger
    moves): from there every head is judged against the new rooms, as the brute force does."""
    queue, shares, rooms = _lines_with_rooms(spec)
    lines = queue.lines()
    start = dict(rooms)
    ledger = _Rooms(shares, rooms)
    walk = Walk(queue, lines, ledger)  # type: ignore[arg-type]
    visited = []
    for job in walk:
        visited.append(job.key)
        if len(visited) in admit_at:
            rooms[job.queue] -= job.demand.get(GPU, 0)
            walk.admitted()

    rooms.update(start)
    heads = {line: queue.entries(line) for line in lines}
    expected = []
    while any(heads.values()):
        best = min(
            (entries[0] for entries in heads.values() if entries),
            key=lambda e: _head_claim(e, shares, rooms),
        )
        heads[best[-1].queue].pop(0)
        if best[-1].park is None:
            expected.append(best[-1].key)
            if len(expected) in admit_at:
                rooms[best[-1].queue] -= best[-1].demand.get(GPU, 0)
    assert visited == expected


def test_a_head_within_its_queue_s_guarantee_goes_before_an_older_head_that_would_borrow() -> None:
    """The issue's case: team-a used 6 of its min 8 and its older head needs 4 (it would
    borrow); team-b used 4 of its 8 and its head needs 2. Both queues have guarantee left and
    equal shares, so the per-queue claim sent team-a's head first; per head, team-b's goes.
    And a head asking only CPU (which its path does not limit) from a queue at its GPU min
    does not borrow: it goes before a head that really borrows."""
    from kubequeue.queueing.quota import QuotaLedger
    from kubequeue.queueing.spec import parse_queue
    from kubequeue.queueing.tree import QueueTree

    def spec(name: str, **kw: Any) -> Any:
        return parse_queue({"metadata": {"name": name}, "spec": kw})

    ledger = QuotaLedger(
        QueueTree(
            [
                spec("research"),
                spec("team-a", parent="research", quota={"min": {GPU: 8}}),
                spec("team-b", parent="research", quota={"min": {GPU: 8}}),
                spec("team-c", parent="research", quota={"min": {GPU: 2}}),
            ]
        )
    )
    ledger.charge(("Job", "a", "run"), "team-a", {GPU: 6000})
    ledger.charge(("Job", "b", "run"), "team-b", {GPU: 4000})
    ledger.charge(("Job", "c", "run"), "team-c", {GPU: 2000})
    queue = JobQueue()
    queue.classify_by([GPU])
    for line, name, second, demand in (
        ("team-a", "a-head", 1, {GPU: 4000}),
        ("team-b", "b-head", 2, {GPU: 2000}),
        ("team-c", "c-cpu", 3, {"cpu": 4000}),
        ("team-c", "c-gpu", 4, {GPU: 1000}),
    ):
        queue.upsert(_queued(line, name, second, demand))
    order = [job.key[2] for job in Walk(queue, queue.lines(), ledger)]
    # team-c's CPU head is within (cpu is not limited), ahead of every borrowing head; then
    # b-head (within); then the borrowers by share (equal: 0) and age.
    assert order == ["b-head", "c-cpu", "a-head", "c-gpu"]


def test_lines_keep_how_far_their_claim_took_them_when_another_claim_is_walked() -> None:
    """q1's parked head (borrowing, oldest) and q0's parked head (borrowing) are passed before
    q0's next job, which is within guarantee, becomes q0's head and is visited. Parking asks
    then whether the walk has passed q1's head (to put it back only if not): it has, although
    the claim walked now is another one (a version of the heap walk forgot that)."""
    queue = JobQueue()
    queue.classify_by([GPU])
    jobs = {}
    for line, name, second, gpus, parked in (
        ("q1", "p1", 0, 2, True),
        ("q0", "p0", 1, 2, True),
        ("q0", "a1", 2, 0, False),
    ):
        job = _queued(line, name, second, {GPU: gpus * 1000} if gpus else {})
        queue.upsert(job)
        if parked:
            queue.park(job, Parked())
        jobs[name] = job
    walk = Walk(queue, ["q0", "q1"], _Rooms({"q0": 0.0, "q1": 0.0}, {"q0": 0, "q1": 0}))  # type: ignore[arg-type]
    seen = []
    for job in walk:
        seen.append(job.key[2])
        entry = queue.entry(jobs["p1"])
        position = walk.position("q1")
        assert entry is not None
        assert position is END or (position is not None and entry <= position), position
    assert seen == ["a1"]
