"""``make run`` on a machine with no cluster: the whole product, live, in one terminal.

Starts the local control plane (e2e/cluster) with fake GPU nodes, runs the controller under the
Helm chart's RBAC, creates two teams' Queues (examples/queues.yaml: team-a and team-b share 16
GPUs under research), submits team-a's jobs (examples/jobs.yaml) into namespace ``team-a`` and a
few seconds later team-b's (examples/team-b-jobs.yaml) into ``team-b``, and prints the queues
draining (queued -> admitted -> running -> complete), with each queue's GPU use, until Ctrl-C.
The controller runs with a 30 s starvation timeout, so team-b's 8-GPU big-eval, which team-a's
sweeps keep from the only 8-GPU node, gets that node held for it about a minute in. It also
serves the webhook, registered for the two teams' pods: every pod is created gated and pinned
to the node its job's plan held room on (the NODES column: ``*`` marks a pod bound exactly
where kube-queue pinned it). The nodes form two racks, and ddp-resnet asks for one
(``kube-queue.io/topology-required``): its two 4-GPU pods run in one rack (the RACK column:
the domain its admission recorded on the job), its Admitted Event says which.
Meanwhile you can use the printed KUBECONFIG with kubectl (``kubectl get queues``) or
``kube-queue status --url ...`` in another terminal.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from e2e.cluster.build import ensure_binaries
from e2e.cluster.nodes import NodeSpec
from e2e.cluster.runner import LocalCluster
from e2e.controller import KubeQueue, free_port, install_identity, render_chart
from e2e.support import Kubectl
from e2e.webhook import pod_gate_configuration, write_serving_cert

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
TEAMS = {"team-a": "jobs.yaml", "team-b": "team-b-jobs.yaml"}  # namespace -> its jobs
TEAM_B_DELAY_S = 8
# Short, so that the demo shows what happens to a starved job (team-b's big-eval) within a
# minute; the default (30 min) suits GPU jobs that run for hours (docs/queues.md).
STARVATION_TIMEOUT_S = 30
# Two racks (ddp-resnet asks for one: docs/topology.md): rack-a the 8-GPU node, rack-b the two
# 4-GPU nodes.
RACK = "example.com/rack"
NODES = [
    NodeSpec("gpu-8", cpu="64", memory="512Gi", gpus=8, labels={RACK: "rack-a"}),
    NodeSpec("gpu-4a", cpu="32", memory="256Gi", gpus=4, labels={RACK: "rack-b"}),
    NodeSpec("gpu-4b", cpu="32", memory="256Gi", gpus=4, labels={RACK: "rack-b"}),
    NodeSpec("cpu", cpu="64", memory="256Gi"),
]


def _gpus(job: dict[str, Any]) -> int:
    spec = job["spec"]
    pods = int(spec.get("parallelism", 1))
    per_pod = sum(
        int(c.get("resources", {}).get("requests", {}).get("nvidia.com/gpu", 0))
        for c in spec["template"]["spec"]["containers"]
    )
    return pods * per_pod


def _state(job: dict[str, Any]) -> str:
    conditions = {c["type"] for c in job.get("status", {}).get("conditions", [])
                  if c["status"] == "True"}
    if "Complete" in conditions:
        return "Complete"
    if "Failed" in conditions:
        return "Failed"
    if job["spec"].get("suspend"):
        return "Queued"
    if job.get("status", {}).get("active"):
        return "Running"
    return "Admitted"


def _nodes(pods: list[dict[str, Any]], namespace: str, name: str) -> str:
    """Where the job's live pods are bound: ``gpu-4a*x2``, ``*`` when bound where pinned."""
    where: Counter[str] = Counter()
    for pod in pods:
        meta, spec = pod["metadata"], pod["spec"]
        if meta["namespace"] != namespace or meta.get("labels", {}).get("job-name") != name:
            continue
        if not spec.get("nodeName") or pod["status"].get("phase") in ("Succeeded", "Failed"):
            continue
        pinned = (spec.get("nodeSelector") or {}).get("kubernetes.io/hostname")
        where[spec["nodeName"] + ("*" if pinned == spec["nodeName"] else "")] += 1
    return ",".join(f"{n}x{c}" if c > 1 else n for n, c in sorted(where.items()))


