"""Turning raw run results into the figures (median of runs, with spread) and printing them as
Markdown tables, ready to paste into docs/benchmarks.md."""

from __future__ import annotations

import math
import os
import platform
import statistics
from collections.abc import Sequence
from typing import Any

__all__ = ["machine", "percentile", "print_scaling", "print_summary", "summarise"]

MIB_TARGET = 150.0


def percentile(xs: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); NaN for no samples."""
    if not xs:
        return math.nan
    ordered = sorted(xs)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def _spread(xs: Sequence[float]) -> dict[str, float]:
    clean = [x for x in xs if not math.isnan(x)]
    if not clean:
        return {"median": math.nan, "min": math.nan, "max": math.nan}
    return {"median": statistics.median(clean), "min": min(clean), "max": max(clean)}


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-run figures, then median / min / max across runs."""
    per_run: dict[str, list[float]] = {}

    def put(name: str, value: float) -> None:
        per_run.setdefault(name, []).append(value)

    for r in runs:
        d = r["drain"]
        put("ingest_eps", r["ingest_eps"])
        put("decode_eps", r["decode_eps"])
        put("reference_eps", r["reference_eps"])
        put("job_ingest_jps", r["job_ingest_jps"])
        put("first_cycle_ms", r["first_cycle_s"] * 1e3)
        put("first_settle_ms", r.get("first_settle_s", 0.0) * 1e3)
        put("first_write_ms", r.get("first_write_s", math.nan) * 1e3)
        for phase in ("start-up", "running", "drain"):
            put(f"longest_step_{phase}_ms", r.get(f"longest_step_{phase}_ms", math.nan))
        put("decisions_per_s", d["evaluated"] / d["cycle_s"] if d["cycle_s"] else math.nan)
        put("admitted_per_s", d["admitted"] / d["cycle_s"] if d["cycle_s"] else math.nan)
        put("drain_cycle_p50_ms", percentile(d["cycle_times_s"], 50) * 1e3)
        put("drain_cycle_max_ms", max(d["cycle_times_s"], default=math.nan) * 1e3)
        put(
            "delete_ingest_eps",
            d["freed_pods"] / d["delete_ingest_s"] if d["delete_ingest_s"] else math.nan,
        )
        put("drain_admitted", d["admitted"])
        put("drain_evaluated", d["evaluated"])
        put("drain_rounds", d["rounds"])
        put("left_queued", d["left_queued"])
        put("left_hopeless", d["left_hopeless"])
        enabled = [x * 1e3 for x in r["latency_enabled_s"]]
        idle = [x * 1e3 for x in r["latency_idle_s"]]
        put("latency_p50_ms", percentile(enabled, 50))
        put("latency_p99_ms", percentile(enabled, 99))
        put("latency_samples", len(enabled))
        put("idle_p50_ms", percentile(idle, 50))
        put("idle_p99_ms", percentile(idle, 99))
        put("idle_samples", len(idle))
        pin = r.get("pin")
        if pin is not None:
            per_pod = [x * 1e3 for x in pin["per_pod_s"]]
            put("pods_pinned", pin["pinned"])
            put("pods_unpinned", pin["unpinned"])
            put("pods_off_plan", pin["off_plan"])
            put("pin_p50_ms", percentile(per_pod, 50))
            put("pin_p99_ms", percentile(per_pod, 99))
            put("pin_max_ms", max(per_pod, default=math.nan))
            put("first_pin_ms", r["first_pin_s"] * 1e3)
            put("first_pods", r["first_pods"])
            put("drain_pin_ms", d["pin_s"] * 1e3)
            put("latency_pin_p99_ms", percentile([x * 1e3 for x in r["latency_enabled_pin_s"]], 99))
    first = runs[0]
    return {
        "sizes": {"nodes": first["nodes"], "pods": first["pods"], "queued": first["queued"]},
        "runs": len(runs),
        "pod_line_bytes": first["pod_line_bytes"],
        "reference_lines": first["reference_lines"],
        "figures": {name: _spread(values) for name, values in per_run.items()},
        "problems": sorted({p for r in runs for p in r["problems"]}),
        "log_events": _merge_counts(r["log_events"] for r in runs),
        "steps_ms": first.get("steps_ms", {}),
    }


