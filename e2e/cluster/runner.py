"""LocalCluster: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and KWOK as local
processes, from the binaries build.py made; no Docker, no kubelet, no downloads.

Everything of one run lives in one work directory (certificates, kubeconfigs, etcd data, and
``logs/<component>.log``), by default ``<repo>/.cluster/<run-id>/`` (git-ignored). Ports are
reserved per run (ports.py), so several clusters can run on one machine.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import json
import os
import shutil
import signal
import ssl
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from e2e.cluster import components
from e2e.cluster.build import Binaries, Log, ensure_binaries, say
from e2e.cluster.certs import generate_pki
from e2e.cluster.kubeconfig import write_kubeconfig
from e2e.cluster.nodes import FAKE_NODE_LABEL, FAKE_NODE_LABEL_VALUE, NodeSpec, node_list_json
from e2e.cluster.ports import PortReservation
from e2e.cluster.probes import client_tls, http_ok, self_signed_tls
from e2e.cluster.processes import ComponentError, Process, wait_for

REPO_ROOT = Path(__file__).resolve().parents[2]
RUNS_DIR = REPO_ROOT / ".cluster"
KEEP_RUNS = 5  # older run directories (logs) are pruned at start
OWNER_FILE = "owner.pid"  # pid of the Python process that runs the cluster in this directory

ETCD_TIMEOUT_S = 30.0
APISERVER_TIMEOUT_S = 90.0
COMPONENT_TIMEOUT_S = 60.0


def start_kwok(binary: Path, kubeconfig: Path, work_dir: Path, port: int) -> Process:
    """Start the KWOK controller against any cluster and wait until it serves /healthz."""
    home = work_dir / "kwok-home"
    home.mkdir(parents=True, exist_ok=True)
    process = Process(
        "kwok",
        components.kwok(binary, kubeconfig, port),
        work_dir / "logs",
        env={**os.environ, "HOME": str(home)},
    )
    process.start()
    try:
        wait_for(
            "kwok /healthz",
            lambda: http_ok(f"http://127.0.0.1:{port}/healthz"),
            COMPONENT_TIMEOUT_S,
            process,
        )
    except BaseException:
        process.stop()
        raise
    return process


class LocalCluster:
    """A real control plane plus KWOK; use as a context manager or call start()/stop().

    ``start()`` returns once the apiserver is ready, every controller reports healthy and the
    ``default`` ServiceAccount exists (before that, pods in ``default`` are rejected).
    """

    def __init__(
        self,
        work_dir: Path | None = None,
        binaries: Binaries | None = None,
        keep_etcd_data: bool = False,
        log: Log = say,
    ) -> None:
        run_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{uuid.uuid4().hex[:4]}"
        self.work_dir = (work_dir or RUNS_DIR / run_id).resolve()
        self.logs_dir = self.work_dir / "logs"
        self.kubeconfig = self.work_dir / "admin.kubeconfig"
        self._binaries = binaries
        self._keep_etcd_data = keep_etcd_data
        self._log = log
        self._ports = PortReservation()
        self._processes: list[Process] = []
        self.server = ""
        self.timings: dict[str, float] = {}
        self.ports: components.Ports | None = None
        self._admin_tls: ssl.SSLContext | None = None

    @property
    def binaries(self) -> Binaries:
        if self._binaries is None:
            self._binaries = ensure_binaries(self._log)
        return self._binaries

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        binaries = self.binaries
        if self.work_dir.parent == RUNS_DIR:
            _prune_runs(RUNS_DIR, KEEP_RUNS - 1)
        claim_work_dir(self.work_dir)
        # Registered before the first process starts: an exception or Ctrl-C anywhere later
        # still stops whatever is running by then.
        atexit.register(self.stop)
        started = time.monotonic()
        try:
            self._start(binaries)
        except BaseException:
            self.stop()
            raise
        self.timings["total"] = time.monotonic() - started
        self._log(
            f"[cluster] up in {self.timings['total']:.1f}s ("
            + ", ".join(f"{k} {v:.1f}s" for k, v in self.timings.items() if k != "total")
            + f"); logs in {self.logs_dir}"
        )

    def _start(self, binaries: Binaries) -> None:
        take = self._ports.take
        ports = components.Ports(
            etcd_client=take(),
            etcd_peer=take(),
            apiserver=take(),
            controller_manager=take(),
            scheduler=take(),
            kwok=take(),
        )
        pki = generate_pki(self.work_dir / "pki", components.SERVICE_IP)
        self.ports = ports
        self.server = f"https://127.0.0.1:{ports.apiserver}"
        write_kubeconfig(
            self.kubeconfig, self.server, pki.ca.cert, pki.admin, "kube-queue-e2e-admin"
        )
        kcm_kubeconfig = write_kubeconfig(
            self.work_dir / "controller-manager.kubeconfig",
            self.server,
            pki.ca.cert,
            pki.controller_manager,
            "system:kube-controller-manager",
        )
        scheduler_kubeconfig = write_kubeconfig(
            self.work_dir / "scheduler.kubeconfig",
            self.server,
            pki.ca.cert,
            pki.scheduler,
            "system:kube-scheduler",
        )
        scheduler_config = self.work_dir / "scheduler-config.yaml"
        scheduler_config.write_text(components.scheduler_config(scheduler_kubeconfig))
        api_tls = client_tls(pki.ca.cert, pki.admin.cert, pki.admin.key)
        self._admin_tls = api_tls
        local_tls = self_signed_tls()

        etcd = self._spawn("etcd", components.etcd(binaries, self._etcd_dir(), ports))
        self._await(
            "etcd", f"http://127.0.0.1:{ports.etcd_client}/health", None, etcd, ETCD_TIMEOUT_S
        )

        apiserver = self._spawn(
            "kube-apiserver",
            components.kube_apiserver(binaries, pki, ports, self.work_dir / "apiserver-certs"),
        )
        self._await(
            "kube-apiserver", f"{self.server}/readyz", api_tls, apiserver, APISERVER_TIMEOUT_S
        )

        controller_manager = self._spawn(
            "kube-controller-manager",
            components.kube_controller_manager(
                binaries, pki, ports, kcm_kubeconfig, self.work_dir / "controller-manager-certs"
            ),
        )
        scheduler = self._spawn(
            "kube-scheduler",
            components.kube_scheduler(
                binaries,
                ports,
                scheduler_config,
                scheduler_kubeconfig,
                self.work_dir / "scheduler-certs",
            ),
        )
        kwok_started = time.monotonic()
        self._processes.append(
            start_kwok(binaries.kwok, self.kubeconfig, self.work_dir, ports.kwok)
        )
        self.timings["kwok"] = time.monotonic() - kwok_started
        self._await(
            "kube-controller-manager",
            f"https://127.0.0.1:{ports.controller_manager}/healthz",
            local_tls,
            controller_manager,
            COMPONENT_TIMEOUT_S,
        )
        self._await(
            "kube-scheduler",
            f"https://127.0.0.1:{ports.scheduler}/healthz",
            local_tls,
            scheduler,
            COMPONENT_TIMEOUT_S,
        )
        # The service-account controllers in kube-controller-manager create it.
        self._await(
            "default ServiceAccount",
            f"{self.server}/api/v1/namespaces/default/serviceaccounts/default",
            api_tls,
            controller_manager,
            COMPONENT_TIMEOUT_S,
        )

    def _etcd_dir(self) -> Path:
        return self.work_dir / "etcd-data"

    def _spawn(self, name: str, argv: Sequence[str]) -> Process:
        process = Process(name, argv, self.logs_dir)
        process.start()
        self._processes.append(process)
        return process

    def _await(
        self, what: str, url: str, tls: ssl.SSLContext | None, process: Process, timeout_s: float
    ) -> None:
        self.timings[what] = wait_for(
            f"{what} ({url})", lambda: http_ok(url, tls), timeout_s, process
        )

    def restart(self, name: str, kill: bool = True) -> None:
        """Stop one component (SIGKILL by default: a crash, not a shutdown) and start it again
        with the same flags, without waiting for it (``healthy(name)`` says when it is back).
        For fault tests: the kube-apiserver or etcd going away under the controller. Call it
        from the main thread (see processes.py on the death signal)."""
        process = next(p for p in self._processes if p.name == name)
        if kill and process.pid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
        process.stop(grace_s=10.0)
        process.start()

    def healthy(self, name: str) -> bool:
        """Whether the kube-apiserver (/readyz) or etcd (/health) answers; raises ComponentError
        if it has exited."""
        assert self.ports is not None
        process = next(p for p in self._processes if p.name == name)
        if process.exit_code() is not None:
            raise ComponentError(f"{name} exited with code {process.exit_code()}", process)
        probes = {
            "kube-apiserver": (f"{self.server}/readyz", self._admin_tls),
            "etcd": (f"http://127.0.0.1:{self.ports.etcd_client}/health", None),
        }
        url, tls = probes[name]
        return http_ok(url, tls)

    def etcd_compact(self) -> int:
        """Compact etcd up to its current revision (through etcd's JSON gateway, no etcdctl):
        after this, a watch that resumes from an older resourceVersion gets 410 Gone once the
        API server's watch cache cannot serve it (e.g. after an API server restart). Returns the
        revision compacted to."""
        assert self.ports is not None
        base = f"http://127.0.0.1:{self.ports.etcd_client}/v3/kv"

        def post(path: str, body: dict[str, object]) -> dict[str, Any]:
            request = urllib.request.Request(
                f"{base}/{path}", data=json.dumps(body).encode(), method="POST"
            )
            with urllib.request.urlopen(request, timeout=30) as resp:
                answer: dict[str, Any] = json.loads(resp.read())
                return answer

        revision = int(post("range", {"key": base64.b64encode(b"/").decode(), "limit": 1})
                       ["header"]["revision"])
        post("compaction", {"revision": revision, "physical": True})
        return revision

    def ensure_running(self) -> None:
        """Raise ComponentError (with its log tail) if any component has exited."""
        for process in self._processes:
            if process.exit_code() is not None:
                raise ComponentError(
                    f"{process.name} exited with code {process.exit_code()}", process
                )

    def stop(self) -> None:
        """Stop all components, newest first (KWOK before the apiserver before etcd)."""
        atexit.unregister(self.stop)
        for process in reversed(self._processes):
            process.stop()
        self._processes.clear()
        self._ports.release()
        if not self._keep_etcd_data:
            shutil.rmtree(self._etcd_dir(), ignore_errors=True)

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        """Run the built kubectl against this cluster; return stdout, raise on failure."""
        result = subprocess.run(
            [str(self.binaries.kubectl), f"--kubeconfig={self.kubeconfig}", *args],
            input=stdin,
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            raise subprocess.CalledProcessError(
                result.returncode, ["kubectl", *args], result.stdout, result.stderr
            )
        return result.stdout

    def create_nodes(self, specs: Iterable[NodeSpec]) -> list[str]:
        """Create fake nodes (capacity in their status); return their names."""
        manifests = [spec.manifest() for spec in specs]
        if manifests:
            self.kubectl("create", "-f", "-", stdin=node_list_json(manifests))
        return [m["metadata"]["name"] for m in manifests]

    def delete_nodes(self, names: Iterable[str] | None = None) -> None:
        """Delete the named nodes, or every fake node if ``names`` is None."""
        if names is None:
            self.kubectl("delete", "nodes", "-l", f"{FAKE_NODE_LABEL}={FAKE_NODE_LABEL_VALUE}")
        elif names := list(names):
            self.kubectl("delete", "nodes", "--ignore-not-found", *names)


def claim_work_dir(work_dir: Path) -> None:
    """Create a run directory and mark it as ours, so no other run prunes it while we live."""
    work_dir.mkdir(parents=True, exist_ok=True)
    (work_dir / OWNER_FILE).write_text(f"{os.getpid()}\n")


def _prune_runs(runs_dir: Path, keep: int) -> None:
    """Delete all but the ``keep`` newest run directories (each holds logs, maybe etcd data),
    except those of clusters still running."""
    if not runs_dir.is_dir():
        return
    runs = sorted((p for p in runs_dir.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime)
    for old in runs[: max(0, len(runs) - keep)]:
        if not _owner_alive(old):
            shutil.rmtree(old, ignore_errors=True)


def _owner_alive(run_dir: Path) -> bool:
    try:
        os.kill(int((run_dir / OWNER_FILE).read_text()), 0)
    except (OSError, ValueError):
        return False
    return True
