"""Pinning under the real event orders: the webhook pins pods at creation, the unbound-pod watch
and the bound-pod watch each deliver in order but not in order with each other, a bound pod's
later events (Running) arrive again, and every bind shrinks its job's holds as the tracker does.
However those interleave, no node is ever promised more pods than it has room for: bound pods
plus pods pinned to it and not bound yet fit its GPUs (else a pinned pod waits Unschedulable,
which the topology benchmark saw twice: capacity/pins.py history)."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from kubequeue.identity import JobKey
from kubequeue.labels import HOSTNAME, PLACEMENT_LABEL
from kubequeue.objects import Pod
from kubequeue.resources import GPU
from unit import builders as b
from unit.test_pins import World


def _pod(uid: str, job: str, gpus: int, host: str | None, node: str | None, phase: str) -> Pod:
    spec: dict[str, Any] = b.pod_spec({"cpu": "1", GPU: str(gpus)})
    if host is not None:
        spec["nodeSelector"] = {HOSTNAME: host}
    if node is not None:
        spec["nodeName"] = node
    raw = {
        "metadata": {"name": uid, "namespace": "default", "uid": uid,
                     "labels": {PLACEMENT_LABEL: "pinned"},
                     "ownerReferences": [{"kind": "Job", "name": job, "controller": True}]},
        "spec": spec,
        "status": {"phase": phase},
    }
    return msgspec.convert(raw, Pod)


@settings(max_examples=300, deadline=None)
@given(
    nodes=st.lists(st.integers(1, 8), min_size=1, max_size=4),
    jobs=st.lists(st.tuples(st.integers(1, 8), st.integers(1, 4)), min_size=1, max_size=3),
    seed=st.integers(0, 2**32 - 1),
)
def test_no_node_is_promised_more_pods_than_it_has_room_for(
    nodes: list[int], jobs: list[tuple[int, int]], seed: int
) -> None:
    rng = random.Random(seed)
    keys = [("Job", "default", f"j{i}") for i in range(len(jobs))]
    w = World(*((f"n{i}", g) for i, g in enumerate(nodes)), admitted=tuple(keys))
    w.reservations.bound_pods = lambda job: w.cache.bound_pods(job)
    capacity = {f"host-n{i}": g for i, g in enumerate(nodes)}
    # Pods still to be created per job, and their GPUs; admitted jobs only.
    to_create: list[tuple[JobKey, int, int]] = []
    for key, (pods, gpus) in zip(keys, jobs, strict=True):
        if w.hold_if_fits(key, pods, gpus) is None:
            continue
        to_create += [(key, gpus, i) for i in range(pods)]
    rng.shuffle(to_create)
    unbound_watch: list[Pod] = []  # events not delivered yet, in order
    bound_watch: list[Pod] = []
    pinned: dict[str, tuple[str, int]] = {}  # uid -> (host, gpus): pinned, not bound yet
    on_host: Counter[str] = Counter()  # GPUs of bound pods (the scheduler's truth)
    gpus_of: dict[str, int] = {}

    def promised(host: str) -> int:
        return on_host[host] + sum(g for h, g in pinned.values() if h == host)

    def deliver_bound() -> None:
        pod = bound_watch.pop(0)
        owner = (("Job", "default", pod.metadata.ownerReferences[0].name), None)
        w.pins.bound(pod, owner)  # as PodHandler.upsert: pins, the cache, the tracker
        job = w.cache.upsert_pod(pod, owner)
        if job is not None:
            w.reservations.reconcile(job)

    def deliver_unbound() -> None:
        pod = unbound_watch.pop(0)
        owner = (("Job", "default", pod.metadata.ownerReferences[0].name), None)
        if pod.spec.nodeName:  # the pod left the watch's selector: a DELETED event
            w.pins.delete(pod.metadata.uid)
        else:
            w.pins.upsert(pod, owner)

    steps = 0
    while to_create or unbound_watch or bound_watch or pinned:
        steps += 1
        assert steps < 10_000
        moves = []
        if to_create:
            moves.append("create")
        if unbound_watch:
            moves.append("unbound")
        if bound_watch:
            moves.append("bound")
        schedulable = [
            uid for uid, (host, g) in pinned.items() if on_host[host] + g <= capacity[host]
        ]
        if schedulable:
            moves.append("schedule")
        if not moves:
            break  # pinned pods that never fit: the invariant below already failed
        move = rng.choice(moves)
        if move == "create":
            key, gpus, i = to_create.pop()
            uid = f"{key[2]}-{i}"
            host = w.pins.pin_at_creation(_pod(uid, key[2], gpus, None, None, "Pending"),
                                          (key, None))
            if host is None:
                continue  # would be gated and pinned later; not modelled here
            pinned[uid] = (host, gpus)
            gpus_of[uid] = gpus
            unbound_watch.append(_pod(uid, key[2], gpus, host, None, "Pending"))
        elif move == "unbound":
            deliver_unbound()
        elif move == "bound":
            deliver_bound()
        else:
            uid = rng.choice(schedulable)
            host, gpus = pinned.pop(uid)
            on_host[host] += gpus
            node = host.removeprefix("host-")
            job = uid.rsplit("-", 1)[0]
            unbound_watch.append(_pod(uid, job, gpus, host, node, "Pending"))
            bound_watch.append(_pod(uid, job, gpus, host, node, "Pending"))
            for _ in range(rng.randint(0, 2)):  # later events of the bound pod
                bound_watch.append(_pod(uid, job, gpus, host, node, "Running"))
        for host in capacity:
            assert promised(host) <= capacity[host], (host, promised(host), capacity[host])
