"""Command lines of the control-plane components, one function each.

Flags are those of kubeadm/kwokctl clusters, minus anything a container runtime or a kubelet would
need, plus what a test cluster wants: no fsync in etcd, no leader election, raised client QPS and
apiserver in-flight limits (a queue controller under test issues bursts of writes).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from e2e.cluster.build import Binaries
from e2e.cluster.certs import Pki
from e2e.cluster.nodes import FAKE_NODE_SELECTOR

STAGES_DIR = Path(__file__).resolve().parent / "stages"
SERVICE_CIDR = "10.96.0.0/16"
SERVICE_IP = "10.96.0.1"  # first address of SERVICE_CIDR: the `kubernetes` Service
POD_CIDR = "10.0.0.1/16"  # KWOK hands out fake pod IPs from here
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"
NODE_LEASE_SECONDS = 40  # what a kubelet uses; the node lifecycle controller trusts the Lease
CLIENT_QPS, CLIENT_BURST = 200, 400


@dataclass(frozen=True)
class Ports:
    etcd_client: int
    etcd_peer: int
    apiserver: int
    controller_manager: int
    scheduler: int
    kwok: int


def etcd(binaries: Binaries, data_dir: Path, ports: Ports) -> list[str]:
    client = f"http://127.0.0.1:{ports.etcd_client}"
    peer = f"http://127.0.0.1:{ports.etcd_peer}"
    return [
        str(binaries.etcd),
        "--name=etcd0",
        f"--data-dir={data_dir}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        # The peer port is unused in a one-member cluster but etcd binds it (default 2380, which
        # would collide between two runs).
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=etcd0={peer}",
        "--unsafe-no-fsync",
        "--quota-backend-bytes=8589934592",
        "--log-level=warn",
    ]


def kube_apiserver(binaries: Binaries, pki: Pki, ports: Ports, cert_dir: Path) -> list[str]:
    return [
        str(binaries.kube_apiserver),
        f"--etcd-servers=http://127.0.0.1:{ports.etcd_client}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={ports.apiserver}",
        f"--cert-dir={cert_dir}",
        f"--tls-cert-file={pki.apiserver.cert}",
        f"--tls-private-key-file={pki.apiserver.key}",
        f"--client-ca-file={pki.ca.cert}",
        "--authorization-mode=Node,RBAC",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        f"--service-account-issuer={SA_ISSUER}",
        f"--service-account-key-file={pki.service_account_pub}",
        f"--service-account-signing-key-file={pki.service_account_key}",
        # No kubelet-reachable address to publish for the `kubernetes` Service.
        "--endpoint-reconciler-type=none",
        "--allow-privileged=true",
        "--max-requests-inflight=800",
        "--max-mutating-requests-inflight=400",
    ]


def kube_controller_manager(
    binaries: Binaries, pki: Pki, ports: Ports, kubeconfig: Path, cert_dir: Path
) -> list[str]:
    return [
        str(binaries.kube_controller_manager),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports.controller_manager}",
        f"--cert-dir={cert_dir}",
        "--leader-elect=false",
        "--controllers=*",
        f"--root-ca-file={pki.ca.cert}",
        f"--service-account-private-key-file={pki.service_account_key}",
        # Each controller acts as its own service account, so RBAC is exercised as in kubeadm.
        "--use-service-account-credentials=true",
        f"--cluster-signing-cert-file={pki.ca.cert}",
        f"--cluster-signing-key-file={pki.ca.key}",
        f"--kube-api-qps={CLIENT_QPS}",
        f"--kube-api-burst={CLIENT_BURST}",
    ]


def scheduler_config(kubeconfig: Path) -> str:
    """KubeSchedulerConfiguration: the scheduler's QPS flags are ignored once --config is set.

    Scoring packs GPUs (NodeResourcesFit MostAllocated, weighted to dominate the other scores),
    as GPU clusters are run to keep whole nodes free for big pods, and as kube-queue's placement
    simulation packs (tightest node first). With the default LeastAllocated the scheduler
    spreads small pods onto the emptiest nodes, where kube-queue had planned the big ones.
    """
    return "\n".join(
        [
            "apiVersion: kubescheduler.config.k8s.io/v1",
            "kind: KubeSchedulerConfiguration",
            "clientConnection:",
            f"  kubeconfig: {kubeconfig}",
            f"  qps: {CLIENT_QPS}",
            f"  burst: {CLIENT_BURST}",
            "leaderElection:",
            "  leaderElect: false",
            "profiles:",
            "- schedulerName: default-scheduler",
            "  plugins:",
            "    score:",
            "      enabled:",
            "      - {name: NodeResourcesFit, weight: 10}",
            "  pluginConfig:",
            "  - name: NodeResourcesFit",
            "    args:",
            "      scoringStrategy:",
            "        type: MostAllocated",
            "        resources:",
            "        - {name: nvidia.com/gpu, weight: 5}",
            "        - {name: cpu, weight: 1}",
            "        - {name: memory, weight: 1}",
            "",
        ]
    )


def kube_scheduler(
    binaries: Binaries, ports: Ports, config: Path, kubeconfig: Path, cert_dir: Path
) -> list[str]:
    return [
        str(binaries.kube_scheduler),
        f"--config={config}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports.scheduler}",
        f"--cert-dir={cert_dir}",
    ]


def kwok(binary: Path, kubeconfig: Path, port: int) -> list[str]:
    """The KWOK controller, managing only nodes annotated as fake.

    Real nodes of an existing cluster (kind) are left alone. It runs with HOME set to its work
    directory (see runner), because kwok also loads ~/.kwok/kwok.yaml, which could add stages.
    """
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        "--manage-all-nodes=false",
        f"--manage-nodes-with-annotation-selector={FAKE_NODE_SELECTOR}",
        f"--node-lease-duration-seconds={NODE_LEASE_SECONDS}",
        f"--cidr={POD_CIDR}",
        # Only /healthz is used; without an address kwok serves nothing and cannot be probed.
        f"--server-address=127.0.0.1:{port}",
        *(f"--config={stage}" for stage in sorted(STAGES_DIR.glob("*.yaml"))),
    ]
