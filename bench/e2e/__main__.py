"""``python -m bench.e2e`` (``make bench-e2e``): the end-to-end benchmark on the real local
cluster, kube-queue and Kueue side by side; prints Markdown tables (docs/benchmarks.md).

Each scenario runs on a fresh cluster, ``--runs`` times per system; figures are medians with the
spread. Kueue is built from the Go module proxy on first use (minutes; cached)."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

import anyio

from bench.e2e.scenarios import Outcome, Settings, run_scenario
from bench.report import machine

SCENARIOS = ("ceiling", "burst", "backlog", "fragmentation", "topology", "baseline")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.e2e", description=__doc__)
    p.add_argument("--scenarios", default="ceiling,burst,backlog,fragmentation,baseline")
    p.add_argument("--systems", default="kube-queue,kueue")
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--nodes", type=int, default=200, help="burst: nodes x 8 GPUs")
    p.add_argument("--jobs", type=int, default=1000, help="burst and ceiling: jobs")
    p.add_argument(
        "--minutes",
        type=float,
        default=4.0,
        help="fragmentation and topology: duration (topology ends early when all finished)",
    )
    p.add_argument(
        "--scale", type=float, default=0.1, help="baseline and fragmentation job counts x this"
    )
    p.add_argument("--qps", type=float, default=100.0, help="both systems' client QPS")
    p.add_argument("--burst", type=int, default=200, help="both systems' client burst")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument(
        "--create-concurrency",
        type=int,
        default=32,
        help="burst: Job creations in flight at once (the ceiling reports the rate of each)",
    )
    p.add_argument(
        "--kube-queue-arg",
        action="append",
        default=[],
        help="an extra kube-queue flag (repeatable), for experiments",
    )
    p.add_argument("--json", metavar="PATH")
    return p


def _median(values: list[float]) -> str:
    values = [v for v in values if v == v]  # drop NaN
    if not values:
        return "-"
    med = statistics.median(values)
    if len(values) == 1:
        return f"{med:,.3g}" if abs(med) < 100 else f"{med:,.0f}"
    return f"{med:,.3g} ({min(values):,.3g}-{max(values):,.3g})"


def _table(outcomes: list[Outcome]) -> str:
    by: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for o in outcomes:
        by.setdefault((o.scenario, o.system), []).append(o.result)
    lines = []
    for (scenario, system), results in by.items():
        lines.append(f"\n### {scenario} — {system} ({len(results)} run(s))\n")
        lines.append("| figure | median (spread) |")
        lines.append("|---|---:|")
        keys = [k for k, v in results[0].items() if isinstance(v, int | float)]
        for key in keys:
            lines.append(f"| {key} | {_median([float(r[key]) for r in results])} |")
    return "\n".join(lines)


async def _main(args: argparse.Namespace) -> list[Outcome]:
    settings = Settings(
        qps=args.qps,
        burst=args.burst,
        scale=args.scale,
        seed=args.seed,
        kube_queue_args=tuple(args.kube_queue_arg),
        create_concurrency=args.create_concurrency,
    )
    outcomes: list[Outcome] = []
    for scenario in args.scenarios.split(","):
        systems = ["client loop"] if scenario == "ceiling" else args.systems.split(",")
        for system in systems:
            for run in range(args.runs):
                started = time.monotonic()
                outcome = await run_scenario(
                    scenario,
                    system,
                    settings.__class__(**{**settings.__dict__, "seed": args.seed + run}),
                    nodes=args.nodes,
                    jobs=args.jobs,
                    minutes=args.minutes,
                )
                print(
                    f"[bench-e2e] {scenario} / {outcome.system} run {run + 1}: "
                    f"{time.monotonic() - started:.0f} s",
                    file=sys.stderr,
                    flush=True,
                )
                outcomes.append(outcome)
    return outcomes


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    outcomes = anyio.run(_main, args)
    print(
        f"# kube-queue end-to-end benchmark\n\nMachine: {machine()}. Client QPS/burst for "
        f"both systems: {args.qps:g}/{args.burst}. Seed {args.seed}."
    )
    print(_table(outcomes))
    if args.json:
        with open(args.json, "w") as f:
            json.dump([o.__dict__ for o in outcomes], f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
