"""The seeded synthetic cluster: the objects the API server would send, as raw watch-event lines.

One ``random.Random(seed)`` drives everything, so the same sizes and seed give byte-identical
lines. The generator keeps its own ledger of every node's free capacity, in milli-units computed
here with plain arithmetic (not with kubequeue's quantity parser), so the running pods it invents
never over-commit a node and the bench can check the controller's accounting independently.

- nodes: 8-GPU (20%), 4-GPU (30%) and CPU-only (50%); half the GPU nodes carry the usual
  ``nvidia.com/gpu`` NoSchedule taint, a few CPU nodes are dedicated (tainted), ~90% have a zone
  label, 1% are NotReady and 0.5% cordoned;
- running pods: grouped into workloads (Jobs, some admitted by kube-queue, and ReplicaSets),
  placed on random nodes with room until the pod count is reached, so the cluster is busy and
  fragmented;
- queued jobs: suspended batch/v1 Jobs of 1-64 pods, 0-8 GPUs per pod, varied CPU/memory,
  PriorityClasses, some with a zone or GPU-product nodeSelector and some tolerating the GPU taint.

With ``Sizes.topology`` the nodes also carry topology levels (labels only: no random draw is
added, so every other line stays the same): ``example.com/rack`` (racks of 32 nodes within a
zone, in node order) and, on GPU nodes, ``nvidia.com/gpu.clique`` (the GPU nodes of one product
in one rack, at most 18 per clique, as a GB200 NVL72 rack of 18 trays). With
``Sizes.topology_share`` that fraction of the queued multi-pod GPU jobs asks for one rack
(``kube-queue.io/topology-required: example.com/rack`` on the Job), drawn from a random stream
of its own so the main stream, and every other job, is unchanged.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import msgspec

from kubequeue.labels import (
    ADMITTED_AT,
    HOSTNAME,
    PLACEMENT_LABEL,
    QUEUE_LABEL,
    TOPOLOGY_DOMAIN,
    TOPOLOGY_REQUIRED,
)

__all__ = [
    "CLIQUE",
    "GPU",
    "MI",
    "PRIORITY_CLASSES",
    "RACK",
    "TOPOLOGY_LEVELS",
    "Cluster",
    "NodeRec",
    "PodRec",
    "Shape",
    "Sizes",
    "Workload",
]

GPU = "nvidia.com/gpu"
MI = 2**20 * 1000  # one MiB in milli-bytes
POD_SLOTS = 110
GPU_TAINT = ("nvidia.com/gpu", "present", "NoSchedule")
INFRA_TAINT = ("dedicated", "infra", "NoSchedule")
ZONES = ("eu-west-1a", "eu-west-1b", "eu-west-1c")
ZONE = "topology.kubernetes.io/zone"
RACK = "example.com/rack"
CLIQUE = "nvidia.com/gpu.clique"
TOPOLOGY_LEVELS = (ZONE, RACK, CLIQUE)  # coarsest first, as --topology-levels takes them
RACK_NODES = 32
CLIQUE_NODES = 18
SIDECAR_CPU_M = 100
SIDECAR_MEM_MI = 128
TS = "2026-01-0{}T{:02d}:{:02d}:{:02d}Z"
PRIORITY_CLASSES = {
    "batch-low": 100,
    "batch-normal": 1_000,
    "batch-high": 10_000,
    "research-critical": 100_000,
    "system-cluster-critical": 2_000_000_000,
    "system-node-critical": 2_000_001_000,
}
_JOB_CLASSES = (
    (None, 50),
    ("batch-low", 15),
    ("batch-normal", 20),
    ("batch-high", 10),
    ("research-critical", 5),
)
_DEFAULT_TOLERATIONS = [
    {
        "key": "node.kubernetes.io/not-ready",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
    {
        "key": "node.kubernetes.io/unreachable",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
]
_encode = msgspec.json.Encoder().encode


@dataclass(frozen=True, slots=True)
class Sizes:
    nodes: int
    pods: int
    jobs: int
    seed: int = 6
    queues: int = 0  # Queue objects in a 3-level tree (0: none, every job in the implicit queue)
    topology: bool = False  # rack and GPU-clique labels on the nodes
    topology_share: float = 0.0  # of the queued multi-pod GPU jobs, the fraction asking one rack

    @classmethod
    def per_node(
        cls,
        nodes: int,
        seed: int = 6,
        queues: int = 0,
        topology: bool = False,
        topology_share: float = 0.0,
    ) -> Sizes:
        """The issue's proportions: 10 running pods and 2 queued jobs per node."""
        return cls(nodes, nodes * 10, nodes * 2, seed, queues, topology, topology_share)


