"""Each measured figure, as a function over a fresh production wiring.

Only the core's work is inside a timed section: generating lines, the simulated API writes and
bookkeeping of the simulated cluster happen between timings. The cyclic GC stays on (it runs in
production too).

With ``pin`` the pods of admitted jobs are created through the webhook and pinned (bench/sim.py).
That work shares the controller's event loop with the cycles, so it is added to each figure per
admission: a latency sample that admitted is its deletion + cycle + the pinning of the pods of
the jobs it admitted, a drain cycle's time includes pinning its admissions' pods. The first
cycle's pinning (its pods are created over seconds, after the writes) is reported on its own.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import math
import os
import time
import tracemalloc
from typing import Any

from bench.check import accounting_problems, pin_problems
from bench.harness import LOG_EVENTS, Harness
from bench.sim import Simulator
from bench.state import TOPOLOGY_LEVELS, Cluster, Sizes, priority_class_lines
from kubequeue.kube import informer as informer_module

__all__ = ["core_run", "memory_run", "reference_rate"]

clock = time.perf_counter


def reference_rate(lines: list[bytes]) -> float:
    """Pod watch lines/s through kubernetes-asyncio's own watch decoding
    (``Watch.unmarshal_event``: json.loads, then ApiClient.deserialize into V1Pod)."""
    from kubernetes_asyncio.watch import Watch

    async def run() -> float:
        watch = Watch()
        try:
            started = clock()
            for line in lines:
                watch.unmarshal_event(line, "V1Pod")
            return len(lines) / (clock() - started)
        finally:
            await watch._api_client.close()

    return asyncio.run(run())


def decode_rate(h: Harness, lines: list[bytes]) -> float:
    """Pod watch lines/s through the informer's decoder only (no cache update): the one-pass
    typed event decoder when the codec has one, else event then object (two passes)."""
    codec = h.pod_informer.codec
    one_pass = getattr(codec, "event_decoder", None)  # absent in older trees (before/after runs)
    started = clock()
    if one_pass is not None:
        decode = one_pass.decode
        for line in lines:
            decode(line)
    else:
        events = informer_module._event_decoder
        pods = codec.item_decoder
        for line in lines:
            pods.decode(events.decode(line).object)
    return len(lines) / (clock() - started)


def _harness(sizes: Sizes, *, pin: bool = False, trace: list[Any] | None = None) -> Harness:
    levels = TOPOLOGY_LEVELS if sizes.topology else ()
    return Harness(trace=trace, pin=pin, topology_levels=levels)


def _initial_lines(sizes: Sizes) -> tuple[list[bytes], list[bytes]]:
    cluster = Cluster(sizes, keep=False)
    nodes = list(cluster.node_lines())
    pods = [cluster.pod_line(p) for w in cluster.running_workloads() for p in w.pods]
    return nodes, pods


def core_run(
    sizes: Sizes,
    *,
    latency_samples: int,
    drain_batch: int,
    drain_rounds: int,
    reference_lines: int,
    trace: list[Any] | None = None,
    pin: bool = False,
) -> dict[str, Any]:
    """One full run on a fresh state: ingest, first cycle, latency samples, then the drain."""
    LOG_EVENTS.clear()
    out: dict[str, Any] = {}

    # ---- initial sync; the pod ADDED stream is the ingest figure. The lines come from a
    # throwaway generator, gone before the clock starts: its objects (a record per pod) would
    # otherwise be scanned by every full GC collection, work a real controller never does.
    node_lines, pod_lines = _initial_lines(sizes)
    gc.collect()
    h = _harness(sizes, pin=pin, trace=trace)
    steps = h.measure_steps()
    h.feed_nodes(node_lines)
    out["pod_line_bytes"] = sum(map(len, pod_lines)) / len(pod_lines)
    started = clock()
    h.feed_pods(pod_lines)
    seconds = clock() - started
    out["ingest_eps"] = len(pod_lines) / seconds
    sample = pod_lines[: max(1, min(reference_lines, len(pod_lines)))]
    out["decode_eps"] = decode_rate(h, sample)
    out["reference_eps"] = reference_rate(sample) if reference_lines else 0.0
    out["reference_lines"] = len(sample) if reference_lines else 0
    del node_lines, pod_lines, sample

    # The simulation's own generator: same seed and calls, so the same nodes and pods (the
    # accounting check at the end compares its ledger with the cache).
    cluster = Cluster(sizes)
    sim = Simulator(cluster, h, seed=sizes.seed, pin=pin)
    for _ in cluster.node_lines():
        pass
    sim.pod_lines()
    h.feed_priority_classes(priority_class_lines())
    if sizes.queues:
        h.feed_queues(cluster.queue_lines())
    running_jobs = sim.running_job_lines()
    queued_jobs = sim.queued_job_lines()
    # The simulation's own records (a few per pod) are not the controller's: out of the
    # collector's passes, as the state listed so far is (Controller.listed_page). Those it makes
    # while draining are not, and are in the refreezes measured then (they overstate them).
    gc.freeze()
    started = clock()
    h.feed_jobs(running_jobs)
    h.feed_jobs(queued_jobs)
    seconds = clock() - started
    out["job_ingest_jps"] = (len(running_jobs) + len(queued_jobs)) / seconds
    del running_jobs, queued_jobs
    out["nodes"] = len(h.cache.nodes)
    out["pods"] = h.cache.pod_count
    out["queued"] = len(h.queue)

    # ---- the first cycle sees every queued job at once (cold start / failover)
    h.synced()
    started = clock()
    first = h.run_cycle()
    out["first_cycle_s"] = clock() - started
    out["first_write_s"] = h.first_write_s if h.first_write_s is not None else math.nan
    # Then, in the loop's idle time (or at the start of the next cycle), parking the jobs it
    # found waiting: timed on its own, not hidden in the next cycle's figure.
    started = clock()
    h.settle()
    out["first_settle_s"] = clock() - started
    out["first_cycle_evaluated"] = first.evaluated
    out["first_cycle_admitted"] = len(first.admitted)
    sim.admit(first)
    out["first_pin_s"] = sim.last_pin_s
    out["first_pods"] = sum(a.count for x in first.admitted for a in x.assignments)
    while True:  # settle: the admissions' pods are bound; nothing else fits right now
        again = h.run_cycle()
        if not again.admitted:
            break
        sim.admit(again)

    # ---- latency: one pod ends -> the cycle the loop runs for it has decided (the loop starts
    # the admissions' writes then, and writes the reasons for jobs that wait after them)
    h.phase = "running"
    enabled: list[float] = []
    idle: list[float] = []
    enabled_pin: list[float] = []  # of each enabled sample, the pinning (0 without pin)
    run_cycle = h.run_cycle
    dispatch = h.pod_informer._dispatch
    for pod in itertools.islice(sim.free_pods(), latency_samples):
        line = cluster.pod_line(pod, "DELETED")
        started = clock()
        dispatch(line)
        result = h.decide()
        elapsed = clock() - started
        h.explain(result)
        sim.admit(result)
        if result.admitted:
            enabled.append(elapsed + sim.last_pin_s)
            enabled_pin.append(sim.last_pin_s)
        else:
            idle.append(elapsed)
    out["latency_enabled_s"] = enabled
    out["latency_enabled_pin_s"] = enabled_pin
    out["latency_idle_s"] = idle

    # ---- drain: workloads end in batches, each followed by one cycle
    evaluated = admitted = rounds = 0
    cycle_s = ingest_s = bind_s = pin_s = 0.0
    freed_pods = bound_pods = 0
    cycle_times: list[float] = []
    h.phase = "drain"
    drain_started = clock()
    while rounds < drain_rounds and len(h.queue):
        finishing = sim.pick_finishing(drain_batch)
        job_lines, del_lines = sim.finish_lines(finishing)
        started_round = clock()
        h.feed_jobs(job_lines)
        h.feed_pods(del_lines)
        mid = clock()
        result = run_cycle()
        done = clock()
        freed_pods += len(del_lines)
        evaluated += result.evaluated
        admitted += len(result.admitted)
        rounds += 1
        started = clock()
        bound_pods += sim.admit(result)
        bind_s += clock() - started - sim.last_pin_s
        ingest_s += mid - started_round
        cycle_s += done - mid + sim.last_pin_s
        cycle_times.append(done - mid + sim.last_pin_s)
        pin_s += sim.last_pin_s
        if not result.admitted and not sim.running:
            break
        if not finishing and sim.only_hopeless_left():
            break
    out["drain"] = {
        "rounds": rounds,
        "batch_pods": drain_batch,
        "freed_pods": freed_pods,
        "evaluated": evaluated,
        "admitted": admitted,
        "cycle_s": cycle_s,
        "cycle_times_s": cycle_times,
        "delete_ingest_s": ingest_s,
        "bind_s": bind_s,
        "pin_s": pin_s,
        "bound_pods": bound_pods,
        "wall_s": clock() - drain_started,
        "left_queued": len(h.queue),
        "left_hopeless": sum(1 for j in h.queue.ordered() if j.problem or j.never_fits),
    }
    # The event loop's longest synchronous step, per phase and kind: what the controller's
    # stall watchdog would see (kube_queue_event_loop_lateness_seconds), less the OS's share.
    h.stop_measuring()
    out["steps_ms"] = {f"{phase}: {what}": t * 1e3 for (phase, what), t in sorted(steps.items())}
    for phase in ("start-up", "running", "drain"):
        # (A collector pass lands inside one of the steps: not counted on its own.)
        mine = [t for (p, what), t in steps.items() if p == phase and not what.startswith("gc ")]
        out[f"longest_step_{phase}_ms"] = max(mine) * 1e3 if mine else 0.0
    out["admitted_total"] = sim.admitted
    if pin:
        out["pin"] = {
            "pinned": sim.pinned,
            "unpinned": sim.unpinned,
            "off_plan": sim.off_plan,
            "per_pod_s": sim.pin_per_pod_s,
        }
    out["problems"] = accounting_problems(h, cluster) + (pin_problems(h) if pin else [])
    out["log_events"] = dict(LOG_EVENTS)
    return out


def _status_mib(field: str) -> float:
    """VmRSS (now) or VmHWM (peak) of this process, from /proc. Not ru_maxrss: Linux carries
    that over exec from the forking parent, so a child would report the parent's peak."""
    with open(f"/proc/{os.getpid()}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return math.nan


def _rss_mib() -> float:
    return _status_mib("VmRSS")


def memory_run(sizes: Sizes, *, trace: bool) -> dict[str, float]:
    """Build the whole state in this (fresh) process, feeding lines as they are generated so
    the generator's own data is not what is measured; then run one admission cycle."""
    h = _harness(sizes)
    gc.collect()
    baseline = _rss_mib()
    if trace:
        tracemalloc.start()
    cluster = Cluster(sizes, keep=False)
    h.feed_nodes(cluster.node_lines())
    for w in cluster.running_workloads():
        h.feed_pods([cluster.pod_line(p) for p in w.pods])
        if w.kind == "Job":
            w_lines = [cluster.job_line(w, suspend=False)]
            h.feed_jobs(w_lines)
        w.pods = []
    h.feed_priority_classes(priority_class_lines())
    for w in cluster.queued_jobs():
        h.feed_jobs([cluster.job_line(w, suspend=True)])
    del cluster
    h.synced()
    h.run_cycle()
    h.settle()  # the parks the loop makes once the cycle is done: part of the steady state
    gc.collect()
    out = {
        "baseline_rss_mib": baseline,
        "rss_mib": _rss_mib(),
        "peak_rss_mib": _status_mib("VmHWM"),
        "pods": float(h.cache.pod_count),
        "queued": float(len(h.queue)),
    }
    if trace:
        current, peak = tracemalloc.get_traced_memory()
        out["heap_mib"] = current / 2**20
        out["heap_peak_mib"] = peak / 2**20
        tracemalloc.stop()
    return out
