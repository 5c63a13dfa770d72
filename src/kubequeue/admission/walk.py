"""The order a cycle visits queued jobs in: one line, or several queues' lines by their claim.

With one line (no Queue objects, or a single queue) the walk is that line's order (priority,
age, name). With several, the queue with the best claim goes next, by the fair-sharing rules of
docs/queues.md. Either walk reports how far each line has been gone through, so that parking
(admission/parking.py) knows which parked jobs the walk has not reached yet, and takes entries
that parking wakes in the middle of the walk.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from kubequeue.admission.parking import END, Position
from kubequeue.queueing.queue import JobQueue, QueuedJob
from kubequeue.queueing.quota import QuotaLedger

__all__ = ["OneLine", "Walk"]


class OneLine:
    """The queued jobs of the only line, in order (entries of jobs parking wakes in the middle
    of the walk are inserted after the position)."""

    def __init__(self, queue: JobQueue, line: str) -> None:
        self._line = line
        self._entries = queue.active(line)
        self._last: Position = None

    def __iter__(self) -> Iterator[QueuedJob]:
        # A list iterator reads by index, so entries inserted after the current one are seen.
        for entry in self._entries:
            self._last = entry
            yield entry[-1]
        self._last = END

    def position(self, line: str) -> Position:
        return self._last

    def insert(self, line: str, entry: tuple[Any, ...]) -> None:
        bisect.insort(self._entries, entry)  # after the position: the entry is beyond it

    def admitted(self) -> None:
        pass


class Walk:
    """The queued jobs of several queues, one at a time, the best claim first.

    Each queue's line is walked in its own order (priority, age). Which line goes next is
    decided by the claim of its head (its first entry not gone through, parked or not): a head
    that stays within guarantee before one that would borrow (QuotaLedger.guarantee_room), then
    the smaller weighted dominant shares along the queue's path (hierarchical DRF,
    QuotaLedger.shares). Lines with equal claims are merged by their jobs' priority and age (a
    C-level k-way merge), each up to its *marker*: its first entry further on whose head would
    claim otherwise (found through the queue's demand classes, not by reading the line); once
    a line has gone through the entry before it, the lines are grouped again. Claims also move
    when a job is admitted; then the rest of the lines are grouped again from where each one
    stopped (when parking puts an entry back into a line of the group being merged, the group
    is only merged again from there: no claim moved).

    Parked jobs (admission/parking.py) are not visited, but the walk goes through the lines as
    if they were there: a line has a turn while it has entries left, parked or not, and a line
    in the group being merged has gone as far as the entry last visited. So lines take their
    turns exactly as with every job visited, and parking knows which parked jobs a line has not
    reached yet (``position``).
    """

    def __init__(self, queue: JobQueue, lines: Sequence[str], ledger: QuotaLedger) -> None:
        self._ledger = ledger
        self._queue = queue
        # Each line's claim, and what it is made of until the next admission: the guarantee
        # room its jobs are judged against and its shares. ``_stale``: the lines whose claim
        # must be made again (None: every line's, after an admission).
        self._claims: dict[str, tuple[bool, tuple[float, ...]]] = {}
        self._rooms: dict[str, dict[str, int]] = {}
        self._shares: dict[str, tuple[float, ...]] = {}
        self._stale: set[str] | None = None
        # Per line, its demand classes sorted by the answer they give (``_Classes``), and, for
        # the lines of the group being merged, the first entry further on (parked or not) whose
        # head would claim otherwise, or None: the merge stops just before it.
        self._classes: dict[str, _Classes] = {}
        self._markers: dict[str, tuple[Any, ...] | None] = {}
        # Snapshots of each line's unparked entries ((*order key, job)); the cycle removes jobs
        # from the queue while it walks. And each line's last entry, parked or not.
        self._lines = {line: queue.active(line) for line in lines}
        self._ends = {line: queue.last(line) for line in lines}
        self._pos = dict.fromkeys(lines, 0)  # next unvisited index in the snapshot
        self._at: dict[str, Position] = dict.fromkeys(lines)  # gone through up to here
        self._group: list[str] = []
        self._current: tuple[Any, ...] | None = None  # last entry of the group being merged
        self._blocked: set[str] = set()
        self._regroup = False  # claims may have moved, or a line is blocked: group again
        self._remerge = False  # an entry went into a line the merge has read ahead in

    def _claim(self, line: str) -> tuple[bool, tuple[float, ...]]:
        """The claim of a line's head (its first entry not gone through, parked or not): whether
        it would borrow, then its queue's shares."""
        if not line:
            return False, (0.0,)
        room = self._rooms.get(line)
        if room is None:
            room = self._rooms[line] = dict(self._ledger.guarantee_room(line))
            self._shares[line] = self._ledger.shares(line)
        head = self._queue.after(line, self._at[line])
        return (
            head is not None and bool(room) and _borrows(head[-1].demand, room),
            self._shares[line],
        )

    def _marker(self, line: str, borrows: bool) -> tuple[Any, ...] | None:
        """The line's first entry after its position whose head would answer otherwise."""
        room = self._rooms.get(line)
        if not line or not room:
            return None
        classes = self._classes.get(line)
        if classes is None or classes.room != room:
            classes = self._classes[line] = _Classes(self._queue, line, room)
        return classes.first(not borrows, self._at[line])

    def _left(self, line: str) -> bool:
        """Entries left in the line, parked or not."""
        at = self._at[line]
        end = self._ends[line]
        return end is not None and (at is None or (at is not END and at < end))  # type: ignore[operator]

    def __iter__(self) -> Iterator[QueuedJob]:
        lines, pos, at = self._lines, self._pos, self._at
        group: list[str] | None = None
        while True:
            if group is None:
                active = [line for line in lines if line not in self._blocked and self._left(line)]
                if not active:
                    return
                claims = self._claims
                stale = self._stale
                for line in active if stale is None else [x for x in active if x in stale]:
                    claims[line] = self._claim(line)
                self._stale = set()
                best = min(claims[line] for line in active)
                group = [line for line in active if claims[line] == best]
                self._markers = {line: self._marker(line, best[0]) for line in group}
            self._regroup = self._remerge = False
            self._group = group
            self._current = None
            markers = self._markers
            streams = [self._stream(line, markers.get(line)) for line in group]
            stopping: dict[int, str] = {}
            stops = []
            for line in group:
                marker = markers.get(line)
                last = self._queue.before(line, marker) if marker is not None else None
                if last is not None:
                    stop = (*last[:-1], _TOP)
                    stopping[id(stop)] = line
                    stops.append(stop)
            if stops:
                stops.sort()
                # Once a line has gone through the entry before its marker (parked or not),
                # its head claims otherwise: the merge stops just after that entry and the
                # lines are grouped again, each having gone through every entry up to it.
                streams.append(iter(stops))
            merged: Iterator[tuple[Any, ...]] = (
                streams[0] if len(streams) == 1 else heapq.merge(*streams)
            )
            entry: tuple[Any, ...] | None = None
            for entry in merged:
                if entry[-1] is _TOP:
                    for line in group:
                        self._at[line] = _later(self.position(line), entry)
                    self._current = None
                    self._regroup = True
                    assert self._stale is not None
                    self._stale.add(stopping[id(entry)])  # only its head's answer changed
                    break
                job: QueuedJob = entry[-1]
                pos[job.queue] += 1
                self._current = entry
                yield job
                if self._regroup or self._remerge:
                    break
            else:
                # This claim's lines are done, parked entries included.
                for line in group:
                    at[line] = END
                self._group = []
                group = None
                continue
            if self._current is not None:
                for line in group:
                    self._at[line] = self.position(line)
            self._group = []
            if self._regroup:
                # An admission (claims moved) or a blocked line: group again.
                group = None
            # Otherwise a job put back into a line of the group: the same lines merged again
            # from where each one stopped (no claim moved, so grouping again would give the
            # same lines, less those gone through to their end, which add nothing).

    def _stream(self, line: str, marker: tuple[Any, ...] | None) -> Iterator[tuple[Any, ...]]:
        """A line's unvisited entries from where it stopped, up to its marker (excluded). A
        list is read by index, so entries put into it after the position are seen."""
        entries = itertools.islice(self._lines[line], self._pos[line], None)
        if marker is None:
            return entries
        return itertools.takewhile(marker.__gt__, entries)

    def position(self, line: str) -> Position:
        at = self._at.get(line)
        current = self._current
        if at is END or current is None or line not in self._group:
            return at
        return current if at is None or current > at else at  # type: ignore[operator]

    def insert(self, line: str, entry: tuple[Any, ...]) -> None:
        bisect.insort(self._lines[line], entry, lo=self._pos[line])
        group = self._group
        if len(group) > 1 and line in group:
            # The merge has read ahead in this line: merge again from where each line stopped
            # (claims did not move). A line walked alone reads its list by index, so it sees
            # the entry (it is beyond the position); a line outside the group takes it up when
            # its turn comes.
            self._remerge = True

    def admitted(self) -> None:
        """Usage changed: every line's claim is judged again."""
        self._regroup = True
        self._stale = None
        self._rooms.clear()

    def block(self, line: str) -> None:
        """The rest of this line waits for the next cycle."""
        self._blocked.add(line)
        self._regroup = True


class _Classes:
    """A line's demand classes (JobQueue.classes) split by whether a head of the class would
    borrow with the line's guarantee room as it is, each side a heap of every class's next
    entry: the first entry after a position whose head answers otherwise is a heap's top
    (classes passed are moved on lazily; the walk's positions only go forward)."""

    def __init__(self, queue: JobQueue, line: str, room: Mapping[str, int]) -> None:
        self.room = dict(room)
        names = queue.class_resources
        index = [(i, room[res]) for i, res in enumerate(names) if res in room]
        self._lists = queue.classes(line)
        self._heaps: tuple[list[Any], list[Any]] = ([], [])
        for signature, entries in self._lists.items():
            if entries:
                borrows = any(signature[i] > 0 and signature[i] > left for i, left in index)
                self._heaps[borrows].append((entries[0], signature))
        for heap in self._heaps:
            heapq.heapify(heap)

    def first(self, borrows: bool, position: Position) -> tuple[Any, ...] | None:
        """The first entry after ``position`` of the classes that answer ``borrows``."""
        heap = self._heaps[borrows]
        while heap and position is not None and heap[0][0] <= position:
            _, signature = heapq.heappop(heap)
            entries = self._lists.get(signature)
            if entries:
                found = entries.bisect_right(position)
                if found < len(entries):
                    heapq.heappush(heap, (entries[found], signature))
        return heap[0][0] if heap else None


def _borrows(demand: Mapping[str, int], room: Mapping[str, int]) -> bool:
    """Whether a job asking ``demand`` would go beyond the guarantee left to it (``room``, per
    resource its queue's tree pools and its path names: QuotaLedger.guarantee_room)."""
    for res, left in room.items():
        need = demand.get(res, 0)
        if need and need > left:
            return True
    return False


class _Top:
    """Sorts after any job: ``(*key, _TOP)`` comes right after the entry of that key."""

    def __lt__(self, other: object) -> bool:
        return False

    def __le__(self, other: object) -> bool:
        return other is self

    def __gt__(self, other: object) -> bool:
        return other is not self

    def __ge__(self, other: object) -> bool:
        return True


_TOP = _Top()


def _later(at: Position, key: tuple[Any, ...]) -> Position:
    """The further of a line's position and ``key``: ``(*an entry's key, _TOP)``, which sorts
    right after that entry and before the next (the walk has gone through the entry)."""
    if at is END:
        return at
    return key if at is None or at < key else at  # type: ignore[operator]
