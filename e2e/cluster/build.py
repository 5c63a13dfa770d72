"""Build the control-plane binaries from the pinned Go wrapper modules in ``gomod/``.

Nothing is downloaded except Go modules through the Go proxy: a clean clone plus a Go toolchain is
enough. Binaries are cached outside the clone, keyed by version, under
``${XDG_CACHE_HOME:-~/.cache}/kube-queue/bin/<component>-<version>/``, so every clone and worktree
on the machine shares one build (a cold Kubernetes build takes long on a small machine).

A build goes to a scratch directory that is renamed into place and stamped only after ``go build``
succeeded, so an interrupted build is redone instead of leaving half a set of binaries behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from e2e.cluster.processes import SET_DEATH_SIGNAL

GOMOD_DIR = Path(__file__).resolve().parent / "gomod"
STAMP_NAME = ".built.json"
PROGRESS_INTERVAL_S = 15.0

Log = Callable[[str], None]


def say(message: str) -> None:
    """Default progress output, flushed: when stdout is a file or pipe (CI, pytest capture off)
    a buffered line would show up minutes late, defeating its purpose."""
    print(message, flush=True)


@dataclass(frozen=True)
class GoBuild:
    """One ``go build`` invocation: the main packages of one wrapper module.

    The four Kubernetes commands are built together because they share most of their packages;
    one invocation compiles each shared package once and links the binaries in parallel.
    """

    component: str
    gomod: str
    module: str
    binaries: dict[str, str]  # binary name -> Go main package
    version_ldflags: tuple[str, ...] = ()

    @property
    def version(self) -> str:
        """The version pinned in the wrapper module's go.mod: the one source of truth."""
        return pinned_version(GOMOD_DIR / self.gomod / "go.mod", self.module)

    @property
    def directory(self) -> Path:
        return bin_root() / f"{self.component}-{self.version}"

    def recipe(self) -> dict[str, object]:
        """Everything that determines the output; stored in the stamp and compared on reuse."""
        return {"version": self.version, "ldflags": self.ldflags(), "binaries": self.binaries}

    def ldflags(self) -> str:
        version = self.version
        flags = ["-s", "-w"]
        for flag in self.version_ldflags:
            flags += ["-X", flag.format(version=version, minor=version.split(".")[1])]
        return " ".join(flags)


# Without these -X flags the Kubernetes binaries report v0.0.0-master, which breaks version skew
# checks in kubectl and makes the logs ambiguous.
_K8S_VERSION_LDFLAGS = (
    "k8s.io/component-base/version.gitVersion={version}",
    "k8s.io/component-base/version.gitMajor=1",
    "k8s.io/component-base/version.gitMinor={minor}",
    "k8s.io/client-go/pkg/version.gitVersion={version}",
    "k8s.io/component-base/version.gitTreeState=clean",
)

BUILDS: tuple[GoBuild, ...] = (
    GoBuild(
        component="etcd",
        gomod="etcd",
        module="go.etcd.io/etcd/server/v3",
        binaries={"etcd": "go.etcd.io/etcd/server/v3"},
    ),
    GoBuild(
        component="k8s",
        gomod="kubernetes",
        module="k8s.io/kubernetes",
        binaries={
            name: f"k8s.io/kubernetes/cmd/{name}"
            for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
        },
        version_ldflags=_K8S_VERSION_LDFLAGS,
    ),
    GoBuild(
        component="kwok",
        gomod="kwok",
        module="sigs.k8s.io/kwok",
        binaries={"kwok": "sigs.k8s.io/kwok/cmd/kwok"},
    ),
    GoBuild(
        component="helm",
        gomod="helm",
        module="helm.sh/helm/v4",
        binaries={"helm": "helm.sh/helm/v4/cmd/helm"},
        # Without it `helm version` says v4.3, and charts' helm-version checks see that.
        version_ldflags=(
            "helm.sh/helm/v4/internal/version.version={version}",
            "helm.sh/helm/v4/internal/version.gitTreeState=clean",
        ),
    ),
)


@dataclass(frozen=True)
class Binaries:
    """Absolute paths of every binary the local cluster and the e2e tests run."""

    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kubectl: Path
    kwok: Path
    helm: Path


class BuildError(RuntimeError):
    """A ``go build`` failed or Go is missing; the message says which and what to do."""


def bin_root() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "kube-queue" / "bin"


def pinned_version(go_mod: Path, module: str) -> str:
    """Return the version ``go_mod`` requires for ``module``."""
    match = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", go_mod.read_text(), re.M)
    if match is None:
        raise BuildError(f"{go_mod} does not require {module}")
    return match.group(1)


