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
    QuotaLedger.shares), then the head's own order (priority, age).

    The lines sit in a heap by (claim, next event). A line's events are its unparked entries
    (visited), its *marker* event, right after the entry before its first entry further on
    whose head would claim otherwise (found through the queue's demand classes, not by reading
    the line: there its claim is made again and it goes back into the heap), and, once it has
    neither, its end. Lines of one claim thus take their events in their jobs' order, so each
    has gone through every entry (parked or not) up to the event last taken, exactly as a walk
    visiting every entry would. When a job is admitted usage moves and every claim is made
    again.

    Parked jobs (admission/parking.py) are not visited, but the walk goes through the lines as
    if they were there: a line has a turn while it has entries left, parked or not, and a line
    of the claim being walked has gone as far as the event last taken. So lines take their
    turns exactly as with every job visited, and parking knows which parked jobs a line has not
    reached yet (``position``).
    """

    def __init__(self, queue: JobQueue, lines: Sequence[str], ledger: QuotaLedger) -> None:
        self._ledger = ledger
        self._queue = queue
        # Each line's claim, and what it is made of until the next admission: the guarantee
        # room its jobs are judged against and its shares.
        self._claims: dict[str, tuple[bool, tuple[float, ...]]] = {}
        self._rooms: dict[str, dict[str, int]] = {}
        self._shares: dict[str, tuple[float, ...]] = {}
        # Per line, its demand classes sorted by the answer they give (``_Classes``), and its
        # first entry further on (parked or not) whose head would claim otherwise, or None.
        self._classes: dict[str, _Classes] = {}
        self._markers: dict[str, tuple[Any, ...] | None] = {}
        # Snapshots of each line's unparked entries ((*order key, job)); the cycle removes jobs
        # from the queue while it walks. And each line's last entry, parked or not.
        self._lines = {line: queue.active(line) for line in lines}
        self._ends = {line: queue.last(line) for line in lines}
        self._pos = dict.fromkeys(lines, 0)  # next unvisited index in the snapshot
        self._at: dict[str, Position] = dict.fromkeys(lines)  # gone through up to here
        # (claim, next event, version, line); an item whose version is not the line's is stale.
        self._heap: list[tuple[Any, ...]] = []
        self._version = dict.fromkeys(lines, 0)
        self._current: tuple[Any, ...] | None = None  # the event last taken
        self._current_claim: tuple[bool, tuple[float, ...]] | None = None
        # How far each claim's walk went each time another claim took over: (tick, event)
        # per claim; a line has gone as far as the entries of its claim's log since it joined
        # that claim (``_since``), read lazily (``_fold``) rather than written to every line
        # of the claim at each change (the claims change at every marker).
        self._tick = 0
        self._log: dict[tuple[bool, tuple[float, ...]], list[tuple[int, tuple[Any, ...]]]] = {}
        self._since = dict.fromkeys(lines, 0)
        self._blocked: set[str] = set()
        # Per line, its head as last found (``_claim``): (the position it was found after, the
        # line's edit stamp then, the head). Every line's claim is made again after each
        # admission, but only the admitted job's line changed, and only lines walked moved.
        self._heads: dict[str, tuple[Position, int, tuple[Any, ...] | None]] = {}
        self._rejudge = True  # every claim is to be made again (start, admission)

    def _claim(self, line: str) -> tuple[bool, tuple[float, ...]]:
        """The claim of a line's head (its first entry not gone through, parked or not): whether
        it would borrow, then its queue's shares."""
        if not line:
            return False, (0.0,)
        room = self._rooms.get(line)
        if room is None:
            room = self._rooms[line] = dict(self._ledger.guarantee_room(line))
            self._shares[line] = self._ledger.shares(line)
        at = self._at[line]
        edited = self._queue.edited(line)
        known = self._heads.get(line)
        if known is not None and known[0] is at and known[1] == edited:
            head = known[2]
        else:
            head = self._queue.after(line, at)
            self._heads[line] = (at, edited, head)
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

    def _judge(self, line: str, claim: tuple[bool, tuple[float, ...]] | None = None) -> None:
        """Make the line's claim (``claim`` if it is known) and marker again: its head changed,
        or usage moved. The line joins that claim from here on."""
        self._fold(line)
        self._since[line] = self._tick
        claim = self._claims[line] = claim if claim is not None else self._claim(line)
        self._markers[line] = self._marker(line, claim[0])

    def _push(self, line: str) -> None:
        """Put the line into the heap at its next event: its next unvisited entry before its
        marker, else the marker event (right after the entry before the marker), else its
        end."""
        entries = self._lines[line]
        index = self._pos[line]
        marker = self._markers.get(line)
        event: tuple[Any, ...]
        if index < len(entries) and (marker is None or entries[index] < marker):
            event = entries[index]
        elif marker is not None and (last := self._queue.before(line, marker)) is not None:
            event = (*last[:-1], _TOP)
        else:
            event = _LAST
        version = self._version[line] = self._version[line] + 1
        heapq.heappush(self._heap, (self._claims[line], event, version, line))

    def _rebuild(self) -> None:
        self._heap = []
        for line in self._lines:
            self._fold(line)
        self._log.clear()  # every line joins its claim anew
        for line in self._lines:
            if line not in self._blocked and self._left(line):
                self._judge(line)
                self._push(line)
        self._rejudge = False

    def _left(self, line: str) -> bool:
        """Entries left in the line, parked or not."""
        at = self._at[line]
        end = self._ends[line]
        return end is not None and (at is None or (at is not END and at < end))  # type: ignore[operator]

    def __iter__(self) -> Iterator[QueuedJob]:
        heap, version, at = self._heap, self._version, self._at
        while True:
            if self._rejudge:
                self._settle()
                self._rebuild()
                heap = self._heap
            if not heap:
                return
            claim, event, ver, line = heapq.heappop(heap)
            if ver != version[line] or line in self._blocked:
                continue
            self._tick += 1
            if claim != self._current_claim:
                self._settle()
            if event is _LAST:
                # Gone through: every other line of this claim has gone as far.
                self._current, self._current_claim = event, claim
                self._fold(line)
                at[line] = END
                continue
            self._current, self._current_claim = event, claim
            if event[-1] is _TOP:
                at[line] = _later(self._fold(line), event)
                marker = self._markers[line]
                if marker is not None and self._queue.entry(marker[-1]) is marker:
                    # The line's head is its marker now, which answers otherwise: its claim
                    # flips. (A marker that left the queue meanwhile: judged from the head.)
                    if claim[0] and self._pass_run(line, marker):
                        self._push(line)
                        continue
                    self._judge(line, (not claim[0], claim[1]))
                else:
                    self._judge(line)
                self._push(line)
                continue
            at[line] = _later(self._fold(line), event)
            self._pos[line] += 1
            yield event[-1]
            if not self._rejudge and line not in self._blocked:
                self._push(line)

    def _pass_run(self, line: str, marker: tuple[Any, ...]) -> bool:
        """A borrowing line whose head, ``marker``, would not borrow: if every job of that run
        (up to the next head that would borrow) is parked, the line goes through the run at
        once and keeps its claim. That is what the flip would do: the run's claim is better
        than every claim left (the walk is at this borrowing line's), so the line would be
        walked alone through the run, visiting nothing, and flip back; nobody else moves
        meanwhile. Saves the two flips (a parked run of jobs within guarantee in a line at its
        min: its CPU-only jobs, say). False (nothing done) if the run has a job to visit or
        goes to the line's end."""
        classes = self._classes.get(line)
        if classes is None:
            return False
        end = classes.first(True, marker)
        if end is None:
            return False
        entries = self._lines[line]
        index = self._pos[line]
        if index < len(entries) and entries[index] < end:
            return False  # a job of the run is visited
        last = self._queue.before(line, end)
        if last is None:
            return False
        self._at[line] = _later(self._at[line], (*last[:-1], _TOP))
        self._markers[line] = classes.first(False, self._at[line])
        return True

    def _settle(self) -> None:
        """Before another claim is walked: the lines of the claim walked so far have gone
        through every entry up to the event last taken, parked or not (kept in its log)."""
        claim = self._current_claim
        if self._current is not None and claim is not None:
            self._log.setdefault(claim, []).append((self._tick, self._current))
        self._current = self._current_claim = None

    def _fold(self, line: str) -> Position:
        """The line's position with its claim's log since it joined it taken in."""
        at = self._at.get(line)
        if at is END or line in self._blocked or line not in self._claims:
            return at
        log = self._log.get(self._claims[line])
        if log:
            since = self._since[line]
            for index in range(len(log) - 1, -1, -1):
                tick, reach = log[index]
                if tick <= since:
                    break
                if reach is _LAST:
                    at = END
                    break
                at = _later(at, reach)
            self._at[line] = at
            self._since[line] = self._tick
        return at

    def position(self, line: str) -> Position:
        at = self._fold(line)
        current = self._current
        if (
            at is END
            or current is None
            or line in self._blocked
            or self._claims.get(line) != self._current_claim
        ):
            return at
        if current is _LAST:
            return END
        return current if at is None or current > at else at  # type: ignore[operator]

    def insert(self, line: str, entry: tuple[Any, ...]) -> None:
        """An entry of a parked job put back into the walk (beyond the line's position)."""
        index = bisect.bisect_left(self._lines[line], entry, lo=self._pos[line])
        self._lines[line].insert(index, entry)
        if index == self._pos[line] and not self._rejudge and line in self._claims:
            self._push(line)  # it is the line's next event now (the older one goes stale)

    def admitted(self) -> None:
        """Usage changed: every line's claim is judged again."""
        self._rejudge = True
        self._rooms.clear()

    def block(self, line: str) -> None:
        """The rest of this line waits for the next cycle."""
        self._blocked.add(line)


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
                # ``_borrows`` on the class's demand, read off its signature (this runs for
                # every class of every line after each admission: no mapping is built).
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
# A line's last event: after every entry of its claim (it has gone through to its end).
_LAST: tuple[Any, ...] = (_TOP,)


def _later(at: Position, key: tuple[Any, ...]) -> Position:
    """The further of a line's position and ``key``: ``(*an entry's key, _TOP)``, which sorts
    right after that entry and before the next (the walk has gone through the entry)."""
    if at is END:
        return at
    return key if at is None or at < key else at  # type: ignore[operator]
