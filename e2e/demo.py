"""``make run`` on a machine with no cluster: the whole product, live, in one terminal.

Starts the local control plane (e2e/cluster) with fake GPU nodes, runs the controller under the
Helm chart's RBAC, submits examples/ into namespace ``demo``, and prints the queue draining
(queued -> admitted -> running -> complete) until Ctrl-C. Meanwhile you can use the printed
KUBECONFIG with kubectl in another terminal.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from pathlib import Path
from typing import Any

from e2e.cluster.build import ensure_binaries
from e2e.cluster.nodes import NodeSpec
from e2e.cluster.runner import LocalCluster
from e2e.controller import KubeQueue, install_identity
from e2e.support import Kubectl

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
NAMESPACE = "demo"
NODES = [
    NodeSpec("gpu-8", cpu="64", memory="512Gi", gpus=8),
    NodeSpec("gpu-4a", cpu="32", memory="256Gi", gpus=4),
    NodeSpec("gpu-4b", cpu="32", memory="256Gi", gpus=4),
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


async def _show(kubectl: Kubectl, kq: KubeQueue, started: float) -> bool:
    jobs = (await kubectl.json("get", "jobs", "-n", NAMESPACE))["items"]
    waiting = {row["name"]: row for row in (await kq.queue())["jobs"]}
    lines = [f"kube-queue demo  t={asyncio.get_running_loop().time() - started:5.0f}s   "
             f"(Ctrl-C to stop)", ""]
    lines.append(f"{'JOB':16} {'GPUS':>4}  {'STATE':9} WHY")
    in_use = 0
    for job in sorted(jobs, key=lambda j: j["metadata"]["creationTimestamp"]):
        name = job["metadata"]["name"]
        state = _state(job)
        if state in ("Running", "Admitted"):
            in_use += _gpus(job)
        row = waiting.get(name, {})
        why = row.get("problem") or row.get("never_fits") or row.get("waiting_for") or ""
        if state == "Queued" and not why:
            why = f"position {row.get('position', '?')} in line"
        lines.append(f"{name:16} {_gpus(job):>4}  {state:9} {why}")
    total = sum(n.gpus for n in NODES)
    lines += ["", f"GPUs held by admitted jobs: {in_use}/{total}"]
    clear = "\033[H\033[J" if sys.stdout.isatty() else "\n"
    print(clear + "\n".join(lines), flush=True)
    return all(_state(j) in ("Complete", "Failed") or _gpus(j) > 8 for j in jobs)


async def _demo(cluster: LocalCluster, kubectl: Kubectl) -> None:
    binaries = cluster.binaries
    identity = await install_identity(binaries.helm, kubectl, cluster.work_dir / "kube-queue")
    kq = await KubeQueue(identity, cluster.logs_dir, "kube-queue", "--log-format=console").start()
    await kubectl("create", "namespace", NAMESPACE)
    # The PriorityClass first: a job naming a class that does not exist yet is (rightly) warned
    # about as UnknownPriorityClass until the class appears.
    await kubectl("apply", "-f", str(EXAMPLES / "priorityclass.yaml"))
    await kubectl("apply", "-n", NAMESPACE, "-f", str(EXAMPLES / "jobs.yaml"))
    started = asyncio.get_running_loop().time()
    drained_once = False
    try:
        while True:
            drained = await _show(kubectl, kq, started)
            if drained and not drained_once:
                drained_once = True
                print("\nThe queue has drained (too-big can never fit: see its NeverFits event).")
            print(f"\nexport KUBECONFIG={cluster.kubeconfig}   # kubectl at {binaries.kubectl}")
            print(f"controller log: {kq.process.log_path}   queue: kube-queue queue --url {kq.url}")
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
