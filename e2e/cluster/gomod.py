"""Regenerate the Kubernetes wrapper module (gomod/kubernetes) for another release.

k8s.io/kubernetes replaces each of its staging modules (k8s.io/api, k8s.io/client-go, ...) with a
``./staging/...`` path, so ``go install`` refuses it and a module requiring it must repeat those
replaces with the published ``v0.<minor>.<patch>`` versions. The list changes between releases
(v1.36 added k8s.io/cri-streaming and k8s.io/streaming), so it is read from that release's go.mod,
together with its ``go`` and ``godebug`` lines, and ``go mod tidy`` fills in the rest.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from e2e.cluster.build import GOMOD_DIR

HEADER = """\
// Wrapper module: builds kube-apiserver, kube-controller-manager, kube-scheduler and kubectl
// from k8s.io/kubernetes, whose own go.mod replaces its staging modules with ./staging paths
// (so 'go install' refuses it). Regenerate with: python -m e2e.cluster gomod-kubernetes VERSION
"""


def kubernetes_go_mod(version: str) -> str:
    """The wrapper's go.mod (before tidy) for ``version``, e.g. ``v1.36.3``."""
    if not re.fullmatch(r"v1\.\d+\.\d+", version):
        raise ValueError(f"expected a release like v1.36.3, got {version!r}")
    download = subprocess.run(
        ["go", "mod", "download", "-json", f"k8s.io/kubernetes@{version}"],
        capture_output=True,
        text=True,
        check=True,
    )
    upstream = Path(json.loads(download.stdout)["GoMod"]).read_text()
    staging = re.findall(r"^\s*(k8s\.io/\S+)\s+=>\s+\./staging/", upstream, re.M)
    go_line = re.search(r"^go \S+$", upstream, re.M)
    godebug = re.search(r"^godebug .+$", upstream, re.M)
    staging_version = "v0." + version.removeprefix("v1.")
    lines = [HEADER + "module kubequeue.local/cluster/kubernetes", ""]
    lines += [go_line.group(0) if go_line else "go 1.26.0", ""]
    if godebug:
        lines += [godebug.group(0), ""]
    lines += [f"require k8s.io/kubernetes {version}", "", "replace ("]
    lines += [f"\t{name} => {name} {staging_version}" for name in sorted(staging)]
    lines += [")", ""]
    return "\n".join(lines)


def regenerate_kubernetes(version: str, directory: Path = GOMOD_DIR / "kubernetes") -> None:
    """Rewrite ``directory``/go.mod for ``version`` and tidy it (go.sum included)."""
    (directory / "go.mod").write_text(kubernetes_go_mod(version))
    subprocess.run(["go", "mod", "tidy"], cwd=directory, check=True)
