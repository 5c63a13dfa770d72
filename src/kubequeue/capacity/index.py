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
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterator, Mapping

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

    __slots__ = ("_buckets", "_where")

    def __init__(self) -> None:
        self._buckets: list[list[dict[str, None]]] = [
            [{} for _ in range(_CPU_KEYS)] for _ in range(_GPU_KEYS)
        ]
        self._where: dict[str, tuple[int, int]] = {}

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
        if old is not None:
            if old[0] == g and old[1] == c:
                return
            del self._buckets[old[0]][old[1]][name]
        self._buckets[g][c][name] = None
        self._where[name] = (g, c)

    def place(self, name: str, key: tuple[int, int]) -> None:
        """Put ``name`` last in bucket ``key`` (taking it out of wherever it was)."""
        old = self._where.get(name)
        if old is not None:
            del self._buckets[old[0]][old[1]][name]
        self._buckets[key[0]][key[1]][name] = None
        self._where[name] = key

    def remove(self, name: str) -> None:
        old = self._where.pop(name, None)
        if old is not None:
            del self._buckets[old[0]][old[1]][name]

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

    def candidate_count(self, request: Mapping[str, int]) -> int:
        """How many nodes ``candidates(request)`` yields (a sum over at most 340 buckets)."""
        g0 = _gpu_key(request.get(GPU, 0))
        c0 = _cpu_key(request.get("cpu", 0))
        return sum(len(bucket) for row in self._buckets[g0:] for bucket in row[c0:])

    def candidates(self, request: Mapping[str, int]) -> Iterator[str]:
        """Nodes that may have room for ``request``, tightest first. Superset of the real fits."""
        g0 = _gpu_key(request.get(GPU, 0))
        c0 = _cpu_key(request.get("cpu", 0))
        buckets = self._buckets
        for g in range(g0, _GPU_KEYS):
            row = buckets[g]
            for c in range(c0, _CPU_KEYS):
                bucket = row[c]
                if bucket:
                    # Not a copy: callers must not update the index while iterating (the fit
                    # works on a scratch overlay, so it never does).
                    yield from bucket
