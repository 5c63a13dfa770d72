"""CLI: ``python -m e2e.kueue build`` builds Kueue (skipped if cached) and prints the binary and
its build time; ``python -m e2e.kueue crds`` lists its CRD files in the Go module cache."""

from __future__ import annotations

import argparse
import sys

from e2e.cluster.build import BuildError
from e2e.kueue.build import build_seconds, crd_paths, ensure_kueue, version


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.kueue", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("build", help="build Kueue (skips it if built)")
    commands.add_parser("crds", help="print Kueue's CRD files")
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            binary = ensure_kueue()
            seconds = build_seconds()
            took = f"built in {seconds:.0f}s" if seconds is not None else "build time unknown"
            print(f"kueue {version()} {binary} ({took})")
        else:
            for path in crd_paths():
                print(path)
    except BuildError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
