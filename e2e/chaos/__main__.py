"""``python -m e2e.chaos`` (``make chaos``): the fault campaign on a fresh local cluster.

Every fault in ``--faults`` runs ``--runs`` times (seeds ``--seed``, ``--seed``+1, ...) with
``--jobs`` jobs each; prints the Markdown table of docs/reliability.md and, with ``--json``,
every run's raw result. ``--scale`` adds the scale soak (scale.py; ``--faults ""`` runs it
alone). Exits 1 if any run found a violation.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time

import anyio

from e2e.chaos.scale import ScaleResult, soak
from e2e.chaos.scenarios import FAULTS, Campaign, RunResult, summarise
from e2e.cluster.build import ensure_binaries
from e2e.cluster.runner import LocalCluster
from e2e.controller import install_identity
from e2e.support import Kubectl


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m e2e.chaos", description=__doc__)
    p.add_argument("--faults", default=",".join(FAULTS), help=f"comma-separated: {FAULTS}")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--jobs", type=int, default=120)
    p.add_argument("--bound", type=float, default=300.0, help="liveness bound per run (s)")
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--scale", action="store_true", help="also run the scale soak")
    p.add_argument("--scale-nodes", type=int, default=500)
    p.add_argument("--scale-jobs", type=int, default=5000)
    p.add_argument("--scale-runtime", default="60,120", metavar="MIN,MAX",
                   help="seconds each soak job runs (uniform)")
    p.add_argument("--scale-hold", type=float, default=90.0,
                   help="seconds to keep sampling after the queue drained")
    return p


async def _campaign(cluster: LocalCluster, args: argparse.Namespace
                    ) -> tuple[list[RunResult], ScaleResult | None]:
    binaries = ensure_binaries()
    kubectl = Kubectl(binaries.kubectl, cluster.kubeconfig)
    identity = await install_identity(binaries.helm, kubectl, cluster.logs_dir / "kube-queue")
    campaign = Campaign(cluster, kubectl, identity, cluster.logs_dir / "kube-queue",
                        bound_s=args.bound)
    results = []
    for fault in [f.strip() for f in args.faults.split(",") if f.strip()]:
        for run in range(args.runs):
            started = time.monotonic()
            result = await campaign.run(fault, args.seed + run, args.jobs)
            results.append(result)
            print(f"[chaos] {fault} seed {result.seed}: {result.finished}/{result.jobs} finished, "
                  f"{result.faults} faults, {len(result.violations)} violations, "
                  f"{time.monotonic() - started:.0f} s"
                  + "".join(f"\n    VIOLATION {v}" for v in result.violations), flush=True)
    soaked = None
    if args.scale:
        soaked = await soak(cluster, kubectl, identity, cluster.logs_dir / "kube-queue",
                            nodes=args.scale_nodes, jobs=args.scale_jobs, seed=args.seed,
                            hold_s=args.scale_hold,
                            runtime_s=_pair(args.scale_runtime))
    return results, soaked


def _pair(text: str) -> tuple[float, float]:
    low, _, high = text.partition(",")
    return float(low), float(high or low)


def main() -> int:
    args = _parser().parse_args()
    with LocalCluster() as cluster:
        results, soaked = anyio.run(_campaign, cluster, args)
    if results:
        print("\n" + summarise(results))
    if soaked:
        print("\n" + soaked.report())
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"faults": [dataclasses.asdict(r) for r in results],
                       "scale": dataclasses.asdict(soaked) if soaked else None},
                      out, indent=1, default=str)
    failed = any(r.violations for r in results) or bool(soaked and soaked.violations)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
