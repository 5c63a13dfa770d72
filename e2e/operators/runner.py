"""Run the real operators out-of-cluster against the e2e cluster, as the admin.

Each operator is a child Process (e2e/cluster/processes.py: own process group, log file, killed
with its parent) started with the admin kubeconfig, leader election off where the operator allows
it, every port it opens on a reserved loopback port, and its webhooks off or satisfied:

- ray (KubeRay ray-operator): webhooks are opt-in (ENABLE_WEBHOOKS), so none run.
- training (training-operator.v1): its cert rotator needs the Secret
  ``training-operator-webhook-cert`` and the ValidatingWebhookConfiguration
  ``validator.training-operator.kubeflow.org`` to exist; we create both, the configuration
  with no webhooks, so the apiserver never calls the (unreachable) webhook server. Only the
  TFJob and PyTorchJob controllers run (``--enable-scheme``): MPIJob belongs to mpi-operator.
- mpi (mpi-operator v2): leader election cannot be switched off; it locks a Lease in the
  namespace ``mpi-operator``, which we create. Its health server is fixed at :8080.
- argo (workflow-controller): ``LEADER_ELECTION_DISABLE=true``; its ConfigMap (in namespace
  ``argo``) moves the metrics server to a reserved port.
- spark (spark-operator v2 ``controller start``): submits with ``$SPARK_HOME/bin/spark-submit``
  against ``https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT``; see e2e/operators/spark.py.

Processes are started from the calling thread, which must be the main thread (the pytest event
loop's), so the kernel's parent-death signal outlives them only as long as the session.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from e2e.cluster.build import Log, say
from e2e.cluster.ports import PortReservation
from e2e.cluster.processes import ComponentError, Process
from e2e.operators.build import crd_paths, ensure_operator, operator
from e2e.support import Kubectl, wait_until

START_TIMEOUT_S = 120.0
TRAINING_NAMESPACE = "kubeflow"
MPI_LOCK_NAMESPACE = "mpi-operator"
ARGO_NAMESPACE = "argo"
MPI_HEALTH_PORT = 8080  # hard-coded in mpi-operator's cmd/mpi-operator/app/server.go


@dataclass
class RunningOperator:
    name: str
    version: str
    process: Process
    ports: dict[str, int] = field(default_factory=dict)
    started_in_s: float = 0.0

    def tail(self, lines: int = 60) -> str:
        return self.process.tail(lines)

    def log(self) -> str:
        return self.process.log_path.read_text(errors="replace")


class Operators:
    """The session's operators: ``await start("ray")`` builds (cached), installs the CRDs from
    the pinned module and starts the operator once; later calls return the running one."""

    def __init__(self, kubectl: Kubectl, kubeconfig: Path, work_dir: Path,
                 log: Log = say) -> None:
        self.log = log
        self.kubectl = kubectl
        self.kubeconfig = kubeconfig
        self.work_dir = work_dir
        self.running: dict[str, RunningOperator] = {}
        self.crds: dict[str, list[str]] = {}
        self._ports = PortReservation()
        self._lock = asyncio.Lock()

    # ------------------------------------------------------------------ CRDs
    async def install_crds(self, name: str) -> list[str]:
        """Apply the operator's CRDs from its pinned module (server-side) and wait until the
        API server serves them; returns the CRD names."""
        if name in self.crds:
            return self.crds[name]
        paths = await asyncio.to_thread(crd_paths, name)
        names = [_crd_name(p) for p in paths]
        args = ["apply", "--server-side", "--force-conflicts"]
        for path in paths:
            args += ["-f", str(path)]
        await self.kubectl(*args, timeout_s=120)

        async def established() -> bool:
            found = await self.kubectl.json("get", "crd", *names)
            items = found.get("items", [found])
            return len(items) == len(names) and all(
                any(c["type"] == "Established" and c["status"] == "True"
                    for c in (crd.get("status") or {}).get("conditions") or [])
                for crd in items
            )

        await wait_until(f"{name} CRDs established", established, 60)
        self.crds[name] = names
        return names

    async def delete_crds(self, name: str) -> None:
        """Remove the operator's CRDs (and so every object of them); waits until gone."""
        names = self.crds.pop(name, None)
        if names is None:
            names = [_crd_name(p) for p in await asyncio.to_thread(crd_paths, name)]
        await self.kubectl("delete", "crd", "--ignore-not-found", "--wait=true",
                           *names, timeout_s=120)

    # ------------------------------------------------------------------ processes
    async def start(self, name: str) -> RunningOperator:
        async with self._lock:
            found = self.running.get(name)
            if found is not None:
                self._check(found)
                return found
            op = operator(name)
            # Built in the calling (main) thread: go build is tied to it by the death signal.
            binary = ensure_operator(name, self.log)
            await self.install_crds(name)
            prepare, launch = _RECIPES[name]
            await prepare(self)
            started = time.monotonic()
            argv, env, ports, ready = launch(self, binary)
            process = Process(f"operator-{name}", argv, self.work_dir / "logs", env=env)
            process.start()
            running = RunningOperator(name, op.version, process, ports)
            self.running[name] = running
            try:
                if name == "training":
                    await _mount_training_certs(self, process)
                await _wait(f"{name} operator ready", lambda: ready(running), process)
            except BaseException:
                process.stop()
                del self.running[name]
                raise
            running.started_in_s = time.monotonic() - started
            return running

    async def stop(self, name: str) -> None:
        """Stop the operator if it runs (SIGTERM, then SIGKILL); start() runs it again."""
        running = self.running.pop(name, None)
        if running is not None:
            await asyncio.to_thread(running.process.stop, 10.0)

    def ensure_running(self) -> None:
        for running in self.running.values():
            self._check(running)

    @staticmethod
    def _check(running: RunningOperator) -> None:
        code = running.process.exit_code()
        if code is not None:
            raise ComponentError(f"operator {running.name} exited with code {code}",
                                 running.process)

    def stop_all(self) -> None:
        for running in self.running.values():
            running.process.stop()
        self.running.clear()
        self._ports.release()

    def port(self) -> int:
        return self._ports.take()

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
        env.update(KUBECONFIG=str(self.kubeconfig), HOME=str(self.work_dir / "home"), **extra)
        (self.work_dir / "home").mkdir(parents=True, exist_ok=True)
        return env

    def apiserver(self) -> tuple[str, int]:
        """Host and port of the admin kubeconfig's server."""
        config = yaml.safe_load(self.kubeconfig.read_text())
        context_name = self.kubectl.context or config["current-context"]
        context = next(c for c in config["contexts"] if c["name"] == context_name)["context"]
        server = next(c for c in config["clusters"]
                      if c["name"] == context["cluster"])["cluster"]["server"]
        hostport = server.split("://", 1)[1].split("/", 1)[0]
        host, _, port = hostport.rpartition(":")
        return host.strip("[]"), int(port or 443)


