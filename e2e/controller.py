"""Run the real kube-queue controller as a separate process against the e2e cluster.

A separate process (not a task in the test's event loop) because the tests kill it with SIGKILL
to prove restarts are safe, and because that is how it runs in production.

It runs under the identity the Helm chart creates: the chart is rendered with our helm, its
ServiceAccount / ClusterRole / Role / bindings are applied, and the controller gets a kubeconfig
with that ServiceAccount's token. Every e2e test therefore also proves the chart's RBAC is enough
(and, being least privilege, that the controller touches nothing else).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from e2e.cluster.processes import Process
from e2e.support import Kubectl, wait_until

__all__ = ["ControllerIdentity", "KubeQueue", "free_port", "install_identity", "render_chart"]

CHART = Path(__file__).resolve().parent.parent / "helm" / "kube-queue"
SYSTEM_NAMESPACE = "kube-queue-system"
RELEASE = "e2e"


async def render_chart(helm: Path, *set_values: str, namespace: str = SYSTEM_NAMESPACE,
                       release: str = RELEASE) -> list[dict[str, Any]]:
    """``helm template`` the chart; returns the manifests as dicts."""
    args = [str(helm), "template", release, str(CHART), "--namespace", namespace]
    for value in set_values:
        args += ["--set", value]
    proc = await asyncio.create_subprocess_exec(
        *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"helm template failed: {err.decode()}")
    return [doc for doc in yaml.safe_load_all(out.decode()) if doc]


class ControllerIdentity:
    """A kubeconfig that authenticates as the chart's ServiceAccount."""

    def __init__(self, kubeconfig: Path, rbac: list[dict[str, Any]] | None = None) -> None:
        self.kubeconfig = kubeconfig
        self.rbac = rbac or []
        """The RBAC objects applied for it (so a test can delete them)."""


async def install_identity(helm: Path, kubectl: Kubectl, work_dir: Path, *set_values: str,
                           release: str = RELEASE) -> ControllerIdentity:
    manifests = await render_chart(helm, *set_values, release=release)
    rbac_kinds = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
    existing = await kubectl("get", "namespace", "-o", "name")
    if f"namespace/{SYSTEM_NAMESPACE}" not in existing.split():
        await kubectl("create", "namespace", SYSTEM_NAMESPACE)
    # The chart's CRDs (crds/, installed by helm before the templates): the Queue API.
    await kubectl("apply", "--server-side", "-f", str(CHART / "crds"))
    rbac = [m for m in manifests if m["kind"] in rbac_kinds]
    await kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List",
                                                         "items": rbac}))
    account = next(m for m in rbac if m["kind"] == "ServiceAccount")["metadata"]["name"]
    token = (await kubectl("create", "token", account, "-n", SYSTEM_NAMESPACE,
                           "--duration", "24h")).strip()
    admin = yaml.safe_load(await asyncio.to_thread(Path(kubectl.kubeconfig).read_text))
    context_name = kubectl.context or admin["current-context"]
    context = next(c for c in admin["contexts"] if c["name"] == context_name)["context"]
    cluster = next(c for c in admin["clusters"] if c["name"] == context["cluster"])
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": cluster["cluster"]}],
        "users": [{"name": account, "user": {"token": token}}],
        "contexts": [{"name": "kube-queue", "context": {"cluster": "e2e", "user": account}}],
        "current-context": "kube-queue",
    }
    path = work_dir / f"kube-queue-{release}.kubeconfig"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return ControllerIdentity(path, rbac)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class KubeQueue:
    """One controller process. ``await start()``, then ``kill()`` (SIGKILL) or ``stop()``."""

    def __init__(self, identity: ControllerIdentity, log_dir: Path, name: str,
                 *extra_args: str) -> None:
        self.port = free_port()
        self.name = name
        argv = [
            sys.executable, "-m", "kubequeue", "run",
            f"--kubeconfig={identity.kubeconfig}",
            f"--metrics-port={self.port}", "--metrics-host=127.0.0.1",
            "--log-format=json", "--log-level=debug",
            f"--lease-namespace={SYSTEM_NAMESPACE}",
            *extra_args,
        ]
        env = {**os.environ, "POD_NAME": name}
        self.process = Process(name, argv, log_dir, env=env)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self, timeout_s: float = 30.0) -> KubeQueue:
        self.process.start()
        profile = os.environ.get("KUBE_QUEUE_PYSPY")
        if profile and self.process.pid is not None:
            # A sampling profile for benchmark runs (py-spy on PATH); it writes when the
            # controller exits.
            out = Path(profile) / f"{self.name}-{self.process.pid}.txt"
            await asyncio.create_subprocess_exec(
                "py-spy", "record", "--format", "raw", "-r", "100", "--pid",
                str(self.process.pid), "-o", str(out),
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
            )
        await wait_until(f"{self.name} /readyz", self._ready, timeout_s)
        return self

    async def _ready(self) -> bool:
        if not self.process.running():
            raise RuntimeError(f"{self.name} exited:\n{self.process.tail()}")
        try:
            status, _ = await asyncio.to_thread(self._get, "/readyz")
        except OSError:
            return False
        return status == 200

    def _get(self, path: str) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=5) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    async def metrics(self) -> str:
        _, body = await asyncio.to_thread(self._get, "/metrics")
        return body.decode()

    async def queue(self) -> dict[str, Any]:
        _, body = await asyncio.to_thread(self._get, "/debug/queue")
        result: dict[str, Any] = json.loads(body)
        return result

    async def view(self, path: str, field: str = "jobs") -> list[dict[str, Any]]:
        """One of the controller's JSON views (/debug/status, /debug/queues): its rows."""
        _, body = await asyncio.to_thread(self._get, path)
        rows: list[dict[str, Any]] = json.loads(body)[field]
        return rows

    async def is_leader(self) -> bool:
        return "kube_queue_leader 1.0" in await self.metrics()

    def kill(self) -> None:
        """SIGKILL: no cleanup, no lease release - the crash a restart must survive."""
        if self.process.pid is not None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.stop(grace_s=1)

    async def stop(self) -> None:
        await asyncio.to_thread(self.process.stop, 10.0)

    def log(self) -> str:
        return self.process.log_path.read_text(errors="replace")

    def log_events(self, event: str) -> list[dict[str, Any]]:
        out = []
        for line in self.log().splitlines():
            if line.startswith("{") and f'"{event}"' in line:
                out.append(json.loads(line))
        return out
