"""observability/stalls.py: a blocked event loop shows up as lateness, and only then."""

from __future__ import annotations

import time

import anyio

from kubequeue.observability import metrics
from kubequeue.observability.stalls import watch_stalls


def _sum_and_count() -> tuple[float, float]:
    total = count = 0.0
    for metric in metrics.LOOP_LATENESS.collect():
        for sample in metric.samples:
            if sample.name.endswith("_sum"):
                total = sample.value
            elif sample.name.endswith("_count"):
                count = sample.value
    return total, count


def test_a_blocking_step_is_recorded_as_lateness_and_an_idle_loop_is_not() -> None:
    async def main() -> tuple[float, float]:
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch_stalls, 0.01, 0.2)
            before, _ = _sum_and_count()
            await anyio.sleep(0.1)
            idle, _ = _sum_and_count()
            time.sleep(0.3)  # noqa: ASYNC251 - the synchronous step this test is about
            await anyio.sleep(0.05)
            tg.cancel_scope.cancel()
        total, _ = _sum_and_count()
        return idle - before, total - idle

    idle, blocked = anyio.run(main)
    assert blocked >= 0.25, blocked  # the 0.3 s step, less one interval
    assert idle < 0.1, idle  # ten idle wake-ups, each a few ms late at most
