"""The pinner: gated pods in, pinned and ungated pods out (the choice is capacity/pins.py's).

Runs beside the admission loop while leading, never inside it: a thousand pods of a burst of
admissions cost a thousand pod PATCHes, which must not delay the next admission cycle. Each
wake-up takes every waiting pod, chooses in arrival order (synchronously, so no two pods take
the same held slot) and writes concurrently, bounded.

No pod stays gated for a reason of ours: a pod of no job kube-queue admitted is ungated without
a pin, a write the server refuses for another reason than the pod having changed is sent again
without the pin, and failures that may heal (transport, 5xx, 429) are retried with backoff. A
pod that changed meanwhile (a failed test) or vanished is left to its next watch event: if it
still carries our gate, it comes back here.
"""

from __future__ import annotations

import anyio
import structlog

from kubequeue.capacity.pins import Pin, Pins
from kubequeue.kube.client import ApiError, KubeClient, KubeError, backoff
from kubequeue.kube.gate import DecisionGate
from kubequeue.kube.pods import ungate
from kubequeue.observability import metrics

__all__ = ["Pinner"]

log = structlog.get_logger(__name__)


class Pinner:
    def __init__(
        self,
        pins: Pins,
        client: KubeClient,
        *,
        pin: bool = True,
        max_inflight: int = 16,
        retry_delay: float = 0.5,
        max_retry_delay: float = 30.0,
        gate: DecisionGate | None = None,
    ) -> None:
        self.gate = gate
        self.pins = pins
        self.client = client
        self.pin = pin  # False (--pin-placement=false): gates still present are only removed
        self.max_inflight = max_inflight
        self.retry_delay = retry_delay
        self.max_retry_delay = max_retry_delay
        self._wakeup = anyio.Event()

    def wake(self) -> None:
        self._wakeup.set()

    async def run(self) -> None:
        limiter = anyio.CapacityLimiter(self.max_inflight)
        async with anyio.create_task_group() as tg:
            while True:
                await self._wakeup.wait()
                gate = self.gate
                if gate is not None and gate.closed:  # a pin takes capacity the cycle reads
                    await gate.wait_open()
                self._wakeup = anyio.Event()
                for pod in self.pins.take():
                    if self.pin:
                        decision = self.pins.choose(pod)
                    else:
                        decision = self.pins.choose_unpinned(pod, "pinning is off")
                    tg.start_soon(self._write, decision, limiter)
                await anyio.lowlevel.checkpoint()

    async def _write(self, decision: Pin, limiter: anyio.CapacityLimiter) -> None:
        pod = decision.pod
        host = decision.host
        failures = 0
        while True:
            try:
                async with limiter:
                    await ungate(
                        self.client,
                        pod.namespace,
                        pod.name,
                        pod.uid,
                        pod.gates,
                        host,
                        pod.has_selector,
                        pod.has_labels,
                    )
            except KubeError as exc:
                if isinstance(exc, ApiError) and (exc.conflict or exc.not_found):
                    # Changed (its newest view, if still gated, waits again) or gone.
                    if self.pins.failed(pod.uid, retry=exc.conflict):
                        self.wake()
                    return
                if isinstance(exc, ApiError) and exc.status < 500 and exc.status != 429:
                    if host is not None:
                        # Refused for the pin itself (an admission policy on pods, a version
                        # that does not let a gated pod's nodeSelector grow): never keep the
                        # pod gated over it.
                        log.warning(
                            "pod.pin_refused",
                            pod=f"{pod.namespace}/{pod.name}",
                            node=decision.node,
                            error=str(exc),
                            why="ungating it without the pin",
                        )
                        self.pins.failed(pod.uid, retry=False)
                        decision = self.pins.choose_unpinned(pod, "the pin was refused")
                        host = None
                        continue
                    log.error(
                        "pod.ungate_failed", pod=f"{pod.namespace}/{pod.name}", error=str(exc)
                    )
                    self.pins.failed(pod.uid, retry=False)
                    return
                failures += 1
                log.warning(
                    "pod.ungate_retry",
                    pod=f"{pod.namespace}/{pod.name}",
                    error=str(exc),
                    attempt=failures,
                )
                await backoff(failures, self.retry_delay, self.max_retry_delay)
                continue
            self.pins.written(pod.uid)
            metrics.PODS_UNGATED.labels(decision.outcome).inc()
            # Every pod of every admitted job passes here: the plan's own outcome is not news.
            report = log.debug if decision.outcome == "planned" else log.info
            report(
                "pod.pinned" if host is not None else "pod.ungated",
                pod=f"{pod.namespace}/{pod.name}",
                node=decision.node,
                outcome=decision.outcome,
                why=decision.why,
            )
            return