Launch = tuple[list[str], dict[str, str], dict[str, int], Callable[[RunningOperator], bool]]


def _crd_name(path: Path) -> str:
    for doc in yaml.safe_load_all(path.read_text()):
        if doc and doc.get("kind") == "CustomResourceDefinition":
            return str(doc["metadata"]["name"])
    raise ValueError(f"{path} holds no CustomResourceDefinition")


async def _wait(description: str, check: Callable[[], bool], process: Process,
                timeout_s: float = START_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not await asyncio.to_thread(check):
        if process.exit_code() is not None:
            raise ComponentError(
                f"{process.name} exited with code {process.exit_code()} while waiting for "
                f"{description}", process)
        if time.monotonic() > deadline:
            raise ComponentError(f"timed out after {timeout_s:.0f}s waiting for {description}",
                                 process)
        await asyncio.sleep(0.5)


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _log_has(text: str) -> Callable[[RunningOperator], bool]:
    def check(running: RunningOperator) -> bool:
        try:
            return text in running.log()
        except OSError:
            return False

    return check


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


async def _ensure_namespace(kubectl: Kubectl, name: str) -> None:
    existing = await kubectl("get", "namespace", "-o", "name")
    if f"namespace/{name}" not in existing.split():
        await kubectl("create", "namespace", name)


async def _apply_all(kubectl: Kubectl, manifests: Sequence[Mapping[str, Any]]) -> None:
    await kubectl("apply", "--server-side", "--force-conflicts", "-f", "-",
                  stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(manifests)}))


# ---------------------------------------------------------------------- ray
async def _prepare_ray(ops: Operators) -> None:
    pass


def _launch_ray(ops: Operators, binary: Path) -> Launch:
    metrics, probe = ops.port(), ops.port()
    argv = [
        str(binary),
        f"--metrics-addr=127.0.0.1:{metrics}",
        f"--health-probe-bind-address=127.0.0.1:{probe}",
        "--enable-leader-election=false",
        "--log-stdout-encoder=console",
    ]
    return argv, ops.env(), {"metrics": metrics, "probe": probe}, (
        lambda r: _http_ok(f"http://127.0.0.1:{probe}/readyz")
    )


