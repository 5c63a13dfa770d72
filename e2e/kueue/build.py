"""Build Kueue's manager from the pinned wrapper module ``e2e/cluster/gomod/kueue/``.

Same recipe as the control plane and the job operators (e2e/cluster/build.py, whose
GoBuild/run_build this reuses): ``go build`` runs in the wrapper module, the binary is cached
outside the clone under ``${XDG_CACHE_HOME:-~/.cache}/kube-queue/bin/kueue-<version>/`` with a
stamp recording the recipe and the build time. Kueue is kept out of ``BUILDS`` and
``OPERATORS`` on purpose: a cold build takes 5-10 minutes on two cores (5m29s measured with an
empty Go build cache), and neither ``make test`` nor the operator fixture should ever pay that;
only the benchmark and ``E2E_KUEUE=1`` do.

The real manager (``cmd/kueue``) is built, not ``test/performance/scheduler/minimalkueue``: the
latter has no job integrations, so it could not admit batch Jobs.
"""

from __future__ import annotations

import json
import os
import subprocess
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

MODULE = "sigs.k8s.io/kueue"

KUEUE_BUILD = GoBuild(
    component="kueue",
    gomod="kueue",
    module=MODULE,
    binaries={"kueue": f"{MODULE}/cmd/kueue"},
    # Without it the manager logs gitVersion v0.0.0-main, which makes benchmark logs ambiguous.
    version_ldflags=(f"{MODULE}/pkg/version.GitVersion={{version}}",),
)

# Relative to the module's root in the Go module cache; every file there is applied (11 CRDs in
# v0.17.0, none needing a conversion webhook).
CRD_DIR = "config/components/crd/bases"


def version() -> str:
    """The Kueue version pinned in the wrapper module's go.mod."""
    return KUEUE_BUILD.version


def binary_path() -> Path:
    """Where the cached binary is (whether or not it is built yet)."""
    return KUEUE_BUILD.directory / "kueue"


def ensure_kueue(log: Log = say) -> Path:
    """Build Kueue if its cached binary is missing or stale; return the binary.

    Call it from the main thread: ``go build`` gets a parent-death signal tied to the calling
    thread, so an interrupted session does not leave a compiler running.
    """
    if not is_built(KUEUE_BUILD):
        run_build(KUEUE_BUILD, log)
    return binary_path()


def is_kueue_built() -> bool:
    """True if a current binary is cached (a test can skip instead of building for minutes)."""
    return is_built(KUEUE_BUILD)


def build_seconds() -> float | None:
    """How long the cached binary took to build (from its stamp), if known."""
    try:
        stamp = json.loads((KUEUE_BUILD.directory / STAMP_NAME).read_text())
    except (OSError, ValueError):
        return None
    seconds = stamp.get("seconds")
    return float(seconds) if isinstance(seconds, (int, float)) else None


def module_dir() -> Path:
    """Kueue's module in the Go module cache, downloaded through the proxy if needed.

    Asked of ``go mod download`` in the wrapper module, so the version is the pinned one and the
    download is verified against the wrapper's go.sum.
    """
    proc = subprocess.run(
        ["go", "mod", "download", "-json", f"{MODULE}@{version()}"],
        cwd=GOMOD_DIR / KUEUE_BUILD.gomod,
        capture_output=True,
        text=True,
        env={**os.environ, "GOWORK": "off"},
    )
    try:
        info = json.loads(proc.stdout)
    except ValueError:
        info = {}
    if proc.returncode != 0 or "Dir" not in info:
        raise BuildError(
            f"go mod download {MODULE}@{version()} failed: "
            f"{info.get('Error') or proc.stderr.strip()}"
        )
    return Path(info["Dir"])


def crd_paths() -> list[Path]:
    """Kueue's CRD manifests from the pinned module, sorted by name."""
    paths = sorted((module_dir() / CRD_DIR).glob("*.yaml"))
    if not paths:
        raise BuildError(f"no CRD files in {module_dir() / CRD_DIR}")
    return paths
