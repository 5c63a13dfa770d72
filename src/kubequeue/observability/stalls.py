"""The event loop's stalls, measured from inside: a task that sleeps a short interval and
records how late it woke up.

Everything the controller does shares one event loop: watch streams, admission cycles, the
pinning webhook's answers, the Lease renewal, the metrics endpoint. A synchronous step that runs
for seconds (a first cycle over 200,000 queued jobs, a drain round of thousands of pods) delays
all of them, and a pod webhook that does not answer in time makes the API server create the pod
unpinned. This makes such stalls visible (``kube_queue_event_loop_lateness_seconds``, and a
warning naming the stall when it is long), instead of inferring them from their effects.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import anyio
import structlog

from kubequeue.observability import metrics

__all__ = ["watch_stalls"]

log = structlog.get_logger("kube-queue")

INTERVAL_S = 0.05
WARN_AFTER_S = 1.0


async def watch_stalls(
    interval: float = INTERVAL_S,
    warn_after: float = WARN_AFTER_S,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Run until cancelled; each wake-up records its lateness (at most ``interval`` of the
    loop's time in 20 wake-ups a second: negligible)."""
    while True:
        before = clock()
        await anyio.sleep(interval)
        late = max(0.0, clock() - before - interval)
        metrics.LOOP_LATENESS.observe(late)
        if late >= warn_after:
            log.warning(
                "event_loop.stalled",
                seconds=round(late, 3),
                why="a synchronous step kept the event loop busy: watches, the webhook and "
                "the Lease waited that long",
            )