# ---------------------------------------------------------------------- training
TRAINING_WEBHOOK_CONFIG = "validator.training-operator.kubeflow.org"
TRAINING_WEBHOOK_SECRET = "training-operator-webhook-cert"


async def _prepare_training(ops: Operators) -> None:
    await _ensure_namespace(ops.kubectl, TRAINING_NAMESPACE)
    await _apply_all(ops.kubectl, [
        {"apiVersion": "v1", "kind": "Secret",
         "metadata": {"name": TRAINING_WEBHOOK_SECRET, "namespace": TRAINING_NAMESPACE}},
        # No webhooks in it: the rotator only injects its CA here, and the apiserver never
        # calls a webhook server it could not reach anyway (it runs on this host, not behind
        # a Service).
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
         "metadata": {"name": TRAINING_WEBHOOK_CONFIG}},
    ])


# Fixed in training-operator's pkg/cert (its rotator waits for the Secret's files there).
TRAINING_CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")


async def _mount_training_certs(ops: Operators, process: Process) -> None:
    """Do what the kubelet's Secret volume does in the operator's Deployment: once the cert
    rotator has filled the Secret, put its files where the rotator and the webhook server
    expect them. (A fixed path: two such operators on one machine would share it.)"""
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        secret = await ops.kubectl.json("get", "secret", TRAINING_WEBHOOK_SECRET,
                                        "-n", TRAINING_NAMESPACE)
        data = secret.get("data") or {}
        if all(data.get(k) for k in ("ca.crt", "tls.crt", "tls.key")):
            break
        if process.exit_code() is not None or time.monotonic() > deadline:
            raise ComponentError("the training-operator's cert rotator did not fill Secret "
                                 f"{TRAINING_NAMESPACE}/{TRAINING_WEBHOOK_SECRET}", process)
        await asyncio.sleep(0.5)
    await asyncio.to_thread(_write_certs, data)


def _write_certs(data: Mapping[str, str]) -> None:
    TRAINING_CERT_DIR.mkdir(parents=True, exist_ok=True)
    for key in ("ca.crt", "tls.crt", "tls.key"):
        target = TRAINING_CERT_DIR / key
        scratch = target.with_name(f".{key}.{os.getpid()}")
        scratch.write_bytes(base64.b64decode(data[key]))
        scratch.chmod(0o600)
        scratch.replace(target)


def _launch_training(ops: Operators, binary: Path) -> Launch:
    metrics, probe, webhook = ops.port(), ops.port(), ops.port()
    argv = [
        str(binary),
        f"--metrics-bind-address=127.0.0.1:{metrics}",
        f"--health-probe-bind-address=127.0.0.1:{probe}",
        f"--webhook-server-port={webhook}",
        "--leader-elect=false",
        "--enable-scheme=tfjob",
        "--enable-scheme=pytorchjob",
    ]
    env = ops.env(MY_POD_NAMESPACE=TRAINING_NAMESPACE)
    # /readyz turns 200 only once the cert rotator has written the serving certs.
    return argv, env, {"metrics": metrics, "probe": probe, "webhook": webhook}, (
        lambda r: _http_ok(f"http://127.0.0.1:{probe}/readyz")
    )


# ---------------------------------------------------------------------- mpi
async def _prepare_mpi(ops: Operators) -> None:
    await _ensure_namespace(ops.kubectl, MPI_LOCK_NAMESPACE)
    if not _port_free(MPI_HEALTH_PORT):
        raise ComponentError(
            f"mpi-operator serves health checks on the fixed port {MPI_HEALTH_PORT}, which "
            "another process holds; free it to run the MPIJob tests", None)


def _launch_mpi(ops: Operators, binary: Path) -> Launch:
    argv = [
        str(binary),
        f"--kubeConfig={ops.kubeconfig}",
        f"--lock-namespace={MPI_LOCK_NAMESPACE}",
        "--threadiness=2",
        "--kube-api-qps=50",
        "--kube-api-burst=100",
    ]
    # Ready once it leads (it starts its informers only then).
    return argv, ops.env(), {"health": MPI_HEALTH_PORT}, _log_has("Started workers")


# ---------------------------------------------------------------------- argo
ARGO_CONFIGMAP = "workflow-controller-configmap"


async def _prepare_argo(ops: Operators) -> None:
    await _ensure_namespace(ops.kubectl, ARGO_NAMESPACE)