@dataclass(frozen=True, slots=True)
class NodeKind:
    name: str
    instance: str
    cpu_m: int
    mem_mi: int
    gpus: int
    product: str
    weight: int


NODE_KINDS = (
    NodeKind("gpu8", "p4d.24xlarge", 95_500, 1_000 * 1024, 8, "NVIDIA-A100-SXM4-80GB", 20),
    NodeKind("gpu4", "g6.12xlarge", 47_500, 180 * 1024, 4, "NVIDIA-L4", 30),
    NodeKind("cpu", "m7i.16xlarge", 63_500, 240 * 1024, 0, "", 50),
)


@dataclass(frozen=True, slots=True)
class Shape:
    """One pod: a main container (and maybe a log sidecar), requests in plain numbers."""

    cpu_m: int
    mem_mi: int
    gpus: int = 0
    sidecar: bool = False

    def request(self) -> dict[str, int]:
        """The effective request in milli-units (sum of containers; the init step is smaller)."""
        cpu = self.cpu_m + (SIDECAR_CPU_M if self.sidecar else 0)
        mem = self.mem_mi + (SIDECAR_MEM_MI if self.sidecar else 0)
        out = {"cpu": cpu, "memory": mem * MI, "pods": 1000}
        if self.gpus:
            out[GPU] = self.gpus * 1000
        return out


@dataclass(slots=True)
class NodeRec:
    name: str
    kind: NodeKind
    zone: str | None
    taint: tuple[str, str, str] | None
    ready: bool
    unschedulable: bool
    allocatable: dict[str, int]
    free: dict[str, int]
    rack: str | None = None
    clique: str | None = None

    def fits(self, request: dict[str, int]) -> bool:
        free = self.free
        for name, amount in request.items():
            if amount > free.get(name, 0):
                return False
        return True

    def take(self, request: dict[str, int], sign: int = 1) -> None:
        for name, amount in request.items():
            self.free[name] -= sign * amount


@dataclass(slots=True)
class PodRec:
    name: str
    uid: str
    node: str
    owner: Workload
    pinned: str | None = None  # the hostname its nodeSelector names (pinned at creation)


@dataclass(slots=True, eq=False)
class Workload:
    """A Job (queued or running) or a ReplicaSet, and its pods once they run."""

    kind: str  # "Job" or "ReplicaSet"
    namespace: str
    name: str
    uid: str
    shape: Shape
    count: int
    created: str
    priority_class: str | None = None
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, str]] = field(default_factory=list)
    admitted: bool = False  # a running Job with kube-queue's annotation
    pods: list[PodRec] = field(default_factory=list)
    topology: str | None = None  # the node label its pods must share one value of (required)
    domain: str | None = None  # kube-queue.io/topology-domain its admission recorded

    @property
    def key(self) -> tuple[str, str, str]:
        return ("Job", self.namespace, self.name)


