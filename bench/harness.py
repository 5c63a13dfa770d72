"""The production wiring with no API server: a real ``Controller`` whose client is never called.

``Controller.__init__`` builds the capacity cache, reservations, tracker, queue, admission cycle,
handlers and informers exactly as the running controller does; the bench then hands raw watch
lines to each informer's ``_dispatch`` (the method the watch stream calls per line) and runs the
admission cycle the way the admission loop does. Only the API writes are simulated, by the
``Simulator`` in bench/sim.py.
"""

from __future__ import annotations

import gc
import itertools
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any, NoReturn

import structlog

from kubequeue import heap
from kubequeue.admission.cycle import CycleResult
from kubequeue.admission.loop import REASONS_SLICE, SETTLE_SLICE, SLICE_SECONDS
from kubequeue.controller import Controller
from kubequeue.kube import informer as informer_module
from kubequeue.kube.informer import Informer
from kubequeue.settings import Settings

__all__ = ["LOG_EVENTS", "Harness", "quiet_logs"]

_perf = time.perf_counter
# Objects per list page (the informer's page_size): one synchronous step at start-up.
LIST_PAGE = 500
# Watch lines one read of a busy stream hands over (aiohttp's 64 KiB read buffer, pod lines of
# 2-4 KiB): one synchronous step while pods end in bulk.
WATCH_READ = 32

# Every log event the core emitted, by name ("reservation.overcommitted", ...), so the bench can
# report and the smoke test assert that nothing unexpected happened.
LOG_EVENTS: Counter[str] = Counter()


def _count(_logger: Any, _method: str, event_dict: Any) -> NoReturn:
    LOG_EVENTS[str(event_dict.get("event"))] += 1
    raise structlog.DropEvent


def quiet_logs() -> None:
    """Count log events instead of formatting them (formatting is not what we measure)."""
    structlog.configure(processors=[_count], cache_logger_on_first_use=False)


class _NoApiServer:
    """Stands in for KubeClient: any use is a bench bug, so it fails loudly."""

    def __getattr__(self, name: str) -> NoReturn:
        raise RuntimeError(f"the bench has no API server (KubeClient.{name} was used)")


