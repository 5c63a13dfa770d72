"""Wires the controller together and supervises every long-lived task in one task group.

    informers (Node, Pod, PriorityClass, Namespace, Queue, one per job kind)
        -> capacity cache / job tracker + queues and quota
            -> admission loop and Queue status writer (leader only) -> API server

Start-up order matters for correctness after a restart: every informer lists once before the
first admission, so admitted jobs' reservations and all running pods are known before anything
new is let in. API server trouble (an error answer or a broken connection) never ends a task:
each retries it. Any task failing otherwise (a bug) ends the group (and the process, for the
kubelet to restart); orderly shutdown on SIGTERM/SIGINT cancels the group and releases the Lease.

Watches, ordinary requests and the Lease each get their own connection pool (pool_limits), so a
renewal never waits for a connection held by a watch or an admission write.
"""

from __future__ import annotations

import gc
import signal
from pathlib import Path
from typing import Any

import anyio
import msgspec
import structlog

from kubequeue import heap
from kubequeue.admission.cycle import AdmissionCycle
from kubequeue.admission.loop import AdmissionLoop
from kubequeue.admission.pinner import Pinner
from kubequeue.admission.preemption import PreemptionPolicy
from kubequeue.admission.requeue import RequeuePolicy
from kubequeue.admission.tracker import JobTracker
from kubequeue.capacity.cache import CapacityCache
from kubequeue.capacity.pins import Pins
from kubequeue.capacity.reservations import Reservations
from kubequeue.handlers import (
    JobHandler,
    NamespaceHandler,
    NodeHandler,
    PodHandler,
    PriorityClassHandler,
    QueueHandler,
    UnboundPodHandler,
    pod_owner_finder,
)
from kubequeue.health import HealthServer
from kubequeue.kinds.registry import adapters_for
from kubequeue.kube.client import KubeClient, KubeError, PoolLimits, connect
from kubequeue.kube.events import EventRecorder
from kubequeue.kube.gate import DecisionGate
from kubequeue.kube.informer import Informer, dict_codec, struct_codec
from kubequeue.kube.lease import LeaderElector
from kubequeue.kube.queue_status import QUEUE_API, QueueStatusWriter
from kubequeue.labels import PLACEMENT_LABEL
from kubequeue.objects import Namespace, Node, Pod
from kubequeue.observability import metrics
from kubequeue.observability.stalls import watch_stalls
from kubequeue.queueing.queue import JobQueue
from kubequeue.settings import Settings, debug_listener
from kubequeue.status import queue_rows, queue_status
from kubequeue.webhook.server import WebhookServer

__all__ = ["Controller", "run"]

log = structlog.get_logger(__name__)

# Only pods that hold capacity: bound to a node and not finished. Pods leaving this set arrive
# as DELETED, which is exactly when their capacity is freed.
POD_FIELD_SELECTOR = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
# Pods the webhook gated (PLACEMENT_LABEL) and not bound yet: the gated ones wait for the
# pinner. Binding takes a pod out of this set (DELETED here, ADDED to the watch above).
UNBOUND_POD_FIELD_SELECTOR = "spec.nodeName=,status.phase=Pending"
# Spare watch connections: a watch that ends is replaced at once, before its old connection may
# have been closed.
WATCH_HEADROOM = 8


def watch_count(settings: Settings) -> int:
    """Informers Controller runs, each holding one watch: nodes, bound and unbound pods,
    priority classes, namespaces, queues, and one per job kind and namespace (one per kind when
    all namespaces are watched)."""
    return 6 + len(set(settings.kinds)) * max(1, len(settings.namespaces))


def pool_limits(settings: Settings) -> PoolLimits:
    """Watches get a connection each; requests room for every admission write in flight plus
    relists, follow-ups and Events; the Lease its own two, so a renewal never waits."""
    return PoolLimits(
        watches=watch_count(settings) + WATCH_HEADROOM,
        requests=max(32, settings.max_inflight + 16),
        lease=2,
        qps=settings.kube_api_qps,
        burst=settings.kube_api_burst,
    )