class Cluster:
    """The generator and its ledger. With ``keep=False`` workloads are not retained (the memory
    figure feeds lines as they are made, so the generator's own objects are not measured)."""

    def __init__(self, sizes: Sizes, *, keep: bool = True) -> None:
        self.sizes = sizes
        self.keep = keep
        self.rng = random.Random(sizes.seed)
        self._rv = itertools.count(10_000)
        self._serial = itertools.count(1)
        self._review = itertools.count(1)
        self.nodes: list[NodeRec] = []
        self.by_name: dict[str, NodeRec] = {}
        self.running: list[Workload] = []
        self.queued: list[Workload] = []
        self._make_nodes()

    # ------------------------------------------------------------------ identifiers
    def _uid(self) -> str:
        h = f"{self.rng.getrandbits(128):032x}"
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"

    def _suffix(self, n: int = 5) -> str:
        return "".join(self.rng.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(n))

    def _created(self) -> str:
        s = self.rng.randrange(5 * 86_400)
        return TS.format(1 + s // 86_400, s // 3600 % 24, s // 60 % 60, s % 60)

    # ------------------------------------------------------------------ nodes
    def _make_nodes(self) -> None:
        rng = self.rng
        kinds = [k for k in NODE_KINDS for _ in range(k.weight)]
        for i in range(self.sizes.nodes):
            kind = kinds[rng.randrange(len(kinds))]
            taint = None
            if kind.gpus and rng.random() < 0.5:
                taint = GPU_TAINT
            elif not kind.gpus and rng.random() < 0.05:
                taint = INFRA_TAINT
            alloc = {"cpu": kind.cpu_m, "memory": kind.mem_mi * MI, "pods": POD_SLOTS * 1000}
            if kind.gpus:
                alloc[GPU] = kind.gpus * 1000
            rec = NodeRec(
                name=f"ip-10-{i // 65_536 % 256}-{i // 256 % 256}-{i % 256}.{kind.name}.internal",
                kind=kind,
                zone=ZONES[rng.randrange(3)] if rng.random() < 0.9 else None,
                taint=taint,
                ready=rng.random() >= 0.01,
                unschedulable=rng.random() < 0.005,
                allocatable=alloc,
                free=dict(alloc),
            )
            self.nodes.append(rec)
            self.by_name[rec.name] = rec
        if self.sizes.topology:
            self._label_topology()

    def _label_topology(self) -> None:
        """Racks of RACK_NODES nodes within a zone, GPU cliques of one product within a rack,
        in node order (no random draw: the main stream stays as without labels)."""
        in_zone: dict[str, int] = {}
        in_rack: dict[tuple[str, str], int] = {}
        for rec in self.nodes:
            zone = rec.zone or "nozone"
            i = in_zone[zone] = in_zone.get(zone, -1) + 1
            rec.rack = f"{zone}-r{i // RACK_NODES:04d}"
            if rec.kind.gpus:
                k = in_rack[(rec.rack, rec.kind.name)] = (
                    in_rack.get((rec.rack, rec.kind.name), -1) + 1
                )
                rec.clique = f"{rec.rack}.{rec.kind.name}-{k // CLIQUE_NODES}"

    def node_obj(self, n: NodeRec) -> dict[str, Any]:
        k = n.kind
        labels = {
            "kubernetes.io/hostname": n.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "node.kubernetes.io/instance-type": k.instance,
        }
        if n.zone:
            labels[ZONE] = n.zone
            labels["topology.kubernetes.io/region"] = "eu-west-1"
        if n.rack:
            labels[RACK] = n.rack
        if n.clique:
            labels[CLIQUE] = n.clique
        alloc = {
            "cpu": f"{k.cpu_m}m",
            "memory": f"{k.mem_mi * 1024}Ki",
            "pods": str(POD_SLOTS),
            "ephemeral-storage": "475Gi",
            "hugepages-1Gi": "0",
            "hugepages-2Mi": "0",
        }
        capacity = {
            "cpu": str(-(-k.cpu_m // 1000)),
            "memory": f"{k.mem_mi * 1024 + 8_388_608}Ki",
            "pods": str(POD_SLOTS),
            "ephemeral-storage": "500Gi",
        }
        if k.gpus:
            labels["nvidia.com/gpu.product"] = k.product
            labels["nvidia.com/gpu.count"] = str(k.gpus)
            alloc[GPU] = capacity[GPU] = str(k.gpus)
        spec: dict[str, Any] = {"providerID": f"aws:///eu-west-1a/i-0{self._suffix(16)}"}
        if n.taint:
            spec["taints"] = [{"key": n.taint[0], "value": n.taint[1], "effect": n.taint[2]}]
        if n.unschedulable:
            spec["unschedulable"] = True
        ts = "2026-01-01T00:00:00Z"
        conditions = [
            {
                "type": t,
                "status": "False",
                "lastHeartbeatTime": ts,
                "lastTransitionTime": ts,
                "reason": f"KubeletHas{r}",
                "message": m,
            }
            for t, r, m in (
                ("MemoryPressure", "SufficientMemory", "kubelet has enough memory"),
                ("DiskPressure", "NoDiskPressure", "kubelet has no disk pressure"),
                ("PIDPressure", "SufficientPID", "kubelet has sufficient PID"),
            )
        ]
        conditions.append(
            {
                "type": "Ready",
                "status": "True" if n.ready else "False",
                "lastHeartbeatTime": ts,
                "lastTransitionTime": ts,
                "reason": "KubeletReady" if n.ready else "NodeStatusUnknown",
                "message": "kubelet is posting ready status",
            }
        )
        return {
            "kind": "Node",
            "apiVersion": "v1",
            "metadata": {
                "name": n.name,
                "uid": self._uid(),
                "resourceVersion": self._rv_str(),
                "creationTimestamp": ts,
                "labels": labels,
                "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
            },
            "spec": spec,
            "status": {
                "capacity": capacity,
                "allocatable": alloc,
                "conditions": conditions,
                "addresses": [
                    {"type": "InternalIP", "address": "10.0.0.1"},
                    {"type": "Hostname", "address": n.name},
                ],
                "nodeInfo": {
                    "kubeletVersion": "v1.36.3",
                    "containerRuntimeVersion": "containerd://2.1.4",
                    "osImage": "Bottlerocket OS 1.40.0",
                    "architecture": "amd64",
                    "operatingSystem": "linux",
                },
            },
        }

    def node_lines(self) -> Iterator[bytes]:
        for n in self.nodes:
            yield event("ADDED", self.node_obj(n))

    def _rv_str(self) -> str:
        return str(next(self._rv))

    # ------------------------------------------------------------------ running workloads
    def running_workloads(self) -> Iterator[Workload]:
        """Invent running workloads until ``sizes.pods`` pods are bound, charging the ledger."""
        rng = self.rng
        gpu_pool = [n for n in self.nodes if n.kind.gpus]
        plain_pool = [n for n in self.nodes if n.taint is None]
        infra_pool = [n for n in self.nodes if n.taint in (None, INFRA_TAINT)]
        made = 0
        gpu_misses = misses = 0
        target = self.sizes.pods
        while made < target:
            r = rng.random()
            gpu = r < 0.3 and gpu_misses < 8 and bool(gpu_pool)
            if gpu:
                g = rng.choice((1, 1, 2, 2, 4, 8))
                shape = Shape(
                    g * rng.choice((4_000, 6_000, 8_000)),
                    g * rng.choice((16, 32, 64)) * 1024,
                    g,
                    rng.random() < 0.3,
                )
                pool, tolerations = gpu_pool, [_toleration(GPU_TAINT)]
                count = rng.choice((1, 1, 2, 4, 8))
            else:
                cpu = rng.choice((500, 1_000, 2_000, 2_000, 4_000, 4_000, 8_000, 16_000))
                shape = Shape(
                    cpu, cpu * rng.choice((1, 2, 4)) * 1024 // 1000, 0, rng.random() < 0.3
                )
                infra = rng.random() < 0.05
                pool = infra_pool if infra else plain_pool
                tolerations = [_toleration(INFRA_TAINT)] if infra else []
                count = rng.randint(1, 12)
            kind = "Job" if gpu or r < 0.65 else "ReplicaSet"
            count = min(count, target - made)
            w = Workload(
                kind=kind,
                namespace=f"team-{rng.randrange(40):02d}",
                name=f"{'train' if gpu else 'svc' if kind == 'ReplicaSet' else 'etl'}-"
                f"{next(self._serial):06d}-{self._suffix()}",
                uid=self._uid(),
                shape=shape,
                count=count,
                created=self._created(),
                tolerations=tolerations,
                admitted=kind == "Job" and rng.random() < 0.5,
            )
            request = shape.request()
            for _ in range(count):
                node = self._find(pool, request, tries=16)
                if node is None and not gpu and not w.pods:
                    # The cluster is filling up: a smaller pod fits somewhere.
                    w.shape = shape = Shape(max(100, shape.cpu_m // 4), max(64, shape.mem_mi // 4))
                    request = shape.request()
                    node = self._find(pool, request, tries=64)
                if node is None:
                    break
                self.bind(w, node)
            if not w.pods:
                gpu_misses += gpu
                misses += 1
                if misses > 1_000:
                    raise ValueError(f"{target} pods do not fit on {len(self.nodes)} nodes")
                continue
            gpu_misses = misses = 0
            w.count = len(w.pods)  # a Job asks for exactly what runs: nothing missing to hold
            made += w.count
            if self.keep:
                self.running.append(w)
            yield w

    def _find(self, pool: list[NodeRec], request: dict[str, int], tries: int) -> NodeRec | None:
        rng = self.rng
        for _ in range(tries):
            node = pool[rng.randrange(len(pool))]
            if node.fits(request):
                return node
        return None

    def bind(self, w: Workload, node: NodeRec) -> PodRec:
        """A pod of ``w`` starts on ``node`` (charged to the ledger)."""
        if w.kind == "Job":
            name = f"{w.name}-{self._suffix()}"
        else:
            name = f"{w.name}-{self._suffix(9)}-{self._suffix()}"
        pod = PodRec(name=name, uid=self._uid(), node=node.name, owner=w)
        node.take(w.shape.request())
        w.pods.append(pod)
        return pod

    def unbind(self, pod: PodRec) -> None:
        self.by_name[pod.node].take(pod.owner.shape.request(), -1)

    # ------------------------------------------------------------------ queued jobs
    def queued_jobs(self) -> Iterator[Workload]:
        rng = self.rng
        share = self.sizes.topology_share
        topology_rng = random.Random(f"{self.sizes.seed}-topology")  # its own stream
        classes = [c for c, weight in _JOB_CLASSES for _ in range(weight)]
        for i in range(self.sizes.jobs):
            bucket = rng.random()
            if bucket < 0.25:
                count = 1
            elif bucket < 0.5:
                count = rng.randint(2, 4)
            elif bucket < 0.8:
                count = rng.randint(5, 16)
            else:
                count = rng.randint(17, 64)
            g = rng.choice((0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 4, 4, 4, 8, 8, 8))
            if g:
                shape = Shape(
                    g * rng.choice((4_000, 6_000, 8_000, 10_000, 11_000)),
                    g * rng.choice((32, 64, 96)) * 1024,
                    g,
                    rng.random() < 0.3,
                )
            else:
                cpu = rng.choice((250, 500, 1_000, 1_000, 2_000, 2_000, 4_000, 8_000, 16_000))
                shape = Shape(
                    cpu, cpu * rng.choice((1, 2, 4, 8)) * 1024 // 1000, 0, rng.random() < 0.3
                )
            selector: dict[str, str] = {}
            p = rng.random()
            if p < 0.15:
                selector["topology.kubernetes.io/zone"] = ZONES[rng.randrange(3)]
            elif p < 0.2 and g:
                selector["nvidia.com/gpu.product"] = rng.choice(
                    [k.product for k in NODE_KINDS if k.gpus]
                )
            tolerations = [_toleration(GPU_TAINT)] if g and rng.random() < 0.7 else []
            w = Workload(
                kind="Job",
                namespace=f"team-{rng.randrange(40):02d}",
                name=f"{'train' if g else 'batch'}-{i:06d}-{self._suffix()}",
                uid=self._uid(),
                shape=shape,
                count=count,
                created=self._created(),
                priority_class=classes[rng.randrange(len(classes))],
                node_selector=selector,
                tolerations=tolerations,
            )
            if share and g and count > 1 and topology_rng.random() < share:
                w.topology = RACK
            if self.keep:
                self.queued.append(w)
            yield w

    # ------------------------------------------------------------------ objects
    def pod_obj(
        self, pod: PodRec, *, phase: str = "Running", deleting: bool = False, bound: bool = True
    ) -> dict[str, Any]:
        """The pod as its watch has it; ``bound=False``: created and not scheduled yet (what the
        watch of unbound pods kube-queue placed sees: Pending, no nodeName)."""
        w = pod.owner
        ts = w.created
        meta: dict[str, Any] = {
            "name": pod.name,
            "generateName": pod.name[:-5],
            "namespace": w.namespace,
            "uid": pod.uid,
            "resourceVersion": self._rv_str(),
            "creationTimestamp": ts,
            **self._pod_meta(pod.name, w),
        }
        if pod.pinned is not None:
            meta["labels"][PLACEMENT_LABEL] = "pinned"
        if deleting:
            meta["deletionTimestamp"] = ts
            meta["deletionGracePeriodSeconds"] = 30
        spec = self._created_spec(w, pod.node if bound else None)
        if pod.pinned is not None:
            spec["nodeSelector"] = {**spec.get("nodeSelector", {}), HOSTNAME: pod.pinned}
        if not bound:
            return {
                "kind": "Pod",
                "apiVersion": "v1",
                "metadata": meta,
                "spec": spec,
                "status": {"phase": "Pending", "qosClass": "Burstable"},
            }
        return {
            "kind": "Pod",
            "apiVersion": "v1",
            "metadata": meta,
            "spec": spec,
            "status": {
                "phase": phase,
                "conditions": [
                    {
                        "type": t,
                        "status": "True",
                        "lastProbeTime": None,
                        "lastTransitionTime": w.created,
                    }
                    for t in (
                        "PodReadyToStartContainers",
                        "Initialized",
                        "Ready",
                        "ContainersReady",
                        "PodScheduled",
                    )
                ],
                "hostIP": "10.0.0.1",
                "qosClass": "Burstable",
                "containerStatuses": [
                    {
                        "name": "main",
                        "ready": True,
                        "restartCount": 0,
                        "image": spec["containers"][0]["image"],
                        "imageID": "",
                        "state": {"running": {}},
                    }
                ],
            },
        }

    def _pod_meta(self, name: str, w: Workload) -> dict[str, Any]:
        """A pod's labels and owner (from its name, as the ReplicaSet's template hash is)."""
        if w.kind == "Job":
            labels = {
                "batch.kubernetes.io/controller-uid": w.uid,
                "batch.kubernetes.io/job-name": w.name,
                "team": w.namespace,
            }
            api_version = "batch/v1"
        else:
            labels = {
                "app": w.name,
                "pod-template-hash": name.split("-")[-2],
                "team": w.namespace,
            }
            api_version = "apps/v1"
        return {
            "labels": labels,
            "ownerReferences": [
                {
                    "apiVersion": api_version,
                    "kind": w.kind,
                    "name": w.name,
                    "uid": w.uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        }

    def _created_spec(self, w: Workload, node: str | None = None) -> dict[str, Any]:
        """The pod spec as created: the template's, with what the API server's own admission
        plugins add before any webhook sees it (service account, priority, default
        tolerations); and ``nodeName`` once bound."""
        spec = _pod_spec(w)
        if node is not None:
            spec["nodeName"] = node
        spec["serviceAccountName"] = "default"
        spec["priority"] = PRIORITY_CLASSES.get(w.priority_class or "", 0)
        spec["tolerations"] = [*w.tolerations, *_DEFAULT_TOLERATIONS]
        return spec

    def pod_review(self, w: Workload) -> bytes:
        """The AdmissionReview the API server sends kube-queue's pod webhook when the Job
        controller creates a pod of ``w``: no name or uid yet, only generateName (Pins pins such
        a pod by its job, not by itself)."""
        meta: dict[str, Any] = {"generateName": f"{w.name}-", "namespace": w.namespace}
        meta.update(self._pod_meta(f"{w.name}-xxxxx", w))
        obj = {"kind": "Pod", "apiVersion": "v1", "metadata": meta, "spec": self._created_spec(w)}
        obj["status"] = {}
        n = next(self._review)
        review = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": f"00000000-0000-4000-8000-{n:012d}",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
                "requestResource": {"group": "", "version": "v1", "resource": "pods"},
                "namespace": w.namespace,
                "operation": "CREATE",
                "userInfo": {
                    "username": "system:serviceaccount:kube-system:job-controller",
                    "uid": "8d6f0c3e-0000-4000-8000-000000000001",
                    "groups": ["system:serviceaccounts", "system:authenticated"],
                },
                "object": obj,
                "oldObject": None,
                "dryRun": False,
                "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
            },
        }
        return _encode(review)

    def pod_line(self, pod: PodRec, type_: str = "ADDED") -> bytes:
        if type_ == "DELETED":
            phase = "Succeeded" if pod.owner.kind == "Job" else "Running"
            return event(type_, self.pod_obj(pod, phase=phase, deleting=phase == "Running"))
        return event(type_, self.pod_obj(pod))

    # ------------------------------------------------------------------ queues
    def queue_tree(self) -> tuple[list[dict[str, Any]], list[str]]:
        """``sizes.queues`` Queue objects in 3 levels: one root guaranteeing every GPU of the
        cluster, departments splitting it, leaf teams splitting their department's (max twice
        their min: they borrow). Returns the objects and the leaf names."""
        n = self.sizes.queues
        if n < 3:
            return [], []
        depts = max(1, round((n - 1) ** 0.5 / 1.1))
        leaves = n - 1 - depts
        total = sum(r.kind.gpus for r in self.nodes) or self.sizes.nodes * 4
        objs = [_queue("org", None, total, None)]
        leaf_names: list[str] = []
        per_dept = total // depts
        for d in range(depts):
            dept = f"dept-{d}"
            objs.append(_queue(dept, "org", per_dept, None))
            mine = [i for i in range(leaves) if i % depts == d]
            for i in mine:
                guarantee = per_dept // max(1, len(mine))
                name = f"team-q{i:02d}"
                objs.append(_queue(name, dept, guarantee, 2 * guarantee))
                leaf_names.append(name)
        return objs, leaf_names

    def queue_lines(self) -> list[bytes]:
        return [event("ADDED", q) for q in self.queue_tree()[0]]

    def _queue_label(self, w: Workload) -> dict[str, str]:
        if not self.sizes.queues:
            return {}
        if not hasattr(self, "_leaves"):
            self._leaves = self.queue_tree()[1]
        if not self._leaves:
            return {}
        team = int(w.namespace.rpartition("-")[2])
        return {QUEUE_LABEL: self._leaves[team % len(self._leaves)]}

    def job_obj(self, w: Workload, *, suspend: bool, complete: bool = False) -> dict[str, Any]:
        annotations = {"team.example.com/owner": f"{w.namespace}-lead"}
        if w.admitted:
            annotations[ADMITTED_AT] = "2026-01-06T00:00:00Z"
        if w.topology is not None:
            annotations[TOPOLOGY_REQUIRED[0]] = w.topology
        if w.domain is not None:
            annotations[TOPOLOGY_DOMAIN] = w.domain
        spec = _pod_spec(w)
        if w.priority_class:
            spec["priorityClassName"] = w.priority_class
        status: dict[str, Any]
        if complete:
            status = {
                "conditions": [
                    {"type": "Complete", "status": "True", "lastTransitionTime": w.created}
                ],
                "succeeded": w.count,
                "ready": 0,
            }
        elif suspend:
            status = {
                "conditions": [
                    {
                        "type": "Suspended",
                        "status": "True",
                        "reason": "JobSuspended",
                        "lastTransitionTime": w.created,
                    }
                ]
            }
        else:
            status = {"active": len(w.pods), "ready": len(w.pods), "startTime": w.created}
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": w.name,
                "namespace": w.namespace,
                "uid": w.uid,
                "resourceVersion": self._rv_str(),
                "generation": 1,
                "creationTimestamp": w.created,
                "labels": {
                    "team": w.namespace,
                    "app.kubernetes.io/name": "trainer",
                    **self._queue_label(w),
                },
                "annotations": annotations,
            },
            "spec": {
                "parallelism": w.count,
                "completions": w.count,
                "backoffLimit": 6,
                "completionMode": "NonIndexed",
                "suspend": suspend,
                "manualSelector": False,
                "podReplacementPolicy": "TerminatingOrFailed",
                "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": w.uid}},
                "template": {
                    "metadata": {
                        "labels": {"batch.kubernetes.io/job-name": w.name, "team": w.namespace}
                    },
                    "spec": spec,
                },
            },
            "status": status,
        }

    def job_line(
        self, w: Workload, *, suspend: bool, complete: bool = False, type_: str = "ADDED"
    ) -> bytes:
        return event(type_, self.job_obj(w, suspend=suspend, complete=complete))


def _queue(name: str, parent: str | None, gpus_min: int, gpus_max: int | None) -> dict[str, Any]:
    quota: dict[str, Any] = {"min": {"nvidia.com/gpu": gpus_min}}
    if gpus_max is not None:
        quota["max"] = {"nvidia.com/gpu": gpus_max}
    spec: dict[str, Any] = {"quota": quota}
    if parent:
        spec["parent"] = parent
    return {
        "apiVersion": "kube-queue.io/v1alpha1",
        "kind": "Queue",
        "metadata": {"name": name, "uid": f"queue-{name}", "resourceVersion": "1"},
        "spec": spec,
    }


def event(type_: str, obj: dict[str, Any]) -> bytes:
    return _encode({"type": type_, "object": obj})


def priority_class_lines() -> Iterator[bytes]:
    for i, (name, value) in enumerate(PRIORITY_CLASSES.items()):
        yield event(
            "ADDED",
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": name, "resourceVersion": str(100 + i)},
                "value": value,
                "globalDefault": False,
                "preemptionPolicy": "PreemptLowerPriority",
            },
        )


