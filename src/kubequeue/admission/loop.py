"""THE admission loop: wait for a change, run a cycle, write its admissions, report, repeat.

It wakes when the queue changes (a job arrived or changed) or capacity is freed (a pod ended, a
node appeared), and at least every ``tick`` seconds as a safety net. Bursts coalesce: a thousand
pod deletions while a cycle runs cause one more cycle, not a thousand.

Writes happen concurrently (bounded) inside this loop's task group, after the cycle has already
reserved their capacity; the next cycle can run while they are in flight. A write that fails is
undone (reservation released, job back in line) - including when leadership is lost mid-write.
"""

from __future__ import annotations

import time
from collections import Counter

import anyio
import anyio.lowlevel
import structlog

from kubequeue.admission.cycle import Admission, AdmissionCycle
from kubequeue.admission.notices import Notice
from kubequeue.admission.tracker import JobTracker
from kubequeue.identity import JobKey
from kubequeue.kube import writer
from kubequeue.kube.client import ApiError, KubeClient
from kubequeue.kube.events import EventRecorder, InvolvedObject
from kubequeue.observability import metrics

__all__ = ["AdmissionLoop"]

log = structlog.get_logger(__name__)


class AdmissionLoop:
    def __init__(
        self,
        tracker: JobTracker,
        cycle: AdmissionCycle,
        client: KubeClient,
        events: EventRecorder,
        *,
        max_inflight: int = 16,
        tick: float = 5.0,
    ) -> None:
        self.tracker = tracker
        self.cycle = cycle
        self.client = client
        self.events = events
        self.max_inflight = max_inflight
        self.tick = tick
        self._wakeup = anyio.Event()
        self._gauges_at = 0.0
        self._following: set[JobKey] = set()

    def wake(self) -> None:
        self._wakeup.set()

    async def run(self) -> None:
        limiter = anyio.CapacityLimiter(self.max_inflight)
        log.info("admission.loop_started", queued=len(self.tracker.queue))
        async with anyio.create_task_group() as tg:
            while True:
                with anyio.move_on_after(self.tick):
                    await self._wakeup.wait()
                self._wakeup = anyio.Event()
                started = time.perf_counter()
                result = self.cycle.run()
                elapsed = time.perf_counter() - started
                metrics.CYCLE_SECONDS.observe(elapsed)
                if result.evaluated or result.admitted:
                    log.debug(
                        "admission.cycle",
                        evaluated=result.evaluated,
                        admitted=len(result.admitted),
                        waiting=result.waiting,
                        ms=round(elapsed * 1000, 2),
                    )
                for notice in result.notices:
                    self._publish(notice)
                for admission in result.admitted:
                    tg.start_soon(self._admit, admission, limiter)
                for key in list(self.tracker.follow_ups):
                    if key not in self._following:
                        self._following.add(key)
                        tg.start_soon(self._follow_up, key, limiter)
                self._update_gauges()
                # Let informers run between cycles even under a constant stream of wake-ups.
                await anyio.lowlevel.checkpoint()

    async def _admit(self, admission: Admission, limiter: anyio.CapacityLimiter) -> None:
        job = admission.job
        kind, namespace, name = job.key
        adapter = self.tracker.adapters[kind]
        done = False
        try:
            async with limiter:
                obj = await writer.admit(
                    self.client,
                    adapter.info,
                    namespace,
                    name,
                    job.resource_version,
                    job.admission_patch,
                )
            done = True
            self.tracker.admission_succeeded(job.key, adapter, obj)
            waited = max(0.0, time.time() - job.created_epoch) if job.created else None
            metrics.ADMISSIONS.labels(adapter.info.name).inc()
            if waited is not None:
                metrics.ADMISSION_WAIT.labels(adapter.info.name).observe(waited)
            placement = _placement_text(admission)
            log.info(
                "job.admitted",
                job=f"{namespace}/{name}",
                kind=kind,
                placement=placement,
                waited_s=round(waited, 3) if waited is not None else None,
                priority=job.priority,
            )
            self._publish(
                Notice(job.key, job.uid, "Normal", "Admitted", f"capacity reserved on {placement}")
            )
        except ApiError as exc:
            done = True
            self.tracker.admission_failed(job.key)
            metrics.ADMISSION_ERRORS.labels(adapter.info.name, exc.reason or str(exc.status)).inc()
            if exc.conflict or exc.not_found:
                log.info(
                    "job.admission_retry",
                    job=f"{namespace}/{name}",
                    kind=kind,
                    why="the job changed or vanished since it was read; deciding again from "
                    "its latest state",
                )
            else:
                log.error("job.admission_failed", job=f"{namespace}/{name}", error=str(exc))
                self._publish(
                    Notice(
                        job.key, job.uid, "Warning", "AdmissionFailed", f"could not admit: {exc}"
                    )
                )
                await anyio.sleep(1.0)  # do not hammer a rejecting webhook or a sick server
        finally:
            if not done:  # cancelled (leadership lost, shutdown) or an unexpected error
                self.tracker.admission_failed(job.key)
            self.wake()

    async def _follow_up(self, key: JobKey, limiter: anyio.CapacityLimiter) -> None:
        """One post-admission write (e.g. resume Argo's kube-queue-suspend step), guarded by the
        resourceVersion it was judged on; a conflict just waits for the next observation."""
        try:
            entry = self.tracker.follow_ups.pop(key, None)
            if entry is None:
                return
            rv, patch = entry
            kind, namespace, name = key
            info = self.tracker.adapters[kind].info
            body = {**patch, "metadata": {"resourceVersion": rv}}
            async with limiter:
                await self.client.merge_patch(info.object_path(namespace, name), body)
            log.info("job.followed_up", job=f"{namespace}/{name}", kind=kind, patch=patch)
        except ApiError as exc:
            if not (exc.conflict or exc.not_found):
                log.warning("job.follow_up_failed", job="/".join(key), error=str(exc))
        finally:
            self._following.discard(key)

    def _publish(self, notice: Notice) -> None:
        kind, namespace, name = notice.key
        adapter = self.tracker.adapters.get(kind)
        if adapter is None:
            return
        log_fn = log.warning if notice.type == "Warning" else log.info
        log_fn(
            "job.notice",
            job=f"{namespace}/{name}",
            kind=kind,
            reason=notice.reason,
            message=notice.message,
        )
        self.events.emit(
            InvolvedObject(adapter.info.api_version, kind, namespace, name, notice.uid),
            notice.type,
            notice.reason,
            notice.message,
        )

    def _update_gauges(self) -> None:
        now = time.monotonic()
        if now - self._gauges_at < 1.0:
            return
        self._gauges_at = now
        counts: Counter[tuple[str, str]] = Counter()
        for job in self.tracker.queue.ordered():
            state = "inadmissible" if job.problem or job.never_fits else "active"
            counts[(job.kind, state)] += 1
        for adapter in self.tracker.adapters.values():
            for state in ("active", "inadmissible"):
                metrics.PENDING.labels(adapter.info.name, state).set(
                    counts[(adapter.info.kind, state)]
                )
        metrics.RESERVED_JOBS.set(len(self.tracker.reservations))


def _placement_text(admission: Admission) -> str:
    per_node: Counter[str] = Counter()
    for a in admission.assignments:
        per_node[a.node] += a.count
    shown = [f"{node} ({n} pod{'s' if n != 1 else ''})" for node, n in per_node.items()]
    if len(shown) > 5:
        shown = [*shown[:5], f"and {len(shown) - 5} more nodes"]
    return ", ".join(shown)
