"""``kube-queue run | queue | version``."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import urllib.request
from collections.abc import Sequence

import anyio

from kubequeue import __version__
from kubequeue.kinds.registry import DEFAULT_KINDS, KINDS
from kubequeue.settings import Settings

__all__ = ["main"]


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
        help="kubeconfig path (default: $KUBECONFIG, ~/.kube/config, then in-cluster)",
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
        "--webhook-port",
        type=int,
        default=0,
        help="serve the mutating admission webhook on this port (0: off)",
    )
    run.add_argument("--webhook-host", default="0.0.0.0")
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
        "of it (0: never)",
    )
    run.add_argument("--max-inflight", type=int, default=16)
    run.add_argument(
        "--resync-period",
        type=float,
        default=600.0,
        help="seconds between full relists of job kinds, so every job is judged again from the "
        "server's copy (0: only after 410 Gone)",
    )

    queue = sub.add_parser("queue", help="show the queue of a running controller")
    queue.add_argument(
        "--url", default="http://127.0.0.1:8080", help="the controller's metrics address"
    )
    queue.add_argument("--json", action="store_true")

    sub.add_parser("version", help="print the version")
    return p


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
        webhook_port=args.webhook_port,
        webhook_host=args.webhook_host,
        webhook_cert_dir=args.webhook_cert_dir,
        log_format=args.log_format,
        log_level=args.log_level,
        leader_elect=args.leader_elect,
        lease_name=args.lease_name,
        strict_fifo=args.strict_fifo,
        max_inflight=args.max_inflight,
        starvation_seconds=args.starvation_timeout,
        resync_seconds=args.resync_period,
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
    settings = _settings(args)
    from kubequeue import controller
    from kubequeue.observability.logging import configure

    configure(settings.log_format, settings.log_level)
    with contextlib.suppress(KeyboardInterrupt):
        anyio.run(controller.run, settings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