def _toleration(taint: tuple[str, str, str]) -> dict[str, str]:
    return {"key": taint[0], "operator": "Equal", "value": taint[1], "effect": taint[2]}


def _pod_spec(w: Workload) -> dict[str, Any]:
    s = w.shape
    requests = {"cpu": f"{s.cpu_m}m", "memory": f"{s.mem_mi}Mi"}
    limits = {"memory": f"{s.mem_mi}Mi"}
    if s.gpus:
        requests[GPU] = limits[GPU] = str(s.gpus)
    containers: list[dict[str, Any]] = [
        {
            "name": "main",
            "image": f"registry.example.com/{w.name.split('-')[0]}:v1.8.2",
            "resources": {"requests": requests, "limits": limits},
            "imagePullPolicy": "IfNotPresent",
        }
    ]
    if s.sidecar:
        containers.append(
            {
                "name": "log-shipper",
                "image": "registry.example.com/infra/fluent-bit:3.2",
                "resources": {
                    "requests": {"cpu": f"{SIDECAR_CPU_M}m", "memory": f"{SIDECAR_MEM_MI}Mi"},
                    "limits": {"memory": f"{SIDECAR_MEM_MI}Mi"},
                },
            }
        )
    spec: dict[str, Any] = {
        "containers": containers,
        "restartPolicy": "Never" if w.kind == "Job" else "Always",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "schedulerName": "default-scheduler",
        "securityContext": {},
    }
    if w.node_selector:
        spec["nodeSelector"] = dict(w.node_selector)
    if w.tolerations:
        spec["tolerations"] = list(w.tolerations)
    return spec