def _launch_argo(ops: Operators, binary: Path) -> Launch:
    metrics = ops.port()
    config = {
        "metricsConfig": {"enabled": True, "port": metrics, "secure": False},
        "telemetryConfig": {"enabled": False},
    }
    manifest = {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": ARGO_CONFIGMAP, "namespace": ARGO_NAMESPACE},
        "data": {k: yaml.safe_dump(v) for k, v in config.items()},
    }
    # Written synchronously before the process starts: the controller reads it on start.
    import subprocess

    subprocess.run(
        ops.kubectl.argv("apply", "--server-side", "--force-conflicts", "-f", "-"),
        input=json.dumps(manifest).encode(), check=True, capture_output=True,
    )
    argv = [
        str(binary),
        f"--kubeconfig={ops.kubeconfig}",
        f"--namespace={ARGO_NAMESPACE}",
        f"--configmap={ARGO_CONFIGMAP}",
        f"--executor-image=quay.io/argoproj/argoexec:{operator('argo').version}",
        "--loglevel=info",
        "--workflow-workers=4",
    ]
    # INFORMER_WRITE_BACK=false: by default Argo writes its own update back into its informer
    # cache (operator.go persistUpdates -> writeBackToInformer), which can overwrite a newer
    # version that arrived meanwhile - e.g. kube-queue resuming the kube-queue-suspend step
    # right after Argo's update - so Argo never sees the resume (seen here ~1 run in 10; see
    # docs/e2e-kinds.md). With it off Argo reads only what the API server sent.
    env = ops.env(LEADER_ELECTION_DISABLE="true", INFORMER_WRITE_BACK="false")
    return argv, env, {"metrics": metrics}, (
        lambda r: _http_ok(f"http://127.0.0.1:{metrics}/metrics")
    )


# ---------------------------------------------------------------------- spark
SPARK_NAMESPACE = "spark-operator"
SPARK_ACCOUNT = "spark-operator"


async def _prepare_spark(ops: Operators) -> None:
    """The operator and its spark-submit run as a ServiceAccount with a token: Spark's
    Kubernetes client (fabric8) cannot read the admin kubeconfig's EC client key ("Invalid
    DER: object is not integer"). cluster-admin stands in for the chart's operator RBAC."""
    from e2e.operators.spark import spark_home

    await asyncio.to_thread(spark_home, ops.log)  # Maven, once per machine
    await _ensure_namespace(ops.kubectl, SPARK_NAMESPACE)
    await _apply_all(ops.kubectl, [
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": SPARK_ACCOUNT, "namespace": SPARK_NAMESPACE}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "e2e-spark-operator"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": "cluster-admin"},
         "subjects": [{"kind": "ServiceAccount", "name": SPARK_ACCOUNT,
                       "namespace": SPARK_NAMESPACE}]},
    ])
    token = (await ops.kubectl("create", "token", SPARK_ACCOUNT, "-n", SPARK_NAMESPACE,
                               "--duration", "24h")).strip()
    admin = yaml.safe_load(ops.kubeconfig.read_text())
    context_name = ops.kubectl.context or admin["current-context"]
    context = next(c for c in admin["contexts"] if c["name"] == context_name)["context"]
    cluster = next(c for c in admin["clusters"] if c["name"] == context["cluster"])
    config = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": cluster["cluster"]}],
        "users": [{"name": SPARK_ACCOUNT, "user": {"token": token}}],
        "contexts": [{"name": "spark", "context": {"cluster": "e2e", "user": SPARK_ACCOUNT}}],
        "current-context": "spark",
    }
    path = ops.work_dir / "spark-operator.kubeconfig"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)


def _launch_spark(ops: Operators, binary: Path) -> Launch:
    from e2e.operators.spark import spark_home

    probe = ops.port()
    host, port = ops.apiserver()
    argv = [
        str(binary), "controller", "start",
        "--leader-election=false",
        f"--health-probe-bind-address=127.0.0.1:{probe}",
        "--metrics-bind-address=0",
        "--enable-ui-service=false",
        "--controller-threads=4",
    ]
    env = ops.env(KUBERNETES_SERVICE_HOST=host, KUBERNETES_SERVICE_PORT=str(port),
                  SPARK_HOME=str(spark_home()))
    env["KUBECONFIG"] = str(ops.work_dir / "spark-operator.kubeconfig")
    return argv, env, {"probe": probe}, (
        lambda r: _http_ok(f"http://127.0.0.1:{probe}/readyz")
    )


_RECIPES: dict[str, tuple[Callable[[Operators], Any], Callable[[Operators, Path], Launch]]] = {
    "ray": (_prepare_ray, _launch_ray),
    "training": (_prepare_training, _launch_training),
    "mpi": (_prepare_mpi, _launch_mpi),
    "argo": (_prepare_argo, _launch_argo),
    "spark": (_prepare_spark, _launch_spark),
}