def is_built(build: GoBuild) -> bool:
    """True if the binaries exist and were built with the current recipe (a changed flag or
    package list rebuilds)."""
    directory = build.directory
    try:
        stamp = json.loads((directory / STAMP_NAME).read_text())
    except (OSError, ValueError):
        return False
    return stamp.get("recipe") == build.recipe() and all(
        (directory / name).is_file() for name in build.binaries
    )


def ensure_binaries(log: Log = say) -> Binaries:
    """Build whatever is missing and return the paths of all binaries."""
    for build in BUILDS:
        if not is_built(build):
            run_build(build, log)
    return binary_paths()


def binary_paths() -> Binaries:
    """Paths of all binaries; raises BuildError naming the build command if any is missing."""
    missing = [build.component for build in BUILDS if not is_built(build)]
    if missing:
        raise BuildError(
            f"not built yet: {', '.join(missing)}; run `python -m e2e.cluster build` "
            f"(binaries go to {bin_root()})"
        )
    paths = {
        name.replace("-", "_"): build.directory / name
        for build in BUILDS
        for name in build.binaries
    }
    return Binaries(**paths)


@contextlib.contextmanager
def _build_lock(build: GoBuild) -> Iterator[None]:
    """Serialise builds of one component across processes (two test runs starting at once)."""
    bin_root().mkdir(parents=True, exist_ok=True)
    with open(bin_root() / f".{build.component}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def run_build(build: GoBuild, log: Log = say) -> float:
    """Build one component into its versioned directory; return the wall-clock seconds."""
    go = shutil.which("go")
    if go is None:
        raise BuildError("`go` is not on PATH; install Go (the version in gomod/*/go.mod or newer)")
    with _build_lock(build):
        if is_built(build):  # another process finished it while we waited for the lock
            return 0.0
        final = build.directory
        # Leftovers of interrupted builds (we hold the lock, so none is in progress).
        for stale in final.parent.glob(f".{final.name}.partial-*"):
            shutil.rmtree(stale, ignore_errors=True)
        scratch = final.with_name(f".{final.name}.partial-{os.getpid()}")
        scratch.mkdir(parents=True)
        names = ", ".join(build.binaries)
        log(f"[build] {build.component} {build.version} ({names}) -> {final}")
        started = time.monotonic()
        _go_build(go, build, scratch, log)
        elapsed = time.monotonic() - started
        stamp = {
            "recipe": build.recipe(),
            "go": subprocess.run(
                [go, "env", "GOVERSION"], capture_output=True, text=True
            ).stdout.strip(),
            "seconds": round(elapsed, 1),
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        (scratch / STAMP_NAME).write_text(json.dumps(stamp, indent=2) + "\n")
        shutil.rmtree(final, ignore_errors=True)
        scratch.rename(final)
        log(f"[build] {build.component} done in {_fmt(elapsed)}")
        return elapsed


def _go_build(go: str, build: GoBuild, out: Path, log: Log) -> None:
    # -o DIR/ names each binary after its package's last path element; a single package gets an
    # explicit name because etcd's package path ends in /v3.
    if len(build.binaries) == 1:
        (name,) = build.binaries
        target = str(out / name)
    else:
        target = f"{out}/"
    argv = [
        go,
        "build",
        "-v",
        "-trimpath",
        "-ldflags",
        build.ldflags(),
        "-o",
        target,
        *build.binaries.values(),
    ]
    env = {**os.environ, "CGO_ENABLED": "0", "GOWORK": "off"}
    proc = subprocess.Popen(
        argv,
        cwd=GOMOD_DIR / build.gomod,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=SET_DEATH_SIGNAL,  # an interrupted build must not keep compiling
    )
    assert proc.stdout is not None
    tail: list[str] = []
    counts = {"downloaded": 0, "compiled": 0}
    started = time.monotonic()
    done = threading.Event()

    def heartbeat() -> None:
        # `go build` is silent for minutes while linking; say that it is alive.
        while not done.wait(PROGRESS_INTERVAL_S):
            last = tail[-1] if tail else "-"
            log(
                f"[build] {build.component}: {_fmt(time.monotonic() - started)} elapsed, "
                f"{counts['downloaded']} modules downloaded, {counts['compiled']} packages "
                f"compiled (last: {last})"
            )

    ticker = threading.Thread(target=heartbeat, daemon=True)
    ticker.start()
    try:
        for line in proc.stdout:
            counts["downloaded" if line.startswith("go: downloading") else "compiled"] += 1
            tail = [*tail[-39:], line.rstrip()]
        returncode = proc.wait()
    finally:
        done.set()
        if proc.poll() is None:
            proc.kill()
    if returncode != 0:
        sys.stderr.write("\n".join(tail) + "\n")
        raise BuildError(
            f"`{' '.join(argv)}` in {GOMOD_DIR / build.gomod} failed with exit code {returncode}"
        )


def _fmt(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s"
