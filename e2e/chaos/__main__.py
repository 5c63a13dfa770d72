"""``python -m e2e.chaos`` (``make chaos``): the fault campaign on a fresh local cluster.

Every fault in ``--faults`` runs ``--runs`` times (seeds ``--seed``, ``--seed``+1, ...) with
``--jobs`` jobs each; prints the Markdown table of docs/reliability.md and, with ``--json``,
every run's raw result. Exits 1 if any run found a violation.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time

import anyio

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
    return p


async def _campaign(cluster: LocalCluster, args: argparse.Namespace) -> list[RunResult]:
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
    return results


def main() -> int:
    args = _parser().parse_args()
    with LocalCluster() as cluster:
        results = anyio.run(_campaign, cluster, args)
    print("\n" + summarise(results))
    if args.json:
        with open(args.json, "w") as out:
            json.dump([dataclasses.asdict(r) for r in results], out, indent=1, default=str)
    return 1 if any(r.violations for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
