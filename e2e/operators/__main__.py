"""CLI: ``python -m e2e.operators build [NAME ...]`` builds operators (default: all) and prints
each binary with its build time; ``python -m e2e.operators crds NAME`` lists an operator's CRD
files in the Go module cache."""

from __future__ import annotations

import argparse
import sys

from e2e.cluster.build import BuildError
from e2e.operators.build import OPERATORS, build_seconds, crd_paths, ensure_operator


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.operators", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build", help="build operators (skips what is built)")
    build.add_argument("names", nargs="*", metavar="NAME",
                       help=f"any of {', '.join(OPERATORS)} (default: all)")
    crds = commands.add_parser("crds", help="print an operator's CRD files")
    crds.add_argument("name", choices=list(OPERATORS))
    args = parser.parse_args(argv)
    unknown = [n for n in getattr(args, "names", []) if n not in OPERATORS]
    if unknown:
        parser.error(f"unknown operator(s) {', '.join(unknown)}; known: {', '.join(OPERATORS)}")
    try:
        if args.command == "build":
            for name in args.names or OPERATORS:
                binary = ensure_operator(name)
                seconds = build_seconds(name)
                took = f"built in {seconds:.0f}s" if seconds is not None else "?"
                print(f"{name:10} {OPERATORS[name].version:8} {binary} ({took})")
        else:
            for path in crd_paths(args.name):
                print(path)
    except BuildError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