async def _show(kubectl: Kubectl, kq: KubeQueue, started: float) -> bool:
    jobs = []
    pods: list[dict[str, Any]] = []
    for namespace in TEAMS:
        jobs += (await kubectl.json("get", "jobs", "-n", namespace))["items"]
        pods += (await kubectl.json("get", "pods", "-n", namespace))["items"]
    waiting = {(row["namespace"], row["name"]): row for row in (await kq.view("/debug/status"))}
    queues = await kq.view("/debug/queues", "queues")
    lines = [f"kube-queue demo  t={asyncio.get_running_loop().time() - started:5.0f}s   "
             f"(Ctrl-C to stop)", ""]
    lines.append(f"{'JOB':16} {'QUEUE':7} {'GPUS':>4}  {'STATE':9} {'NODES':16} {'RACK':7} WHY")
    in_use = 0
    for job in sorted(jobs, key=lambda j: j["metadata"]["creationTimestamp"]):
        name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
        state = _state(job)
        if state in ("Running", "Admitted"):
            in_use += _gpus(job)
        row = waiting.get((namespace, name), {})
        why = row.get("why", "") if state == "Queued" else ""
        nodes = _nodes(pods, namespace, name)
        # The domain its admission chose and recorded (docs/topology.md), for a job that asked.
        domain = job["metadata"].get("annotations", {}).get("kube-queue.io/topology-domain", "")
        rack = domain.rpartition("=")[2] if state != "Queued" else ""
        lines.append(
            f"{name:16} {namespace:7} {_gpus(job):>4}  {state:9} {nodes:16} {rack or '-':7} {why}"
        )
    total = sum(n.gpus for n in NODES)
    lines += ["", f"GPUs held by admitted jobs: {in_use}/{total}", ""]
    lines.append(f"{'QUEUE':9} {'GPU USED/MIN/MAX':17} {'BORROWED':9} {'PENDING':8} ADMITTED")
    for q in queues:
        gpu = "nvidia.com/gpu"
        used = f"{q['used'].get(gpu, '0')}/{q['min'].get(gpu, '0')}/{q['max'].get(gpu, '-')}"
        admitted = "-" if q["admitted"] is None else q["admitted"]
        lines.append(f"{q['name']:9} {used:17} {q['borrowed'].get(gpu, '0'):9} "
                     f"{q['pending']:<8} {admitted}")
    clear = "\033[H\033[J" if sys.stdout.isatty() else "\n"
    print(clear + "\n".join(lines), flush=True)
    return all(_state(j) in ("Complete", "Failed") or _gpus(j) > 8 for j in jobs)


async def _demo(cluster: LocalCluster, kubectl: Kubectl) -> None:
    binaries = cluster.binaries
    identity = await install_identity(binaries.helm, kubectl, cluster.work_dir / "kube-queue")
    cert_dir = cluster.work_dir / "webhook"
    ca = write_serving_cert(cert_dir)
    port = free_port()
    kq = await KubeQueue(
        identity,
        cluster.logs_dir,
        "kube-queue",
        "--log-format=console",
        f"--starvation-timeout={STARVATION_TIMEOUT_S}",
        f"--webhook-port={port}",
        "--webhook-host=127.0.0.1",
        f"--webhook-cert-dir={cert_dir}",
    ).start()
    # The chart's pod-gate webhook, served by this controller, for the teams' pods: pinning.
    rendered = await render_chart(binaries.helm)
    config = pod_gate_configuration(rendered, "kube-queue-demo", port, ca, "team-a")
    for hook in config["webhooks"]:
        hook["namespaceSelector"] = {"matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": list(TEAMS)}]}
    await kubectl("apply", "-f", "-", stdin=json.dumps(config))
    await kubectl("apply", "-f", str(EXAMPLES / "queues.yaml"))
    for namespace in TEAMS:
        await kubectl("create", "namespace", namespace)
        await kubectl("label", "namespace", namespace, f"team={namespace.removeprefix('team-')}")
    # The PriorityClass first: a job naming a class that does not exist yet is (rightly) warned
    # about as UnknownPriorityClass until the class appears.
    await kubectl("apply", "-f", str(EXAMPLES / "priorityclass.yaml"))
    await kubectl("apply", "-n", "team-a", "-f", str(EXAMPLES / TEAMS["team-a"]))
    started = asyncio.get_running_loop().time()
    drained_once = team_b_sent = False
    try:
        while True:
            if not team_b_sent and asyncio.get_running_loop().time() - started > TEAM_B_DELAY_S:
                await kubectl("apply", "-n", "team-b", "-f", str(EXAMPLES / TEAMS["team-b"]))
                team_b_sent = True
            drained = await _show(kubectl, kq, started)
            if drained and team_b_sent and not drained_once:
                drained_once = True
                print("\nThe queues have drained (too-big can never fit: see its NeverFits "
                      "event).")
            print(f"\nexport KUBECONFIG={cluster.kubeconfig}   # kubectl at {binaries.kubectl}")
            print(f"controller log: {kq.process.log_path}")
            print(f"kube-queue status [--admitted] --url {kq.url}   |   "
                  f"kube-queue queues --url {kq.url}")
            await asyncio.sleep(2)
    finally:
        await kq.stop()


def main() -> int:
    binaries = ensure_binaries()
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    with LocalCluster(binaries=binaries) as cluster:
        cluster.create_nodes(NODES)
        kubectl = Kubectl(binaries.kubectl, cluster.kubeconfig)
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(_demo(cluster, kubectl))
        print("\nstopping the local cluster")
    return 0


if __name__ == "__main__":
    sys.exit(main())
