"""Everything an operator can set, in one place, each field saying why it exists."""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass, field

from kubequeue.kinds.registry import DEFAULT_KINDS

__all__ = ["Settings", "debug_listener"]


def _default_namespace() -> str:
    """The Lease lives beside the controller: its own namespace in a pod, else "default"."""
    env = os.environ.get("POD_NAMESPACE")
    if env:
        return env
    try:
        with open("/var/run/secrets/kubernetes.io/serviceaccount/namespace") as f:
            return f.read().strip() or "default"
    except OSError:
        return "default"


def _default_identity() -> str:
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True, slots=True)
class Settings:
    kubeconfig: str | None = None
    """Path to a kubeconfig; None means $KUBECONFIG, ~/.kube/config, then in-cluster."""
    context: str | None = None
    """kubeconfig context to use (default: the current one)."""
    kinds: tuple[str, ...] = DEFAULT_KINDS
    """Job kinds to queue. Only native Jobs by default; others must be enabled explicitly."""
    namespaces: tuple[str, ...] = ()
    """Queue jobs only in these namespaces (empty: all). Capacity is always cluster-wide: pods
    in every namespace use the nodes."""
    metrics_port: int = 8080
    """Port for /metrics, /healthz, /readyz and /debug/queue (0 disables the server)."""
    metrics_host: str = "0.0.0.0"
    """Address the metrics server binds; 0.0.0.0 so Prometheus can scrape the pod."""
    debug_address: str = "metrics"
    """Where the queue views (/debug/*: job names, queues, demand, reasons) are served:
    ``metrics`` (on the metrics server, reachable by ``kubectl queue`` through the API server's
    pod proxy), ``HOST:PORT`` (their own listener, e.g. 127.0.0.1:8081 for localhost only, then
    read with ``kubectl port-forward``), or ``off``."""
    webhook_port: int = 0
    """Port of the mutating admission webhook (HTTPS); 0 disables it."""
    webhook_host: str = "0.0.0.0"
    webhook_cert_dir: str = "/etc/kube-queue/webhook"
    """Directory with tls.crt and tls.key for the webhook (the chart mounts a Secret here)."""
    topology_levels: tuple[str, ...] = ()
    """Node labels that form the cluster's topology, coarsest first (e.g. zone, block, rack,
    nvidia.com/gpu.clique): a job's preferred topology falls back through the coarser ones
    before "anywhere" (docs/topology.md). Jobs may name any node label; this only orders them."""
    pin_placement: bool = True
    """The webhook gates new pods of queued kinds (its /mutate/pod-gate path) and kube-queue
    pins each one to a node its job's plan held room on, then ungates it (capacity/pins.py).
    Off, or on a cluster older than Kubernetes 1.30: no pod is gated, and gated pods still
    around are ungated without a pin."""
    log_format: str = "auto"
    """json | console | auto (console on a terminal, JSON otherwise)."""
    log_level: str = "info"
    leader_elect: bool = True
    """Take a Lease before admitting, so replicas never admit concurrently."""
    lease_name: str = "kube-queue"
    lease_namespace: str = field(default_factory=_default_namespace)
    identity: str = field(default_factory=_default_identity)
    """This replica's name in the Lease: pod name plus a random suffix (unique per process)."""
    lease_duration: float = 15.0
    """A standby takes the Lease after seeing it unrenewed this long."""
    renew_deadline: float = 10.0
    """The leader stops admitting when it could not renew for this long: below lease_duration,
    so it has stopped before any standby can take over (the gap absorbs clock-rate skew)."""
    retry_period: float = 2.0
    strict_fifo: bool = False
    """StrictFIFO: a job that does not fit blocks every job behind it (no backfill). The default,
    BestEffortFIFO, lets smaller jobs behind it run; invalid and never-fitting jobs never block."""
    starvation_seconds: float = 1800.0
    """Under BestEffortFIFO, a job that has waited this long (since creation) without fitting
    stops backfilling behind it, and (one job at a time) gets the nodes where it would fit
    soonest held for it across all queues, so big gang jobs cannot starve. 0 disables both."""
    preemption: str = "never"
    """For jobs in the implicit queue (no Queue objects): "lower-priority" lets a job that does
    not fit preempt lower-priority jobs (Queues set their own spec.preemption)."""
    preemption_timeout: float = 300.0
    """Seconds a preemptor waits for its victims' pods to go before it gives up and queues
    again."""
    pods_ready_timeout: float = 600.0
    """An admitted job whose pods are not all Running and Ready this many seconds after its
    admission is suspended and queued again (a Queue's podsReadyTimeoutSeconds overrides it;
    0 turns it off)."""
    binding_wait: float = 0.0
    """Seconds a job that fits may wait for the pods admitted before it to be bound to nodes,
    when admitting it now could let the scheduler, binding them in its own order on nodes of
    its own choosing, leave one of them without a node (capacity/binding.py). 0 (default):
    off. On, no admitted pod waits for want of room whatever the scheduler does, at the cost
    of admission throughput when many pods are in flight and room is tight."""
    unplaceable_timeout: float = 5.0
    """Seconds a starting job's pods may have no node with room (the scheduler bound other
    pods where they were planned, kube-queue counts the room as owed, and a pod of the job is
    Unschedulable) before the job is suspended and queued again at once, with no attempt
    counted and no backoff. 0: such jobs wait for pods_ready_timeout like any other."""
    requeue_limit: int = 5
    """Requeues before kube-queue gives up on a job (GaveUp) until a user edits it."""
    requeue_backoff: float = 60.0
    """Seconds a requeued job waits before it may be admitted again, doubling with each
    requeue (at most 30 min)."""
    kube_api_qps: float = 0.0
    """Client-side limit on API requests a second (writes, lists, Events; not watch streams or
    the Lease), like client-go's --kube-api-qps. 0: no limit."""
    kube_api_burst: int = 0
    """Requests allowed at once before the qps limit applies (default: 2 x qps)."""
    max_inflight: int = 64
    """Admission patches in flight at once."""
    watch_timeout: int = 300
    """Server-side watch timeout in seconds (randomised up to +50% per watch)."""
    resync_seconds: float = 600.0
    """Job kinds and PriorityClasses are listed again at least this often, so every job is
    judged again from the server's copy (0: only after 410 Gone)."""

    def lease_problem(self) -> str | None:
        """Why the leader-election timings are unsafe, or None: a leader that could keep
        admitting after a standby took over would admit concurrently with it."""
        if not self.leader_elect:
            return None
        if not 0 < self.retry_period < self.renew_deadline < self.lease_duration:
            return (
                f"leader election needs 0 < --retry-period ({self.retry_period:g}) < "
                f"--renew-deadline ({self.renew_deadline:g}) < --lease-duration "
                f"({self.lease_duration:g})"
            )
        return None


def debug_listener(address: str) -> tuple[str, int] | None:
    """The (host, port) of a listener of its own for the queue views, or None when they are on
    the metrics server or off; ValueError saying what is wrong with a malformed address."""
    if address in ("metrics", "off"):
        return None
    host, sep, port_text = address.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(
            f"debug address {address!r}: expected 'metrics', 'off' or HOST:PORT with a port "
            "in 1-65535 (e.g. 127.0.0.1:8081)"
        )
    return host, int(port_text)
