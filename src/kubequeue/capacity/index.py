"""An index of nodes by free capacity, so a fit looks only at nodes that could hold the pod.

Nodes sit in buckets keyed by (free whole GPUs, log2 of free CPU in 250m steps). Both keys are
monotone in the free amount, so every node that can hold a request is in a bucket whose keys are
>= the request's keys; the buckets below are skipped without looking at their nodes. On a busy
cluster most nodes sit in low buckets, so a search for "2 GPUs and 8 CPUs" touches the few nodes
that still have that much free instead of all of them. A node moves between buckets only when its
free capacity crosses a bucket boundary, so upkeep is O(1) per pod event.

Iteration runs from the tightest bucket upwards (best fit): small requests fill partly used
nodes first and leave whole GPU nodes for the jobs that need them, which is what keeps a GPU
cluster from fragmenting.

The same buckets are also kept per *partition* (the caller's key: the node's hard taints), each
in the overall order, so a walk or a count skips whole partitions a pod cannot go to: on a GPU
cluster whose GPU nodes are tainted, the CPU-only jobs (most of them) never look at a GPU node.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Hashable, Iterator, Mapping

from kubequeue.resources import GPU

__all__ = ["CPU_KEY_MAX", "CPU_STEP", "GPU_KEY_MAX", "FreeIndex", "bucket_of"]

_GPU_KEYS = 17  # 0..16 whole free GPUs; 16 means "16 or more"
_CPU_STEP = 250  # millicores
_CPU_KEYS = 20


def _gpu_key(milli: int) -> int:
    if milli <= 0:
        return 0
    return min(milli // 1000, _GPU_KEYS - 1)


def _cpu_key(milli: int) -> int:
    if milli <= 0:
        return 0
    return min((milli // _CPU_STEP).bit_length(), _CPU_KEYS - 1)


# For callers that inline bucket_of on a hot path (capacity/cache.py).
GPU_KEY_MAX = _GPU_KEYS - 1
CPU_KEY_MAX = _CPU_KEYS - 1
CPU_STEP = _CPU_STEP


def _empty_buckets() -> list[list[dict[str, None]]]:
    return [[{} for _ in range(_CPU_KEYS)] for _ in range(_GPU_KEYS)]


def bucket_of(free: Mapping[str, int]) -> tuple[int, int]:
    """The (GPU, CPU) bucket a node with this free vector belongs in."""
    gpu = free.get(GPU, 0)
    cpu = free.get("cpu", 0)
    return (
        0 if gpu <= 0 else min(gpu // 1000, _GPU_KEYS - 1),
        0 if cpu <= 0 else min((cpu // _CPU_STEP).bit_length(), _CPU_KEYS - 1),
    )


class FreeIndex:
    """Buckets of node names by free (GPU, CPU); the caller verifies the exact fit."""

    __slots__ = ("_buckets", "_parts", "_where")

    def __init__(self) -> None:
        self._buckets = _empty_buckets()
        # partition -> its own buckets; node -> (GPU key, CPU key, partition) where it sits
        self._parts: dict[Hashable, list[list[dict[str, None]]]] = {}
        self._where: dict[str, tuple[int, int, Hashable]] = {}

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, name: object) -> bool:
        return name in self._where

    def update(self, name: str, free: Mapping[str, int]) -> None:
        """Place ``name`` in the bucket its ``free`` vector belongs to."""
        # Called on every pod event: _gpu_key / _cpu_key inlined, no tuple unless it moves.
        gpu = free.get(GPU, 0)
        g = 0 if gpu <= 0 else min(gpu // 1000, _GPU_KEYS - 1)
        cpu = free.get("cpu", 0)
        c = 0 if cpu <= 0 else min((cpu // _CPU_STEP).bit_length(), _CPU_KEYS - 1)
        old = self._where.get(name)
        if old is not None and old[0] == g and old[1] == c:
            return
        self.place(name, (g, c), old[2] if old is not None else ())

    def place(self, name: str, key: tuple[int, int], part: Hashable = ()) -> None:
        """Put ``name`` last in bucket ``key`` of partition ``part`` (taking it out of wherever
        it was)."""
        self.remove(name)
        g, c = key
        self._buckets[g][c][name] = None
        buckets = self._parts.get(part)
        if buckets is None:
            buckets = self._parts[part] = _empty_buckets()
        buckets[g][c][name] = None
        self._where[name] = (g, c, part)

    def partition_of(self, name: str) -> Hashable | None:
        """The partition ``name`` is in (None: it is not in the index)."""
        where = self._where.get(name)
        return where[2] if where is not None else None

    def repartition(self, name: str, part: Hashable) -> None:
        """Move ``name`` to partition ``part``, in the same bucket. A partition's buckets keep
        the overall order of their nodes (so walking one partition gives the overall walk
        without the other partitions' nodes): the bucket it joins is rebuilt in that order."""
        old = self._where.get(name)
        if old is None or old[2] == part:
            return
        g, c, before = old
        del self._parts[before][g][c][name]
        buckets = self._parts.get(part)
        if buckets is None:
            buckets = self._parts[part] = _empty_buckets()
        joined = buckets[g][c]
        joined[name] = None
        buckets[g][c] = {n: None for n in self._buckets[g][c] if n in joined}
        self._where[name] = (g, c, part)

    def remove(self, name: str) -> None:
        old = self._where.pop(name, None)
        if old is not None:
            g, c, part = old
            del self._buckets[g][c][name]
            del self._parts[part][g][c][name]

    @property
    def partitions(self) -> list[Hashable]:
        return list(self._parts)

    @property
    def partition_count(self) -> int:
        """How many partitions there are (one is never removed, so this only grows)."""
        return len(self._parts)

    def partition_buckets(self, part: Hashable) -> list[dict[str, None]]:
        """The non-empty buckets of a partition: together, its nodes."""
        buckets = self._parts.get(part)
        if buckets is None:
            return []
        return [bucket for row in buckets for bucket in row if bucket]

    def candidates_in(self, request: Mapping[str, int], parts: list[Hashable]) -> Iterator[str]:
        """``candidates(request)`` of these partitions only, one partition after the other."""
        for part in parts:
            yield from self.candidates(request, part)

    def most(
        self, resource: str, among: Container[str], free: Callable[[str], Mapping[str, int]]
    ) -> int | None:
        """The largest free ``resource`` (GPU or CPU) of the nodes in ``among``, from the top
        buckets down: every node with more sits in a higher bucket, so the maximum is among the
        ``among`` members of the highest bucket that has any. None when that is the lowest
        bucket (amounts under one unit, absent or negative: the caller scans instead)."""
        if resource == GPU:
            for g in range(_GPU_KEYS - 1, 0, -1):
                found = [n for bucket in self._buckets[g] for n in bucket if n in among]
                if found:
                    return max(free(n).get(GPU, 0) for n in found)
        elif resource == "cpu":
            for c in range(_CPU_KEYS - 1, 0, -1):
                found = [n for row in self._buckets for n in row[c] if n in among]
                if found:
                    return max(free(n).get("cpu", 0) for n in found)
        return None

    def candidate_count(
        self, request: Mapping[str, int], parts: list[Hashable] | None = None
    ) -> int:
        """How many nodes ``candidates(request)`` (or ``candidates_in(request, parts)``)
        yields: a sum over at most 340 buckets (per partition)."""
        g0 = _gpu_key(request.get(GPU, 0))
        c0 = _cpu_key(request.get("cpu", 0))
        tables = [self._buckets] if parts is None else [self._parts[p] for p in parts]
        return sum(len(bucket) for rows in tables for row in rows[g0:] for bucket in row[c0:])

    def buckets(self, request: Mapping[str, int], part: Hashable = None) -> list[dict[str, None]]:
        """The non-empty buckets ``candidates(request, part)`` walks, in its order: the same
        nodes, for a caller that loops over them itself (the fit's hot loop). Not copies."""
        g0 = _gpu_key(request.get(GPU, 0))
        c0 = _cpu_key(request.get("cpu", 0))
        tables = self._buckets if part is None else self._parts[part]
        return [bucket for row in tables[g0:] for bucket in row[c0:] if bucket]

    def candidates(self, request: Mapping[str, int], part: Hashable = None) -> Iterator[str]:
        """Nodes that may have room for ``request``, tightest first. Superset of the real fits.
        With ``part``: that partition's only, in the same order."""
        g0 = _gpu_key(request.get(GPU, 0))
        c0 = _cpu_key(request.get("cpu", 0))
        buckets = self._buckets if part is None else self._parts[part]
        for g in range(g0, _GPU_KEYS):
            row = buckets[g]
            for c in range(c0, _CPU_KEYS):
                bucket = row[c]
                if bucket:
                    # Not a copy: callers must not update the index while iterating (the fit
                    # works on a scratch overlay, so it never does).
                    yield from bucket
