"""The production wiring with no API server: a real ``Controller`` whose client is never called.

``Controller.__init__`` builds the capacity cache, reservations, tracker, queue, admission cycle,
handlers and informers exactly as the running controller does; the bench then hands raw watch
lines to each informer's ``_dispatch`` (the method the watch stream calls per line) and runs the
admission cycle the way the admission loop does. Only the API writes are simulated, by the
``Simulator`` in bench/sim.py.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any, NoReturn

import structlog

from kubequeue.admission.cycle import CycleResult
from kubequeue.controller import Controller
from kubequeue.kube.informer import Informer
from kubequeue.settings import Settings

__all__ = ["LOG_EVENTS", "Harness", "quiet_logs"]

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
        self._tick = 0.0
        if trace is not None:
            self.cycle._clock = lambda: self._tick

    def synced(self) -> None:
        """Every object of the initial state is in: what the controller does once its informers
        have listed (``Controller.synced``: ready, and the heap frozen out of the collector)."""
        self.controller.synced()

    def settle(self) -> None:
        """What the admission loop does while it waits for the next change: make the parks the
        last cycle decided (admission/parking.py)."""
        self.cycle.settle()

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
        return self.cycle.decide()

    def explain(self, result: CycleResult) -> None:
        """What the loop runs once the writes are on their way: the reasons due."""
        result.notices.extend(self.cycle.explain_deferred())
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
    def feed_nodes(self, lines: Iterable[bytes]) -> None:
        dispatch = self.node_informer._dispatch
        for line in lines:
            dispatch(line)

    def feed_pods(self, lines: Iterable[bytes]) -> None:
        dispatch = self.pod_informer._dispatch
        for line in lines:
            dispatch(line)

    def feed_jobs(self, lines: Iterable[bytes]) -> None:
        dispatch = self.job_informer._dispatch
        for line in lines:
            dispatch(line)

    def feed_queues(self, lines: Iterable[bytes]) -> None:
        dispatch = self.queue_informer._dispatch
        for line in lines:
            dispatch(line)
        self.queue_informer.handler.synced()

    def feed_priority_classes(self, lines: Iterable[bytes]) -> None:
        dispatch = self.class_informer._dispatch
        for line in lines:
            dispatch(line)
        # The list is complete: the handler pushes classes to the tracker from now on.
        self.class_informer.handler.synced()
