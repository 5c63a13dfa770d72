"""``python -m bench.pins``: what pinning costs the controller's event loop per pod.

Every pod of an admitted job passes through ``Pins.upsert`` (its gated watch event) and
``Pins.choose`` (the node), synchronously on the loop the admission cycle also runs on. This
builds a cluster of ``--nodes`` 8-GPU nodes, admits ``--jobs`` jobs of 1-8 pods x 1-4 GPUs with
real holds (capacity/reservations.py), gates every pod and pins them all, and prints the time per
pod (median, p99, max) and in total. Run with ``--racks`` to place the jobs with a rack
topology (capacity/topology.py) and see that choice's cost per job too.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from typing import Any

import msgspec

from kubequeue.capacity.cache import CapacityCache
from kubequeue.capacity.fit import place
from kubequeue.capacity.pins import Pins
from kubequeue.capacity.reservations import Reservations
from kubequeue.capacity.topology import place_together
from kubequeue.demand import PodSet, pod_request
from kubequeue.identity import JobKey, PodOwner
from kubequeue.labels import HOSTNAME, PLACEMENT_GATE
from kubequeue.objects import Node, Pod, PodSpec
from kubequeue.resources import GPU
from kubequeue.scheduling import NodeConstraints, TopologyRequest

RACK = "example.com/rack"


def _node(name: str, rack: str) -> Node:
    alloc = {"cpu": "64", "memory": "512Gi", "pods": "110", GPU: "8"}
    return msgspec.convert(
        {
            "metadata": {"name": name, "labels": {HOSTNAME: name, RACK: rack}},
            "status": {"allocatable": alloc, "conditions": [{"type": "Ready", "status": "True"}]},
        },
        Node,
    )


def _spec(gpus: int) -> dict[str, Any]:
    return {
        "containers": [
            {
                "name": "c",
                "resources": {"requests": {"cpu": "1", GPU: str(gpus)}, "limits": {GPU: str(gpus)}},
            }
        ]
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.pins", description=__doc__)
    p.add_argument("--nodes", type=int, default=5_000)
    p.add_argument("--jobs", type=int, default=5_000)
    p.add_argument("--racks", type=int, default=0, help="racks (0: no topology)")
    p.add_argument("--seed", type=int, default=7)
    args = p.parse_args(argv)
    rng = random.Random(args.seed)
    cache = CapacityCache()
    racks = max(1, args.racks)
    for i in range(args.nodes):
        cache.upsert_node(_node(f"n{i:06d}", f"r{i % racks:04d}"))
    reservations = Reservations(cache)
    admitted: set[JobKey] = set()
    pins = Pins(cache, reservations, lambda owner: owner, admitted.__contains__)
    pods: list[tuple[Pod, PodOwner]] = []
    place_s: list[float] = []
    for j in range(args.jobs):
        count, gpus = rng.randint(1, 8), rng.choice([1, 2, 4])
        request = pod_request(msgspec.convert(_spec(gpus), PodSpec))
        topology = TopologyRequest(RACK, True) if args.racks else None
        ps = [PodSet("main", count, request, NodeConstraints(), topology)]
        started = time.perf_counter()
        found = place_together(ps, cache) if topology else None
        placed = found.assignments if found is not None else place(ps, cache)
        place_s.append(time.perf_counter() - started)
        if placed is None:
            continue
        key: JobKey = ("Job", "bench", f"j{j}")
        reservations.hold(key, ps, placed)
        admitted.add(key)
        for k in range(count):
            spec = {**_spec(gpus), "schedulingGates": [{"name": PLACEMENT_GATE}]}
            raw = {
                "metadata": {"name": f"j{j}-{k}", "namespace": "bench", "uid": f"u{j}-{k}"},
                "spec": spec,
                "status": {"phase": "Pending"},
            }
            pods.append((msgspec.convert(raw, Pod), (key, None)))
    per_pod: list[float] = []
    planned = 0
    total_started = time.perf_counter()
    for pod, owner in pods:
        started = time.perf_counter()
        pins.upsert(pod, owner)
        [gated] = pins.take()
        if pins.choose(gated).outcome == "planned":
            planned += 1
        per_pod.append(time.perf_counter() - started)
    total = time.perf_counter() - total_started
    per_pod.sort()
    place_s.sort()

    def ms(values: list[float], q: float) -> str:
        return f"{values[min(len(values) - 1, int(q * len(values)))] * 1000:.3f}"

    print(
        "| nodes | racks | jobs admitted | pods | planned | pin per pod p50 / p99 / max (ms) "
        "| all pods (s) | placement per job p50 / p99 (ms) |"
    )
    print("|---:|---:|---:|---:|---:|---|---:|---|")
    print(
        f"| {args.nodes:,} | {args.racks or '-'} | {len(admitted):,} | {len(pods):,} | "
        f"{planned:,} | {ms(per_pod, 0.5)} / {ms(per_pod, 0.99)} / {per_pod[-1] * 1000:.3f} | "
        f"{total:.2f} | {ms(place_s, 0.5)} / {ms(place_s, 0.99)} |"
    )
    print(f"mean per pod {statistics.fmean(per_pod) * 1e6:.0f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