def _merge_counts(counts: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in counts:
        for k, v in c.items():
            out[k] = out.get(k, 0) + v
    return out


def machine() -> str:
    model = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{os.cpu_count()} CPUs, {model}, Python {platform.python_version()}"


def _fmt(value: float, unit: str) -> str:
    if math.isnan(value):
        return "n/a"
    if unit in ("/s",):
        return f"{value:,.0f}"
    if unit == "ms":
        return f"{value:.2f}" if value < 10 else f"{value:.1f}"
    if unit == "MiB":
        return f"{value:.1f}"
    return f"{value:,.0f}"


_ROWS = (
    ("ingest_eps", "pod watch-event ingest (decode + cache update), events/s", "/s", ">= 100,000"),
    ("decode_eps", "  of which decode only (informer's msgspec decoders), events/s", "/s", ""),
    (
        "reference_eps",
        "  reference: kubernetes-asyncio Watch.unmarshal_event -> V1Pod, events/s",
        "/s",
        "(reference)",
    ),
    ("delete_ingest_eps", "pod DELETED + Job Complete ingest during the drain, pods/s", "/s", ""),
    ("job_ingest_jps", "Job watch-event ingest (running + queued Jobs), jobs/s", "/s", ""),
    (
        "decisions_per_s",
        "admission decisions/s while draining (jobs evaluated / cycle time)",
        "/s",
        ">= 2,000",
    ),
    ("admitted_per_s", "  of which admitted, jobs/s of cycle time", "/s", ""),
    ("drain_cycle_p50_ms", "  drain cycle time p50, ms", "ms", ""),
    ("drain_cycle_max_ms", "  drain cycle time max, ms", "ms", ""),
    ("latency_p50_ms", "pod DELETED -> enabled admission decided, p50 ms", "ms", ""),
    ("latency_p99_ms", "pod DELETED -> enabled admission decided, p99 ms", "ms", "< 50"),
    ("idle_p50_ms", "pod DELETED -> cycle that admits nothing, p50 ms", "ms", ""),
    ("idle_p99_ms", "pod DELETED -> cycle that admits nothing, p99 ms", "ms", ""),
    ("first_cycle_ms", "first cycle over the whole queue (start-up / failover), ms", "ms", ""),
    ("first_settle_ms", "  then parking what it found waiting (loop's idle time), ms", "ms", ""),
    (
        "first_write_ms",
        "  its first admission's write starts after (sliced cycle: at the end of a slice), ms",
        "ms",
        "",
    ),
    (
        "longest_step_start-up_ms",
        "longest event-loop stall at start-up (list page, first cycle's slices, parking), ms",
        "ms",
        "< 100",
    ),
    (
        "longest_step_running_ms",
        "longest event-loop stall, single pods ending (watch read, cycle slice, reasons), ms",
        "ms",
        "< 100",
    ),
    (
        "longest_step_drain_ms",
        "longest event-loop stall while draining (1% of pods per round), ms",
        "ms",
        "< 100",
    ),
)


def print_summary(
    summary: dict[str, Any], memory: dict[str, float] | None, heap: dict[str, float] | None = None
) -> None:
    """``memory`` from the plain child (RSS), ``heap`` from the tracemalloc child (its RSS is
    inflated by tracemalloc's own bookkeeping, so only its heap figures are used)."""
    s = summary["sizes"]
    f = summary["figures"]
    print(
        f"\n### {s['nodes']:,} nodes, {s['pods']:,} running pods, {s['queued']:,} queued jobs "
        f"({summary['runs']} runs; pod lines {summary['pod_line_bytes']:.0f} B avg; reference "
        f"decode over {summary['reference_lines']:,} of the same lines)\n"
    )
    print("| figure | target | median | spread (min - max) |")
    print("|---|---|---:|---:|")
    pinned = "pin_p50_ms" in f
    for key, label, unit, target in _ROWS:
        v = f[key]
        if pinned and key.startswith("latency_"):
            label = label.replace("decided", "decided + its pods pinned")
        elif pinned and key.startswith("drain_cycle"):
            label += " (with its pods' pinning)"
        print(
            f"| {label} | {target} | {_fmt(v['median'], unit)} | "
            f"{_fmt(v['min'], unit)} - {_fmt(v['max'], unit)} |"
        )
    if memory:
        print(
            f"| peak RSS of the process with the whole state, MiB | <= {MIB_TARGET:.0f} | "
            f"{memory['peak_rss_mib']:.1f} | |"
        )
        print(
            f"|   RSS after the state is built / interpreter + imports baseline, MiB | | "
            f"{memory['rss_mib']:.1f} / {memory['baseline_rss_mib']:.1f} | |"
        )
    if heap:
        print(
            f"|   Python heap (tracemalloc) holding the state / peak while building, MiB"
            f" | | {heap['heap_mib']:.1f} / {heap['heap_peak_mib']:.1f} | |"
        )
    if "pin_p50_ms" in f:
        for key, label, unit in (
            ("pods_pinned", "pods pinned at creation (webhook -> Pins.pin_at_creation)", ""),
            ("pods_unpinned", "  pods it did not pin (gated in production; bound as planned)", ""),
            ("pods_off_plan", "  pods pinned to a node the admission did not name for them", ""),
            ("pin_p50_ms", "pinning per pod, p50 ms (webhook + unbound watch events)", "ms"),
            ("pin_p99_ms", "pinning per pod, p99 ms", "ms"),
            ("pin_max_ms", "pinning per pod, max ms", "ms"),
            (
                "latency_pin_p99_ms",
                "  of an enabled admission's latency, its pinning, p99 ms",
                "ms",
            ),
            ("first_pin_ms", "pinning the first cycle's pods (not in its figure), ms", "ms"),
            ("first_pods", "  pods of the first cycle's admissions", ""),
            ("drain_pin_ms", "pinning during the drain (in its cycle times), ms", "ms"),
        ):
            v = f[key]
            print(
                f"| {label} | | {_fmt(v['median'], unit)} | "
                f"{_fmt(v['min'], unit)} - {_fmt(v['max'], unit)} |"
            )
        print(
            "\nWith --pin each admitting latency sample and drain cycle includes the pinning of "
            "the pods of the jobs it admitted (the event loop's work for them)."
        )
    n = f["latency_samples"]["median"]
    print(
        f"\nLatency samples per run: {n:.0f} deletions that enabled an admission, "
        f"{f['idle_samples']['median']:.0f} that did not. Drain per run: "
        f"{f['drain_rounds']['median']:.0f} rounds, {f['drain_evaluated']['median']:,.0f} "
        f"decisions, {f['drain_admitted']['median']:,.0f} admitted; left queued "
        f"{f['left_queued']['median']:.0f} (of which can never fit / invalid: "
        f"{f['left_hopeless']['median']:.0f})."
    )
    print(
        f"Accounting check (no node over-committed, cache bookkeeping == recomputation == "
        f"generator ledger): {'OK' if not summary['problems'] else 'FAILED'}"
    )
    for p in summary["problems"]:
        print(f"  - {p}")
    steps = summary.get("steps_ms")
    if steps:
        print(
            "Longest synchronous step of each kind (first run), ms: "
            + ", ".join(f"{k} {v:.1f}" for k, v in steps.items())
        )
    if summary["log_events"]:
        events = ", ".join(f"{k} x{v}" for k, v in sorted(summary["log_events"].items()))
        print(f"Log events from the core: {events}")


def print_scaling(rows: list[dict[str, Any]]) -> None:
    print("\n### Scaling (10 pods and 2 queued jobs per node; medians)\n")
    print(
        "| nodes | pods | queued jobs | ingest events/s | decisions/s | latency p50 / p99 ms | "
        "idle cycle p50 / p99 ms | first cycle ms | peak RSS MiB | heap MiB |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        s = row["summary"]["sizes"]
        f = row["summary"]["figures"]
        mem = row.get("memory") or {}
        heap = row.get("memory_trace") or {}
        print(
            f"| {s['nodes']:,} | {s['pods']:,} | {s['queued']:,} | "
            f"{_fmt(f['ingest_eps']['median'], '/s')} | "
            f"{_fmt(f['decisions_per_s']['median'], '/s')} | "
            f"{_fmt(f['latency_p50_ms']['median'], 'ms')} / "
            f"{_fmt(f['latency_p99_ms']['median'], 'ms')} | "
            f"{_fmt(f['idle_p50_ms']['median'], 'ms')} / "
            f"{_fmt(f['idle_p99_ms']['median'], 'ms')} | "
            f"{_fmt(f['first_cycle_ms']['median'], 'ms')} | "
            f"{_fmt(mem.get('peak_rss_mib', math.nan), 'MiB')} | "
            f"{_fmt(heap.get('heap_mib', math.nan), 'MiB')} |"
        )
