"""Keeping the cyclic garbage collector's full passes short.

CPython's collector walks, in each full (generation 2) pass, every tracked object it has not
been told to ignore, in one go: a pass over the controller's state takes hundreds of
milliseconds at 8,000 nodes and seconds at 65,000, and nothing else runs on the event loop
meanwhile. The state is frozen out of the collector once listed (``Controller.synced``), but it
is replaced as it churns (pods end and start, jobs are admitted): after an hour of a busy
cluster most of it is new, tracked again, and full passes are as long as ever.

So the controller takes full passes over (``take_over``): the collector's own never come
(their threshold is out of reach), and ``refreeze`` runs instead (looked for every 50 ms, so
between a cycle's slices too) once the young generations have been collected ``REFREEZE_AFTER``
times since the last one: a full pass, which walks only what
was made since the last freeze (about 70,000 objects at most: milliseconds to tens of them), then a
freeze of what is left. Cyclic garbage made since the last freeze is collected by that pass; what
a freeze can keep for good is a reference cycle that was alive then and became garbage later.
The controller's own state makes none (a bench run's core makes a few dozen cyclic objects in
all); the event loop's tasks and connections in flight at a freeze do: a few kilobytes each time.
"""

from __future__ import annotations

import gc

import anyio

__all__ = ["REFREEZE_AFTER", "due", "keep_frozen", "refreeze", "restore", "take_over"]

# Young-generation (gen 1) passes between two refreezes: each follows ~7,000 net new tracked
# objects (CPython's default thresholds 700 and 10).
REFREEZE_AFTER = 10
# The collector's own full passes come after this many gen 1 passes: never, in practice.
_OUT_OF_REACH = 1 << 30


def take_over() -> tuple[int, int, int]:
    """Stop the collector's own full passes; returns the thresholds to restore."""
    previous = gc.get_threshold()
    gc.set_threshold(previous[0], previous[1], _OUT_OF_REACH)
    return previous


def restore(previous: tuple[int, int, int]) -> None:
    gc.set_threshold(*previous)


def due() -> bool:
    return gc.get_count()[2] >= REFREEZE_AFTER


def refreeze() -> None:
    """A full pass (over what was made since the last freeze), then a freeze of the rest."""
    gc.collect()
    gc.freeze()


async def keep_frozen(check_every: float = 0.05) -> None:
    """Run until cancelled: a refreeze whenever one is due. It looks often (a look is one
    counter read): a sliced cycle allocates fast, and this runs between its slices."""
    while True:
        await anyio.sleep(check_every)
        if due():
            refreeze()
