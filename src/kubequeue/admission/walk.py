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
from collections.abc import Iterator, Sequence
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
    decided by its claim: queues still below their guarantee (in every resource their tree
    pools) before queues at or above it, then the smaller weighted dominant shares along the
    queue's path (hierarchical DRF, QuotaLedger.shares). Lines with equal claims are merged by
    their jobs' priority and age (a C-level k-way merge). Claims move only when a job is
    admitted; then the rest of the lines are grouped again from where each one stopped (when
    parking puts an entry back into a line of the group being merged, the group is only merged
    again from there: no claim moved).

    Parked jobs (admission/parking.py) are not visited, but the walk goes through the lines as
    if they were there: a line has a turn while it has entries left, parked or not, and a line
    in the group being merged has gone as far as the entry last visited. So lines take their
    turns exactly as with every job visited, and parking knows which parked jobs a line has not
    reached yet (``position``).
    """

    def __init__(self, queue: JobQueue, lines: Sequence[str], ledger: QuotaLedger) -> None:
        self._ledger = ledger
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
        if not line:
            return False, (0.0,)
        ledger = self._ledger
        at_guarantee = any(left <= 0 for _, left in ledger.guarantee_room(line))
        return at_guarantee, ledger.shares(line)

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
                claims = {line: self._claim(line) for line in active}
                best = min(claims.values())
                group = [line for line in active if claims[line] == best]
            self._regroup = self._remerge = False
            self._group = group
            self._current = None
            if len(group) == 1:
                merged: Iterator[tuple[Any, ...]] = itertools.islice(
                    lines[group[0]], pos[group[0]], None
                )
            else:
                merged = heapq.merge(
                    *(itertools.islice(lines[line], pos[line], None) for line in group)
                )
            entry: tuple[Any, ...] | None = None
            for entry in merged:
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
            for line in group:
                self._at[line] = self.position(line)
            self._group = []
            if self._regroup:
                # An admission (claims moved) or a blocked line: group again.
                group = None
            # Otherwise a job put back into a line of the group: the same lines merged again
            # from where each one stopped (no claim moved, so grouping again would give the
            # same lines, less those gone through to their end, which add nothing).

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

    def block(self, line: str) -> None:
        """The rest of this line waits for the next cycle."""
        self._blocked.add(line)
        self._regroup = True