class Controller:
    def __init__(self, settings: Settings, client: KubeClient) -> None:
        self.settings = settings
        self.client = client
        self.adapters = adapters_for(settings.kinds)
        self.queue = JobQueue()
        self.cache = CapacityCache(on_freed=self._wake)
        self.cache.topology_levels = settings.topology_levels
        self.reservations = Reservations(self.cache)
        self.tracker = JobTracker(self.cache, self.queue, self.reservations, on_change=self._wake)
        for adapter in self.adapters:
            self.tracker.register(adapter)
        self.events = EventRecorder(client)
        self.cycle = AdmissionCycle(
            self.tracker,
            strict_fifo=settings.strict_fifo,
            starvation_seconds=settings.starvation_seconds,
            preemption=PreemptionPolicy(lower_priority=settings.preemption == "lower-priority"),
            preemption_timeout=settings.preemption_timeout,
            binding_wait=settings.binding_wait,
            requeue=RequeuePolicy(
                timeout=settings.pods_ready_timeout,
                unplaceable=settings.unplaceable_timeout,
                limit=settings.requeue_limit,
                backoff=settings.requeue_backoff,
            ),
        )
        # Closed while an admission cycle runs in slices: whatever would change the state it
        # decides on waits (kube/gate.py). The Lease's own client does not.
        self.gate = DecisionGate()
        client.gate = self.gate
        self.loop = AdmissionLoop(
            self.tracker,
            self.cycle,
            client,
            self.events,
            max_inflight=settings.max_inflight,
            gate=self.gate,
        )
        self._owner_of = pod_owner_finder(self.adapters)
        self.pins = Pins(
            self.cache, self.reservations, self.tracker.resolve_pod, self.tracker.is_admitted
        )
        self.pinner = Pinner(
            self.pins,
            client,
            pin=settings.pin_placement,
            max_inflight=settings.max_inflight,
            gate=self.gate,
        )
        self.queues = QueueHandler(self.tracker)
        self.queue_status = QueueStatusWriter(
            client,
            self._desired_queue_status,
            lambda: self.queues.observed,
            self.events,
            gate=self.gate,
        )
        self.ready = False
        self.leading = not settings.leader_elect
        self.informers: list[Informer[Any]] = self._informers()

    def _desired_queue_status(self) -> dict[str, dict[str, Any]]:
        nodes = self.tracker.ledger.tree.nodes
        return {
            row["name"]: queue_status(row)
            for row in queue_rows(self.tracker, self.settings.strict_fifo)
            if row["name"] in nodes
        }

    def _wake(self) -> None:
        # Called from cache/tracker on every relevant change; the loop may not exist yet.
        loop = getattr(self, "loop", None)
        if loop is not None:
            loop.wake()

    def _informers(self) -> list[Informer[Any]]:
        c, s = self.client, self.settings
        out: list[Informer[Any]] = [
            Informer(
                c,
                "nodes",
                "/api/v1/nodes",
                struct_codec(Node, lambda n: n.metadata.name),
                NodeHandler(self.cache),
                watch_timeout=s.watch_timeout,
                gate=self.gate,
                on_page=self.listed_page,
            ),
            Informer(
                c,
                "pods",
                "/api/v1/pods",
                struct_codec(Pod, lambda p: p.metadata.uid),
                PodHandler(
                    self.cache,
                    self.tracker,
                    self._owner_of,
                    metrics.PODS_UNPINNED_CREATED.inc if s.pin_placement else None,
                    self.pins,
                ),
                field_selector=POD_FIELD_SELECTOR,
                watch_timeout=s.watch_timeout,
                gate=self.gate,
                on_page=self.listed_page,
            ),
            Informer(
                c,
                "unbound-pods",
                "/api/v1/pods",
                struct_codec(Pod, lambda p: p.metadata.uid),
                UnboundPodHandler(self.pins, self._owner_of, self.pinner.wake),
                field_selector=UNBOUND_POD_FIELD_SELECTOR,
                label_selector=PLACEMENT_LABEL,
                watch_timeout=s.watch_timeout,
                gate=self.gate,
                on_page=self.listed_page,
            ),
            Informer(
                c,
                "priorityclasses",
                "/apis/scheduling.k8s.io/v1/priorityclasses",
                dict_codec(),
                PriorityClassHandler(self.tracker),
                watch_timeout=s.watch_timeout,
                gate=self.gate,
                on_page=self.listed_page,
                resync=s.resync_seconds,
            ),
            # Namespaces and Queues before the job kinds: a job is put in its queue when it is
            # first seen, so the queues and the namespace labels that choose one come first.
            Informer(
                c,
                "namespaces",
                "/api/v1/namespaces",
                struct_codec(Namespace, lambda n: n.metadata.name),
                NamespaceHandler(self.tracker),
                watch_timeout=s.watch_timeout,
                gate=self.gate,
                on_page=self.listed_page,
            ),
            # Optional: without the Queue CRD every job waits in one implicit queue.
            Informer(
                c,
                "queues",
                QUEUE_API,
                dict_codec(),
                self.queues,
                watch_timeout=s.watch_timeout,
                gate=self.gate,
                on_page=self.listed_page,
                optional=True,
                resync=s.resync_seconds,
            ),
        ]
        for adapter in self.adapters:
            for namespace in s.namespaces or (None,):
                name = adapter.info.plural + (f"@{namespace}" if namespace else "")
                out.append(
                    Informer(
                        c,
                        name,
                        adapter.info.collection_path(namespace),
                        dict_codec(),
                        JobHandler(self.tracker, adapter),
                        watch_timeout=s.watch_timeout,
                        gate=self.gate,
                        on_page=self.listed_page,
                        optional=adapter.info.group not in ("", "batch"),
                        resync=s.resync_seconds,
                    )
                )
        return out

    async def run(self) -> None:
        s = self.settings
        log.info(
            "controller.starting", kinds=list(s.kinds), api=self.client.host, identity=s.identity
        )
        # Full passes of the cyclic garbage collector are ours, kept short (heap.py).
        thresholds = heap.take_over()
        try:
            await self._run()
        finally:
            heap.restore(thresholds)

    async def _run(self) -> None:
        s = self.settings
        async with anyio.create_task_group() as tg:
            tg.start_soon(heap.keep_frozen, name="heap-refreeze")
            debug_own = debug_listener(s.debug_address)
            if s.metrics_port:
                server = HealthServer(
                    s.metrics_host,
                    s.metrics_port,
                    self.tracker,
                    lambda: self.ready,
                    self.cycle,
                    lambda: self.leading,
                    debug=s.debug_address == "metrics",
                    gate=self.gate,
                )
                tg.start_soon(server.run, name="health-server")
            if debug_own is not None:
                views = HealthServer(
                    *debug_own,
                    self.tracker,
                    lambda: self.ready,
                    self.cycle,
                    lambda: self.leading,
                    probes=False,
                    gate=self.gate,
                )
                tg.start_soon(views.run, name="debug-server")
            if s.pin_placement:
                await self._check_pinning_supported()
            if s.webhook_port:
                webhook = WebhookServer(
                    s.webhook_host,
                    s.webhook_port,
                    Path(s.webhook_cert_dir),
                    gate_pods=self.pinner.pin,
                    pin_pod=self._pin_at_creation,
                )
                tg.start_soon(webhook.run, name="webhook-server")
            tg.start_soon(self.events.run, name="event-writer")
            tg.start_soon(watch_stalls, name="loop-watchdog")
            # One at a time, capacity first: an admitted job seen before the nodes and pods it
            # runs on would have its hold placed on a partial picture (relocate() fixes that
            # later, but there is no reason to start from it).
            for informer in self.informers:
                await tg.start(informer.run, name=f"informer-{informer.name}")
            self.synced()
            if s.leader_elect:
                elector = LeaderElector(
                    self.client.lease,
                    s.lease_namespace,
                    s.lease_name,
                    s.identity,
                    lease_duration=s.lease_duration,
                    renew_deadline=s.renew_deadline,
                    retry_period=s.retry_period,
                )
                tg.start_soon(elector.run, self._lead, name="leader-election")
            else:
                tg.start_soon(self._lead, name="leading")

    def _pin_at_creation(self, obj: dict[str, Any]) -> str | None:
        """The webhook asks, for a new pod: the node to pin it to now. Only the leader knows
        the plan (a standby, or a leader not synced yet, answers None: the pod is gated)."""
        if not (self.leading and self.ready and self.pinner.pin) or self.gate.closed:
            # (Mid-cycle, the plan is being decided on: the pod is gated, and pinned by the
            # pinner once the cycle is done.)
            return None
        try:
            pod = msgspec.convert(obj, Pod, strict=False)
        except msgspec.ValidationError:
            return None
        owner = self._owner_of(pod)
        host = self.pins.pin_at_creation(pod, owner)
        if host is not None:
            metrics.PODS_PINNED_AT_CREATION.inc()
        meta = pod.metadata
        log.debug(
            "pod.pinned_at_creation" if host is not None else "pod.gated",
            pod=f"{meta.namespace}/{meta.name or obj['metadata'].get('generateName')}",
            job="/".join(owner[0]) if owner is not None else None,
            host=host,
        )
        return host

    async def _check_pinning_supported(self) -> None:
        """Pinning changes a gated pod's nodeSelector, which Kubernetes allows from 1.27 and
        (pod scheduling readiness) has as GA from 1.30: older, it is turned off, once, here."""
        try:
            version = await self.client.get("/version")
            minor = int("".join(ch for ch in str(version.get("minor", "")) if ch.isdigit()))
            major = int(str(version.get("major", "0")))
        except (KubeError, ValueError) as exc:
            log.warning("pinning.version_unknown", error=str(exc), why="pinning stays on")
            return
        if (major, minor) < (1, 30):
            self.pinner.pin = False
            log.warning(
                "pinning.off",
                version=f"{major}.{minor}",
                why="pinning pods needs Kubernetes >= 1.30 (pod scheduling readiness GA); "
                "pods are not gated and run where the scheduler puts them",
            )

    def listed_page(self) -> None:
        """An informer handed over one page of its first list: until synced, what is held so
        far is frozen out of the cyclic collector at once (gc.freeze is a few pointer swaps).
        Left in it while the state grows, the collector's full passes over it (each time the
        heap grew by a quarter) would take the event loop for up to a second at 65,000
        nodes, in the middle of start-up."""
        if not self.ready:
            gc.freeze()

    def synced(self) -> None:
        """Every informer has listed: the controller is ready, and what it holds now (every
        node, pod and queued job: nearly all of its heap) is frozen out of the cyclic garbage
        collector. Those objects live until their watch says they are gone and are then freed
        by reference counting; left in the collector, each full collection would walk all of
        them again (at 20,000 nodes and 100,000 queued jobs about a second, landing in
        whichever admission cycle allocated last)."""
        self.ready = True
        gc.freeze()
        log.info(
            "controller.synced",
            nodes=len(self.cache.nodes),
            pods=self.cache.pod_count,
            queued=len(self.queue),
            holding=len(self.reservations),
        )

    async def _lead(self) -> None:
        """What only the leader does: admit, and write Queue status."""
        self.leading = True
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self.loop.run, name="admission-loop")
                tg.start_soon(self.pinner.run, name="pinner")
                self.pinner.wake()  # pods gated while no one led (or before a restart)
                tg.start_soon(self.queue_status.run, name="queue-status")
        finally:
            self.leading = False


async def run(settings: Settings) -> None:
    limits = pool_limits(settings)
    log.info(
        "controller.connection_pools",
        watches=limits.watches,
        requests=limits.requests,
        lease=limits.lease,
    )
    async with connect(settings.kubeconfig, settings.context, limits) as client:
        controller = Controller(settings, client)
        async with anyio.create_task_group() as tg:
            tg.start_soon(_stop_on_signal, tg.cancel_scope)
            await controller.run()


async def _stop_on_signal(scope: anyio.CancelScope) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            log.info("controller.stopping", signal=signal.Signals(signum).name)
            scope.cancel()
            return
