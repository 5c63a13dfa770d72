"""Build the real job operators the kind e2e tests run, from pinned Go wrapper modules.

Same recipe as the control plane (e2e/cluster/build.py, whose GoBuild/run_build this reuses): a
wrapper module per operator under ``e2e/cluster/gomod/<operator>/`` pins the upstream version
(and repeats the upstream go.mod's replaces where it has any: spark-operator), ``go build`` runs
in it, and the binary is cached outside the clone under
``${XDG_CACHE_HOME:-~/.cache}/kube-queue/bin/<operator>-<version>/`` with a stamp recording the
recipe and the build time. An operator is built only when a test first needs it (the fixture in
e2e/operators/fixtures.py), or up front with ``python -m e2e.operators build``.

Cold build times on the 2-core reference machine are in docs/e2e-kinds.md.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from e2e.cluster.build import (
    GOMOD_DIR,
    STAMP_NAME,
    BuildError,
    GoBuild,
    Log,
    is_built,
    run_build,
    say,
)


@dataclass(frozen=True)
class Operator:
    """One upstream operator: how it is built and where its CRDs are in its module."""

    name: str  # short name used by the fixture: operators.start("ray")
    build: GoBuild
    # CRD manifests, relative to the module's root in the Go module cache.
    crd_files: tuple[str, ...]

    @property
    def binary(self) -> Path:
        (name,) = self.build.binaries
        return self.build.directory / name

    @property
    def version(self) -> str:
        return self.build.version


OPERATORS: dict[str, Operator] = {
    op.name: op
    for op in (
        Operator(
            name="ray",
            build=GoBuild(
                component="ray-operator",
                gomod="ray-operator",
                module="github.com/ray-project/kuberay/ray-operator",
                binaries={"ray-operator": "github.com/ray-project/kuberay/ray-operator"},
            ),
            crd_files=(
                "config/crd/bases/ray.io_rayclusters.yaml",
                "config/crd/bases/ray.io_rayjobs.yaml",
                # The RayService controller always runs and needs its kind served.
                "config/crd/bases/ray.io_rayservices.yaml",
            ),
        ),
        Operator(
            name="training",
            build=GoBuild(
                component="training-operator",
                gomod="training-operator",
                module="github.com/kubeflow/training-operator",
                binaries={
                    "training-operator":
                        "github.com/kubeflow/training-operator/cmd/training-operator.v1",
                },
            ),
            # Not its kubeflow.org_mpijobs.yaml (v1): mpijobs.kubeflow.org comes from
            # mpi-operator (v2beta1), and one cluster can hold only one of the two.
            crd_files=(
                "manifests/base/crds/kubeflow.org_tfjobs.yaml",
                "manifests/base/crds/kubeflow.org_pytorchjobs.yaml",
            ),
        ),
        Operator(
            name="mpi",
            build=GoBuild(
                component="mpi-operator",
                gomod="mpi-operator",
                module="github.com/kubeflow/mpi-operator",
                binaries={"mpi-operator": "github.com/kubeflow/mpi-operator/cmd/mpi-operator"},
            ),
            crd_files=("manifests/base/kubeflow.org_mpijobs.yaml",),
        ),
        Operator(
            name="argo",
            build=GoBuild(
                component="argo-workflow-controller",
                gomod="argo-workflows",
                module="github.com/argoproj/argo-workflows/v3",
                binaries={
                    "workflow-controller":
                        "github.com/argoproj/argo-workflows/v3/cmd/workflow-controller",
                },
            ),
            # The minimal CRDs are what Argo's own install manifests apply; the full ones (2.7 MB
            # for Workflow) exceed what etcd accepts in one request (kubernetes#82292).
            crd_files=tuple(
                f"manifests/base/crds/minimal/argoproj.io_{plural}.yaml"
                for plural in (
                    "workflows",
                    "workflowtemplates",
                    "clusterworkflowtemplates",
                    "cronworkflows",
                    "workflowtaskresults",
                    "workflowtasksets",
                    "workflowartifactgctasks",
                    "workfloweventbindings",
                )
            ),
        ),
        Operator(
            name="spark",
            build=GoBuild(
                component="spark-operator",
                gomod="spark-operator",
                module="github.com/kubeflow/spark-operator/v2",
                binaries={"spark-operator": "github.com/kubeflow/spark-operator/v2/cmd/operator"},
            ),
            crd_files=(
                "config/crd/bases/sparkoperator.k8s.io_sparkapplications.yaml",
                "config/crd/bases/sparkoperator.k8s.io_scheduledsparkapplications.yaml",
                "config/crd/bases/sparkoperator.k8s.io_sparkconnects.yaml",
            ),
        ),
    )
}


def operator(name: str) -> Operator:
    try:
        return OPERATORS[name]
    except KeyError:
        raise KeyError(f"unknown operator {name!r}; known: {', '.join(OPERATORS)}") from None


def ensure_operator(name: str, log: Log = say) -> Path:
    """Build the operator if its cached binary is missing or stale; return the binary."""
    op = operator(name)
    if not is_built(op.build):
        run_build(op.build, log)
    return op.binary


def build_seconds(name: str) -> float | None:
    """How long the cached binary took to build (from its stamp), if known."""
    try:
        stamp = json.loads((operator(name).build.directory / STAMP_NAME).read_text())
    except (OSError, ValueError):
        return None
    seconds = stamp.get("seconds")
    return float(seconds) if isinstance(seconds, (int, float)) else None


def module_dir(name: str) -> Path:
    """The operator's module in the Go module cache (downloaded through the proxy if needed).

    Asked of ``go mod download`` in the wrapper module, so the version is the pinned one and the
    download is verified against the wrapper's go.sum.
    """
    op = operator(name)
    proc = subprocess.run(
        ["go", "mod", "download", "-json", f"{op.build.module}@{op.version}"],
        cwd=GOMOD_DIR / op.build.gomod,
        capture_output=True,
        text=True,
        env=_go_env(),
    )
    try:
        info = json.loads(proc.stdout)
    except ValueError:
        info = {}
    if proc.returncode != 0 or "Dir" not in info:
        raise BuildError(
            f"go mod download {op.build.module}@{op.version} failed: "
            f"{info.get('Error') or proc.stderr.strip()}"
        )
    return Path(info["Dir"])


def crd_paths(name: str) -> list[Path]:
    root = module_dir(name)
    paths = [root / rel for rel in operator(name).crd_files]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise BuildError(f"CRD files missing from the {name} module: {', '.join(missing)}")
    return paths


def _go_env() -> dict[str, str]:
    return {**os.environ, "GOWORK": "off"}
