"""``kube-queue run | status | queues | queue | version``, and the kubectl plugin
``kubectl-queue status | queues`` (the same tables, reaching the leader through the kubeconfig)."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import urllib.parse
import urllib.request
from collections.abc import Sequence
from typing import Any

import anyio

from kubequeue import __version__, tables
from kubequeue.kinds.registry import DEFAULT_KINDS, KINDS
from kubequeue.scheduling import is_label_key
from kubequeue.settings import Settings, debug_listener

__all__ = ["main"]


def _debug_address(text: str) -> str:
    try:
        debug_listener(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _kinds(text: str) -> tuple[str, ...]:
    names = tuple(k.strip() for k in text.split(",") if k.strip())
    unknown = [k for k in names if k not in KINDS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown kind(s) {', '.join(unknown)}; known: {', '.join(sorted(KINDS))}"
        )
    return names


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kube-queue", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run the controller")
    run.add_argument(
        "--kubeconfig",
        help="kubeconfig path (default: in-cluster when run in a pod, else $KUBECONFIG, else "
        "~/.kube/config)",
    )
    run.add_argument("--context", help="kubeconfig context")
    run.add_argument(
        "--kinds",
        type=_kinds,
        default=DEFAULT_KINDS,
        help=f"comma-separated job kinds to queue (default: job; known: "
        f"{', '.join(sorted(KINDS))})",
    )
    run.add_argument(
        "--namespaces",
        type=lambda t: tuple(n.strip() for n in t.split(",") if n.strip()),
        default=(),
        help="comma-separated namespaces whose jobs are queued (default: all namespaces)",
    )
    run.add_argument(
        "--metrics-port",
        type=int,
        default=8080,
        help="port for /metrics /healthz /readyz /debug/queue (0: off)",
    )
    run.add_argument("--metrics-host", default="0.0.0.0")
    run.add_argument(
        "--debug-address",
        type=_debug_address,
        default="metrics",
        help="where /debug/queue, /debug/status and /debug/queues are served: 'metrics' (on the "
        "metrics port, the default; kubectl queue reads them there), HOST:PORT (their own "
        "listener, e.g. 127.0.0.1:8081 for localhost only) or 'off'",
    )
    run.add_argument(
        "--webhook-port",
        type=int,
        default=0,
        help="serve the mutating admission webhook on this port (0: off)",
    )
    run.add_argument("--webhook-host", default="0.0.0.0")
    run.add_argument(
        "--topology-levels",
        type=_label_keys,
        default=(),
        help="node labels forming the topology, coarsest first, comma-separated (e.g. "
        "topology.kubernetes.io/zone,example.com/rack): a preferred topology falls back "
        "through the coarser ones (docs/topology.md)",
    )
    run.add_argument(
        "--pin-placement",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the webhook gates new pods of queued kinds and kube-queue pins each to the node "
        "its job's plan held room on before ungating it (default on; needs Kubernetes >= 1.30 "
        "and the webhook's pod rules; off: gates still present are removed without a pin)",
    )
    run.add_argument(
        "--webhook-cert-dir",
        default="/etc/kube-queue/webhook",
        help="directory holding tls.crt and tls.key for the webhook",
    )
    run.add_argument("--log-format", choices=["auto", "json", "console"], default="auto")
    run.add_argument("--log-level", default="info")
    run.add_argument(
        "--no-leader-elect",
        dest="leader_elect",
        action="store_false",
        help="admit without taking the Lease (only for a single replica)",
    )
    run.add_argument("--lease-name", default="kube-queue")
    run.add_argument(
        "--lease-duration",
        type=float,
        default=15.0,
        help="seconds a standby waits on an unrenewed Lease before taking it (default 15)",
    )
    run.add_argument(
        "--renew-deadline",
        type=float,
        default=10.0,
        help="seconds the leader keeps admitting without renewing the Lease; must be below "
        "--lease-duration so it stops before a standby can take over (default 10)",
    )
    run.add_argument(
        "--retry-period",
        type=float,
        default=2.0,
        help="seconds between Lease attempts (default 2)",
    )
    run.add_argument(
        "--lease-namespace",
        help="namespace of the Lease (default: the pod's own namespace, else 'default')",
    )
    run.add_argument(
        "--strict-fifo",
        action="store_true",
        help="a job that does not fit blocks the jobs behind it",
    )
    run.add_argument(
        "--starvation-timeout",
        type=float,
        default=1800.0,
        help="seconds a job may wait (BestEffortFIFO) before jobs behind it stop jumping ahead "
        "of it and nodes are held for it across queues until it fits (0: never)",
    )
    run.add_argument(
        "--max-inflight",
        type=int,
        default=64,
        help="admission writes in flight at once (the end-to-end benchmark: 16 -> 64 took the "
        "backlog drain from 33%% to about 60-80%% of the API server's PATCH ceiling)",
    )
    run.add_argument(
        "--kube-api-qps",
        type=float,
        default=0.0,
        help="client-side limit on API requests a second (not watches or the Lease; 0: none)",
    )
    run.add_argument(
        "--kube-api-burst",
        type=int,
        default=0,
        help="requests allowed at once before --kube-api-qps applies (default: 2 x qps)",
    )
    run.add_argument(
        "--preemption",
        choices=["never", "lower-priority"],
        default="never",
        help="for jobs in the implicit queue (no Queue objects): lower-priority lets a job that "
        "does not fit preempt lower-priority jobs (Queues have spec.preemption)",
    )
    run.add_argument(
        "--pods-ready-timeout",
        type=float,
        default=600.0,
        help="seconds after admission by which every pod of a job must be Running and Ready, "
        "or the job is suspended and queued again (0: never)",
    )
    run.add_argument(
        "--unplaceable-timeout",
        type=float,
        default=5.0,
        help="seconds a starting job's pods may have no node with room (the scheduler bound "
        "other pods where they were planned and says Unschedulable) before the job is queued "
        "again at once, no attempt counted (0: wait for --pods-ready-timeout instead)",
    )
    run.add_argument(
        "--requeue-limit",
        type=int,
        default=5,
        help="requeues of a job whose pods never start before kube-queue gives up on it",
    )
    run.add_argument(
        "--requeue-backoff",
        type=float,
        default=60.0,
        help="seconds a requeued job waits before it may be admitted again (doubles each time, "
        "at most 30 min)",
    )
    run.add_argument(
        "--preemption-timeout",
        type=float,
        default=300.0,
        help="seconds a preemptor waits for its victims' pods to go before it queues again",
    )
    run.add_argument(
        "--binding-wait",
        type=float,
        default=0.0,
        help="seconds a job that fits may wait for pods admitted before it to be bound, when "
        "admitting it now could let the scheduler leave one of them without a node (default 0: "
        "off; it trades admission throughput for fewer Pending pods, see docs/design.md)",
    )
    run.add_argument(
        "--resync-period",
        type=float,
        default=600.0,
        help="seconds between full relists of job kinds, so every job is judged again from the "
        "server's copy (0: only after 410 Gone)",
    )

    queue = sub.add_parser("queue", help="show the queue of a running controller (flat list)")
    queue.add_argument(
        "--url", default="http://127.0.0.1:8080", help="the controller's metrics address"
    )
    queue.add_argument("--json", action="store_true")
    _view_commands(sub, url=True)

    sub.add_parser("version", help="print the version")
    return p


def _view_commands(sub: Any, url: bool) -> None:
    """``status`` and ``queues``, for kube-queue (--url) and for the kubectl plugin."""
    status = sub.add_parser("status", help="every waiting job: its place in its queue and why")
    status.add_argument("--queue", help="only this queue")
    status.add_argument("-n", "--namespace", help="only jobs in this namespace")
    status.add_argument("-o", "--output", choices=["wide", "json"], help="wide or json")
    status.add_argument("--limit", type=int, default=1000)
    status.add_argument(
        "--admitted",
        action="store_true",
        help="admitted jobs instead: their topology domain and the nodes they run on",
    )
    queues = sub.add_parser("queues", help="every Queue: min / max / used / borrowed")
    queues.add_argument("-o", "--output", choices=["wide", "json"], help="wide or json")
    for parser in (status, queues):
        if url:
            parser.add_argument(
                "--url", default="http://127.0.0.1:8080", help="the controller's metrics address"
            )


def _view_query(args: argparse.Namespace) -> tuple[str, list[tuple[str, str]]]:
    if args.command == "queues":
        return "/debug/queues", []
    query = [("limit", str(args.limit))]
    if args.queue:
        query.append(("queue", args.queue))
    if args.namespace:
        query.append(("namespace", args.namespace))
    if args.admitted:
        query.append(("admitted", "true"))
    return "/debug/status", query


def _print_view(args: argparse.Namespace, data: dict[str, Any]) -> int:
    if not data.get("leader", True):
        print("(this replica is not the leader: reasons may be missing)", file=sys.stderr)
    if args.output == "json":
        print(json.dumps(data, indent=2))
    elif args.command == "queues":
        print(tables.queue_table(data["queues"], wide=args.output == "wide"))
    elif getattr(args, "admitted", False):
        print(tables.admitted_table(data["jobs"], wide=args.output == "wide"))
    else:
        print(tables.job_table(data["jobs"], wide=args.output == "wide"))
    return 0


def _get_json(url: str, path: str, query: list[tuple[str, str]]) -> dict[str, Any]:
    full = f"{url.rstrip('/')}{path}"
    if query:
        full += "?" + urllib.parse.urlencode(query)
    with urllib.request.urlopen(full, timeout=10) as resp:
        data: dict[str, Any] = json.load(resp)
    return data


def _label_keys(text: str) -> tuple[str, ...]:
    keys = tuple(k.strip() for k in text.split(",") if k.strip())
    bad = [k for k in keys if not is_label_key(k)]
    if bad:
        raise argparse.ArgumentTypeError(f"not node label keys: {', '.join(bad)}")
    if len(set(keys)) != len(keys):
        raise argparse.ArgumentTypeError("a level is named twice")
    return keys


def _settings(args: argparse.Namespace) -> Settings:
    extra = {}
    if args.lease_namespace:
        extra["lease_namespace"] = args.lease_namespace
    return Settings(
        kubeconfig=args.kubeconfig,
        context=args.context,
        kinds=args.kinds,
        namespaces=args.namespaces,
        metrics_port=args.metrics_port,
        metrics_host=args.metrics_host,
        debug_address=args.debug_address,
        webhook_port=args.webhook_port,
        webhook_host=args.webhook_host,
        webhook_cert_dir=args.webhook_cert_dir,
        pin_placement=args.pin_placement,
        topology_levels=args.topology_levels,
        log_format=args.log_format,
        log_level=args.log_level,
        leader_elect=args.leader_elect,
        lease_name=args.lease_name,
        lease_duration=args.lease_duration,
        renew_deadline=args.renew_deadline,
        retry_period=args.retry_period,
        strict_fifo=args.strict_fifo,
        max_inflight=args.max_inflight,
        starvation_seconds=args.starvation_timeout,
        resync_seconds=args.resync_period,
        kube_api_qps=args.kube_api_qps,
        kube_api_burst=args.kube_api_burst,
        preemption=args.preemption,
        preemption_timeout=args.preemption_timeout,
        pods_ready_timeout=args.pods_ready_timeout,
        unplaceable_timeout=args.unplaceable_timeout,
        requeue_limit=args.requeue_limit,
        requeue_backoff=args.requeue_backoff,
        binding_wait=args.binding_wait,
        **extra,
    )


def _show_queue(url: str, as_json: bool) -> int:
    with urllib.request.urlopen(f"{url.rstrip('/')}/debug/queue", timeout=10) as resp:
        data = json.load(resp)
    if as_json:
        print(json.dumps(data, indent=2))
        return 0
    print(
        f"queued: {data['queued']}  admitting: {data['admitting']}  "
        f"holding capacity: {data['holding_capacity']}"
    )
    for row in data["jobs"]:
        why = row["problem"] or row["never_fits"] or row["waiting_for"] or "not evaluated yet"
        print(
            f"{row['position']:>5}  {row['kind']:<10} {row['namespace']}/{row['name']:<40} "
            f"prio={row['priority']:<6} {why}"
        )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "version":
        print(__version__)
        return 0
    if args.command == "queue":
        return _show_queue(args.url, args.json)
    if args.command in ("status", "queues"):
        path, query = _view_query(args)
        try:
            data = _get_json(args.url, path, query)
        except OSError as exc:
            print(f"error: cannot reach kube-queue at {args.url}: {exc}", file=sys.stderr)
            return 1
        return _print_view(args, data)
    settings = _settings(args)
    problem = settings.lease_problem()
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    from kubequeue import controller
    from kubequeue.observability.logging import configure

    configure(settings.log_format, settings.log_level)
    with contextlib.suppress(KeyboardInterrupt):
        anyio.run(controller.run, settings)
    return 0


def _plugin_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kubectl queue",
        description="kube-queue's views through your kubeconfig: finds the leading replica from "
        "its Lease and asks it through the API server's pod proxy (needs get on the Lease and "
        "pods/proxy in the controller's namespace).",
    )
    p.add_argument("--kubeconfig", help="kubeconfig path (default: $KUBECONFIG, ~/.kube/config)")
    p.add_argument("--context", help="kubeconfig context")
    p.add_argument(
        "--controller-namespace",
        default="kube-queue-system",
        help="namespace kube-queue runs in (default: kube-queue-system)",
    )
    p.add_argument("--lease-name", default="kube-queue")
    p.add_argument("--port", type=int, default=8080, help="the controller's metrics port")
    _view_commands(p.add_subparsers(dest="command", required=True), url=False)
    return p


async def _from_leader(args: argparse.Namespace) -> dict[str, Any]:
    from kubequeue.kube.client import connect
    from kubequeue.kube.leader_proxy import get_from_leader

    path, query = _view_query(args)
    async with connect(args.kubeconfig, args.context) as client:
        data: dict[str, Any] = await get_from_leader(
            client, args.controller_namespace, args.lease_name, args.port, path, query
        )
    return data


def plugin_main(argv: Sequence[str] | None = None) -> int:
    """``kubectl-queue``: installed beside ``kube-queue``, kubectl finds it as ``kubectl queue``."""
    from kubequeue.kube.client import ApiError
    from kubequeue.kube.credentials import CredentialError
    from kubequeue.kube.kubeconfig import ConfigError
    from kubequeue.kube.leader_proxy import LeaderNotFound

    args = _plugin_parser().parse_args(argv)
    try:
        data = anyio.run(_from_leader, args)
    except (LeaderNotFound, ApiError, ConfigError, CredentialError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return _print_view(args, data)


if __name__ == "__main__":
    sys.exit(main())