class Harness:
    """``trace``: record every cycle's outcome there, on a clock that moves one second per cycle
    (so two code trees can be compared decision by decision; see ``python -m bench --trace``).

    ``pin``: pinning on explicitly (``Settings.pin_placement``, on by default in production
    too); what changes with it is the simulator's pod creation (bench/sim.py). Only the pure
    ``Controller.pins`` and the webhook's pin callback are used: the pinner task, which writes
    to the API server, is never started. ``topology_levels``: ``Settings.topology_levels``."""

    def __init__(
        self,
        *,
        strict_fifo: bool = False,
        starvation_seconds: float = 0.0,
        trace: list[Any] | None = None,
        pin: bool = False,
        topology_levels: tuple[str, ...] = (),
        slice_seconds: float | None = SLICE_SECONDS,
    ) -> None:
        # The starvation guard is off by default: the generated Jobs were created days before
        # the run, so with the guard on every cycle would stop at the first job that does not
        # fit (StrictFIFO behind the head of the line) and measure that job, not the core.
        extra: dict[str, Any] = {"pin_placement": True} if pin else {}
        if topology_levels:
            extra["topology_levels"] = topology_levels
        settings = Settings(
            metrics_port=0,
            leader_elect=False,
            lease_namespace="default",
            identity="bench",
            strict_fifo=strict_fifo,
            starvation_seconds=starvation_seconds,
            **extra,
        )
        self.controller = Controller(settings, _NoApiServer())  # type: ignore[arg-type]
        informers = {i.name: i for i in self.controller.informers}
        self.node_informer: Informer[Any] = informers["nodes"]
        self.pod_informer: Informer[Any] = informers["pods"]
        self.unbound_informer: Informer[Any] = informers["unbound-pods"]
        self.class_informer: Informer[Any] = informers["priorityclasses"]
        self.job_informer: Informer[Any] = informers["jobs"]
        self.queue_informer: Informer[Any] = informers["queues"]
        self.cache = self.controller.cache
        self.tracker = self.controller.tracker
        self.queue = self.controller.queue
        self.reservations = self.controller.reservations
        self.cycle = self.controller.cycle
        self.pins = self.controller.pins
        self.adapter = self.tracker.adapters["Job"]
        self.trace = trace
        # Cycles run in the admission loop's slices (None: in one go, as before issue 36).
        self.slice_seconds = slice_seconds
        # The longest synchronous step of each kind (the event loop's stalls: each is a stretch
        # with no await in the running controller), by (phase, step); None: not measured.
        self.steps: dict[tuple[str, str], float] | None = None
        self.phase = "start-up"
        self._gc_started = 0.0
        # Of the last cycle: when the loop would start its first admission's write, seconds
        # after the cycle began (None: it admitted nothing).
        self.first_write_s: float | None = None
        self._thresholds: tuple[int, int, int] | None = None
        self._tick = 0.0
        if trace is not None:
            self.cycle._clock = lambda: self._tick

    def measure_steps(self) -> dict[tuple[str, str], float]:
        """From now on, record the longest synchronous step of each kind, and the longest pass
        of the cyclic garbage collector (it lands inside one of the steps; until
        stop_measuring)."""
        self.steps = {}
        gc.callbacks.append(self._gc_pass)
        # As Controller.run: the collector's full passes are the refreezes (tick_heap).
        self._thresholds = heap.take_over()
        return self.steps

    def stop_measuring(self) -> None:
        if self._gc_pass in gc.callbacks:
            gc.callbacks.remove(self._gc_pass)
        if self._thresholds is not None:
            heap.restore(self._thresholds)
            self._thresholds = None

    def _gc_pass(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_started = _perf()
        elif self._gc_started:
            self._step(
                f"gc pass (gen {info['generation']}, inside a step)", _perf() - self._gc_started
            )
            self._gc_started = 0.0

    def tick_heap(self) -> None:
        """The controller's heap refreeze (kubequeue/heap.py: its task looks every 50 ms, which
        is between any two steps; here after each step)."""
        if self._thresholds is not None and heap.due():
            started = _perf()
            heap.refreeze()
            self._step("heap refreeze", _perf() - started)

    def _step(self, what: str, seconds: float) -> None:
        steps = self.steps
        if steps is not None:
            key = (self.phase, what)
            if seconds > steps.get(key, 0.0):
                steps[key] = seconds

    def synced(self) -> None:
        """Every object of the initial state is in: what the controller does once its informers
        have listed (``Controller.synced``: ready, and the heap frozen out of the collector)."""
        started = _perf()
        self.controller.synced()
        self._step("synced (heap frozen)", _perf() - started)

    def settle(self) -> None:
        """What the admission loop does while it waits for the next change: make the parks the
        last cycle decided (admission/parking.py), a slice at a time as the loop does."""
        cycle = self.cycle
        while cycle.unsettled:  # a turn of the loop's idle time each
            started = _perf()
            cycle.settle_for(self.slice_seconds or 0.0, SETTLE_SLICE)
            self._step("parking slice", _perf() - started)
            self.tick_heap()

    def run_cycle(self) -> CycleResult:
        """One admission cycle, as the admission loop runs it: the decisions, then the reasons
        they left due (their notices join the result's)."""
        result = self.decide()
        self.explain(result)
        return result

    def decide(self) -> CycleResult:
        """The cycle proper: what the loop runs before it starts the admissions' writes."""
        if self.trace is not None:
            self._tick += 1.0
        if self.steps is not None:
            self.tick_heap()
        if self.slice_seconds is None:
            started = _perf()
            result = self.cycle.decide()
            self._step("cycle (whole)", _perf() - started)
            return result
        steps = self.cycle.slices(self.slice_seconds)
        began = _perf()
        self.first_write_s = None
        while True:
            started = _perf()
            try:
                so_far = next(steps)
            except StopIteration as done:
                self._step("cycle slice", _perf() - started)
                last: CycleResult = done.value
                if self.first_write_s is None and last.admitted:
                    self.first_write_s = _perf() - began
                return last
            self._step("cycle slice", _perf() - started)
            self.tick_heap()  # the controller's refreeze task runs between slices
            if self.first_write_s is None and so_far.admitted:
                # The loop starts this admission's write now (AdmissionLoop._decide).
                self.first_write_s = _perf() - began

    def explain(self, result: CycleResult) -> None:
        """What the loop runs once the writes are on their way: the reasons due."""
        cycle = self.cycle
        limit = REASONS_SLICE if self.slice_seconds is not None else None
        while True:  # as the loop does: REASONS_SLICE at a time
            started = _perf()
            result.notices.extend(cycle.explain_deferred(limit))
            self._step("reasons", _perf() - started)
            self.tick_heap()
            if not cycle.reasons_due:
                break
        if self.trace is not None:
            self.trace.append(
                [
                    result.evaluated,
                    result.waiting,
                    [
                        [list(a.job.key), [[x.node, x.count] for x in a.assignments]]
                        for a in result.admitted
                    ],
                    [[list(n.key), n.reason, n.message] for n in result.notices],
                ]
            )

    # The informers' per-line entry point; bound once so the loops below stay tight.
    def _feed(self, dispatch: Callable[[bytes], None], lines: Iterable[bytes]) -> None:
        if self.steps is None:
            for line in lines:
                dispatch(line)
            return
        # Measured: a start-up list page, or what one read of a busy watch stream brings.
        size = LIST_PAGE if self.phase == "start-up" else WATCH_READ
        what = "list page" if self.phase == "start-up" else "watch read"
        it = iter(lines)
        while batch := list(itertools.islice(it, size)):
            self.tick_heap()
            started = _perf()
            for i, line in enumerate(batch, 1):
                dispatch(line)
                # As the informer hands a list page over: a turn for the event loop (a step
                # ends) every LIST_SLICE_S.
                if (
                    size == LIST_PAGE
                    and not i % informer_module.LIST_CHECK_EVERY
                    and _perf() - started > informer_module.LIST_SLICE_S
                ):
                    self._step(what, _perf() - started)
                    started = _perf()
            if size == LIST_PAGE:
                self.controller.listed_page()  # the informer's on_page
            self._step(what, _perf() - started)

    def feed_nodes(self, lines: Iterable[bytes]) -> None:
        self._feed(self.node_informer._dispatch, lines)

    def feed_pods(self, lines: Iterable[bytes]) -> None:
        self._feed(self.pod_informer._dispatch, lines)

    def feed_jobs(self, lines: Iterable[bytes]) -> None:
        self._feed(self.job_informer._dispatch, lines)

    def feed_queues(self, lines: Iterable[bytes]) -> None:
        self._feed(self.queue_informer._dispatch, lines)
        self.queue_informer.handler.synced()

    def feed_priority_classes(self, lines: Iterable[bytes]) -> None:
        self._feed(self.class_informer._dispatch, lines)
        # The list is complete: the handler pushes classes to the tracker from now on.
        self.class_informer.handler.synced()
