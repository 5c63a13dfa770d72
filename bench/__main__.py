"""``python -m bench``: measure, then print Markdown tables (see docs/benchmarks.md).

Memory is measured in fresh child processes (``--child memory``) so the peak RSS is the state's,
not the leftovers of the timed runs; the scaling table runs each other size in a child too.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.figures import core_run, memory_run
from bench.harness import quiet_logs
from bench.report import machine, print_scaling, print_summary, summarise
from bench.state import Sizes

_ROOT = Path(__file__).resolve().parent.parent  # the child runs ``python -m bench`` from here


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--nodes", type=int, default=None, help="nodes (default 5,000)")
    p.add_argument("--pods", type=int, default=None, help="running pods (default: 10 per node)")
    p.add_argument("--jobs", type=int, default=None, help="queued jobs (default: 2 per node)")
    p.add_argument("--seed", type=int, default=6)
    p.add_argument(
        "--queues",
        type=int,
        default=0,
        help="Queue objects in a 3-level tree, jobs spread over the leaves (default 0: "
        "no queues, as a cluster without Queue objects)",
    )
    p.add_argument("--runs", type=int, default=3, help="runs per figure (median and spread)")
    p.add_argument(
        "--latency-samples",
        type=int,
        default=300,
        help="pod deletions, each followed by one cycle, per run",
    )
    p.add_argument(
        "--drain-batch",
        type=int,
        default=None,
        help="pods that end per drain round (default: 1%% of running pods)",
    )
    p.add_argument("--drain-rounds", type=int, default=300, help="most drain rounds per run")
    p.add_argument(
        "--reference-lines",
        type=int,
        default=5_000,
        help="pod lines decoded by kubernetes-asyncio for the reference figure",
    )
    p.add_argument(
        "--scaling",
        default="1000,5000,20000",
        help="node counts for the scaling table ('' to skip)",
    )
    p.add_argument("--scaling-runs", type=int, default=1)
    p.add_argument(
        "--quick", action="store_true", help="tiny sizes, one run, no scaling table: a few seconds"
    )
    p.add_argument(
        "--scale",
        action="store_true",
        help="ten times today's preset: 20,000 nodes, 200,000 running pods, 100,000 "
        "queued jobs, one run, no scaling table (issue 12's targets: pod-deleted -> "
        "admission p99 < 50 ms, first cycle < 2 s, peak RSS <= 600 MiB)",
    )
    p.add_argument(
        "--huge",
        action="store_true",
        help="the largest cluster a managed Kubernetes supports today (issue 31): 65,000 nodes, "
        "650,000 running pods, 200,000 queued jobs, --topology on, --pin on, --topology-share "
        "0.1 (unless given), one run, no scaling table. Targets: pod-deleted -> admission p99 "
        "< 50 ms (pinning included), first full cycle < 5 s, peak RSS < 2 GiB. Run time not "
        "measured yet: with --topology-share 0 expect ~20-40 min (the 20k --scale preset takes "
        "~11 min); the rack-required jobs cost far more as the cluster grows (first cycle at "
        "huge's proportions, share 0.1: 4.4 s at 5,000 nodes, ~30 s at 10,000 on 2 shared "
        "vCPUs), so with 0.1 expect hours. --nodes/--pods/--jobs override its sizes (pods and "
        "jobs keep its proportions, 10 pods and ~3.1 jobs per node) to try it smaller",
    )
    p.add_argument(
        "--giant",
        action="store_true",
        help="twice --huge, the largest cluster shown on managed Kubernetes (issue 36): 130,000 "
        "nodes, 1,300,000 running pods, 400,000 queued jobs, with --huge's settings except "
        "--topology-share 0 unless given. Targets: pod-deleted -> admission p99 < 50 ms, peak "
        "RSS < 2 GiB, first cycle < 4 s, longest event-loop stall < 100 ms. About an hour on "
        "2 vCPUs",
    )
    p.add_argument(
        "--pin",
        action="store_true",
        help="create each admitted pod the production way (issue 31): through the pod "
        "webhook's own code and Pins.pin_at_creation, bound on the node it was pinned to, its "
        "events through the unbound and bound pod watches. That per-pod work runs on the "
        "event loop, so it is added to each admitting latency sample and drain cycle, and "
        "reported per pod. Off by default, so figures stay comparable with earlier runs",
    )
    p.add_argument(
        "--topology",
        action="store_true",
        help="topology levels on the nodes: example.com/rack (32 nodes within a zone) and "
        "nvidia.com/gpu.clique on GPU nodes (<= 18 of one product in a rack); "
        "--topology-levels zone,rack,clique. Off by default (node lines stay as before)",
    )
    p.add_argument(
        "--topology-share",
        type=float,
        default=None,
        metavar="F",
        help="this fraction of the queued multi-pod GPU jobs requires one rack "
        "(kube-queue.io/topology-required: example.com/rack); implies --topology (default 0)",
    )
    p.add_argument(
        "--no-memory",
        action="store_true",
        help="skip the two memory child processes (peak RSS, heap)",
    )
    p.add_argument("--json", metavar="PATH", help="also write every raw result as JSON here")
    p.add_argument(
        "--trace",
        metavar="PATH",
        help="no figures: one run on a per-cycle clock, every cycle's decisions "
        "(evaluated, admitted jobs, placements, notices) written here as JSON, to "
        "compare two code trees",
    )
    p.add_argument("--child", choices=("core", "memory", "memory-trace"), help=argparse.SUPPRESS)
    return p


HUGE = (65_000, 650_000, 200_000)  # nodes, running pods, queued jobs
GIANT = (130_000, 1_300_000, 400_000)


def _sizes(args: argparse.Namespace, nodes: int | None = None) -> Sizes:
    topology, share = bool(args.topology), args.topology_share or 0.0
    if nodes is not None:
        return Sizes.per_node(nodes, args.seed, args.queues, topology, share)
    n = args.nodes
    jobs_per_node = HUGE[2] / HUGE[0] if args.huge or args.giant else 2
    return Sizes(
        n,
        args.pods if args.pods is not None else n * 10,
        args.jobs if args.jobs is not None else round(n * jobs_per_node),
        args.seed,
        args.queues,
        topology,
        share,
    )


def _core_run(
    args: argparse.Namespace, sizes: Sizes, trace: list[Any] | None = None
) -> dict[str, Any]:
    return core_run(
        sizes,
        latency_samples=args.latency_samples,
        drain_batch=args.drain_batch or max(1, sizes.pods // 100),
        drain_rounds=args.drain_rounds,
        reference_lines=args.reference_lines if trace is None else 0,
        trace=trace,
        pin=args.pin,
    )


def _core(args: argparse.Namespace, sizes: Sizes, runs: int) -> dict[str, Any]:
    results = [_core_run(args, sizes) for _ in range(runs)]
    return {"summary": summarise(results), "raw": results}


def _child(args: argparse.Namespace, mode: str, sizes: Sizes, runs: int = 1) -> dict[str, Any]:
    cmd = [
        sys.executable,
        "-m",
        "bench",
        "--child",
        mode,
        "--nodes",
        str(sizes.nodes),
        "--pods",
        str(sizes.pods),
        "--jobs",
        str(sizes.jobs),
        "--seed",
        str(sizes.seed),
        "--runs",
        str(runs),
        "--queues",
        str(sizes.queues),
        "--latency-samples",
        str(args.latency_samples),
        "--drain-rounds",
        str(args.drain_rounds),
        "--reference-lines",
        str(args.reference_lines),
    ]
    if args.drain_batch:
        cmd += ["--drain-batch", str(args.drain_batch)]
    if sizes.topology:
        cmd += ["--topology", "--topology-share", str(sizes.topology_share)]
    if args.pin:
        cmd.append("--pin")
    done = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=_ROOT)
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _memory(args: argparse.Namespace, sizes: Sizes) -> tuple[dict[str, Any], dict[str, Any]]:
    return _child(args, "memory", sizes), _child(args, "memory-trace", sizes)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    quiet_logs()
    if args.quick:
        args.nodes, args.pods, args.jobs = 200, 2_000, 400
        args.runs, args.latency_samples, args.drain_rounds = 1, 40, 40
        args.reference_lines, args.scaling = 300, ""
    if args.scale:
        args.nodes, args.pods, args.jobs = 20_000, 200_000, 100_000
        args.runs, args.scaling = 1, ""
    if args.huge or args.giant:
        preset = GIANT if args.giant else HUGE
        if args.nodes is None:
            args.nodes = preset[0]
            args.pods = preset[1] if args.pods is None else args.pods
            args.jobs = preset[2] if args.jobs is None else args.jobs
        args.runs, args.scaling, args.pin, args.topology = 1, "", True, True
        if args.topology_share is None:
            args.topology_share = 0.0 if args.giant else 0.1
    if args.nodes is None:
        args.nodes = 5_000
    if args.topology_share:
        args.topology = True
    sizes = _sizes(args)
    if args.trace:
        trace: list[Any] = []
        _core_run(args, sizes, trace)
        text = json.dumps(trace)
        with open(args.trace, "w") as f:
            f.write(text)
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        print(f"{len(trace)} cycles traced to {args.trace} (sha256 {digest})")
        return 0
    if args.child:
        if args.child == "core":
            out: dict[str, Any] = _core(args, sizes, args.runs)
        else:
            out = memory_run(sizes, trace=args.child == "memory-trace")
        json.dump(out, sys.stdout)
        return 0

    started = time.perf_counter()
    queues = f" {sizes.queues} Queues in a 3-level tree." if sizes.queues else ""
    if sizes.topology:
        queues += (
            f" Topology levels on the nodes (rack, GPU clique); {sizes.topology_share:g} of "
            "the queued multi-pod GPU jobs require one rack."
        )
    if args.pin:
        queues += " Pods pinned at creation (--pin)."
    print(
        f"# kube-queue admission-core benchmark\n\nMachine: {machine()}. Seed {args.seed}.{queues}"
    )
    main_result = _core(args, sizes, args.runs)
    memory, memory_trace = (None, None) if args.no_memory else _memory(args, sizes)
    print_summary(main_result["summary"], memory, memory_trace)
    report: dict[str, Any] = {
        "main": main_result,
        "memory": memory,
        "memory_trace": memory_trace,
        "scaling": [],
    }
    scale = [int(x) for x in args.scaling.split(",") if x.strip()]
    if scale:
        rows = []
        for n in scale:
            s = Sizes.per_node(n, args.seed, args.queues)
            if s == sizes:
                row = {
                    "summary": main_result["summary"],
                    "memory": memory,
                    "memory_trace": memory_trace,
                }
            else:
                core = _child(args, "core", s, args.scaling_runs)
                mem, heap = (None, None) if args.no_memory else _memory(args, s)
                row = {"summary": core["summary"], "memory": mem, "memory_trace": heap}
            rows.append(row)
        report["scaling"] = rows
        print_scaling(rows)
    print(f"\n(bench wall time {time.perf_counter() - started:.0f} s)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
