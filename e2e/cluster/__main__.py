"""CLI: ``python -m e2e.cluster build`` | ``up [--nodes SPEC]`` | ``gomod-kubernetes VERSION``."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path
from types import FrameType

from e2e.cluster.build import BuildError, ensure_binaries
from e2e.cluster.gomod import regenerate_kubernetes
from e2e.cluster.nodes import NodeSpec, parse_node_specs
from e2e.cluster.processes import ComponentError
from e2e.cluster.runner import LocalCluster


def _build(_: argparse.Namespace) -> int:
    binaries = ensure_binaries()
    for name, path in vars(binaries).items():
        print(f"{name:24} {path}")
    return 0


def _up(args: argparse.Namespace) -> int:
    specs: list[NodeSpec] = [s for text in args.nodes for s in parse_node_specs(text)]

    def terminate(signum: int, _: FrameType | None) -> None:
        raise KeyboardInterrupt  # same clean shutdown as Ctrl-C

    signal.signal(signal.SIGTERM, terminate)
    signal.signal(signal.SIGHUP, terminate)
    with LocalCluster(work_dir=args.work_dir, keep_etcd_data=args.keep_data) as cluster:
        names = cluster.create_nodes(specs)
        if names:
            print(f"[cluster] fake nodes: {', '.join(names)}")
        print(f"export KUBECONFIG={cluster.kubeconfig}")
        print(f"alias kubectl={cluster.binaries.kubectl}")
        print("[cluster] running; Ctrl-C stops it", flush=True)
        try:
            while True:
                cluster.ensure_running()
                time.sleep(1)
        except KeyboardInterrupt:
            print("\n[cluster] stopping")
    return 0


def _gomod_kubernetes(args: argparse.Namespace) -> int:
    regenerate_kubernetes(args.version)
    print(f"updated e2e/cluster/gomod/kubernetes for {args.version}; the next build uses it")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.cluster", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("build", help="build all binaries (skips what is built)").set_defaults(
        run=_build
    )
    up = commands.add_parser("up", help="start a local cluster and keep it running")
    up.add_argument(
        "--nodes",
        action="append",
        default=[],
        metavar="SPEC",
        help="fake nodes: a YAML file (list of NodeSpec fields) or inline "
        "'NAME:cpu=8,memory=32Gi,gpus=4,pods=110,count=2;NAME2:...' (repeatable)",
    )
    up.add_argument("--work-dir", type=Path, help="default: .cluster/<run-id>/ in the repo")
    up.add_argument("--keep-data", action="store_true", help="keep etcd data after stopping")
    up.set_defaults(run=_up)
    gomod = commands.add_parser(
        "gomod-kubernetes", help="re-pin gomod/kubernetes to another Kubernetes release"
    )
    gomod.add_argument("version", help="e.g. v1.36.3")
    gomod.set_defaults(run=_gomod_kubernetes)
    args = parser.parse_args(argv)
    try:
        return int(args.run(args))
    except (BuildError, ComponentError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
