"""kubectl-style tables for ``kube-queue status`` / ``queues`` (and the kubectl plugin), from the
JSON rows the controller serves (status.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["admitted_table", "age", "job_table", "queue_table", "render"]


def age(seconds: int | None) -> str:
    """Like kubectl's AGE column: 45s, 12m, 5h, 3d."""
    if seconds is None:
        return "<unknown>"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= 2 * size or (unit == "m" and seconds >= 120):
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def render(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [len(h) for h in header]
    for row in rows:
        for i, cell in enumerate(row[:-1]):
            widths[i] = max(widths[i], len(cell))
    lines = []
    for row in (header, *rows):
        cells = [cell.ljust(widths[i]) for i, cell in enumerate(row[:-1])]
        lines.append("   ".join([*cells, row[-1]]).rstrip())
    return "\n".join(lines)


def job_table(jobs: Sequence[Mapping[str, Any]], wide: bool = False, why_width: int = 100) -> str:
    """Waiting jobs; ``wide`` adds what each asks of topology (before WHY, which stays last so
    it is never padded)."""
    header = ["POSITION", "QUEUE", "JOB", "PRIORITY", "DEMAND", "AGE", "WHY"]
    if wide:
        header.insert(6, "TOPOLOGY")
    rows = []
    for j in jobs:
        why = str(j["why"])
        if not wide and len(why) > why_width:
            why = why[: why_width - 3] + "..."
        demand = (
            ", ".join(f"{k}={v}" for k, v in j["demand_raw"].items() if k != "pods")
            if wide
            else str(j["demand"])
        )
        row = [
            str(j["position"]),
            str(j["queue"]),
            f"{j['kind']}/{j['namespace']}/{j['name']}",
            str(j["priority"]),
            demand,
            age(j["age_s"]),
            why,
        ]
        if wide:
            row.insert(6, str(j.get("topology", "-")))  # (a controller older than the column)
        rows.append(row)
    return render(header, rows)


def admitted_table(jobs: Sequence[Mapping[str, Any]], wide: bool = False) -> str:
    """Admitted jobs: where they run. ``wide`` lists every node instead of the first two."""
    header = ["QUEUE", "KIND", "NAMESPACE", "NAME", "DOMAIN", "NODES"]
    rows = [
        [
            str(j["queue"]),
            str(j["kind"]),
            str(j["namespace"]),
            str(j["name"]),
            str(j["domain"]),
            (", ".join(j["nodes"]) or "-") if wide else str(j["nodes_text"]),
        ]
        for j in jobs
    ]
    return render(header, rows)


def _vector(vector: Mapping[str, str], resource: str) -> str:
    return vector.get(resource, "-")


def queue_table(queues: Sequence[Mapping[str, Any]], wide: bool = False) -> str:
    """One line per queue: per resource min / max / used / borrowed, pending, admitted."""
    header = [
        "QUEUE",
        "PARENT",
        "STRATEGY",
        "RESOURCE",
        "MIN",
        "MAX",
        "USED",
        "BORROWED",
        "PENDING",
        "ADMITTED",
        "READY",
    ]
    rows = []
    for q in queues:
        names = sorted({*q["min"], *q["max"], *q["used"], *q["borrowed"]})
        if not wide:
            named = sorted({*q["min"], *q["max"]}) or names[:1]
            names = [n for n in names if n in named] or ["-"]
        for i, res in enumerate(names or ["-"]):
            first = i == 0
            ready = "True" if q["ready"] else f"False ({q['reason']}: {q['message']})"
            rows.append(
                [
                    q["name"] if first else "",
                    (q["parent"] or "-") if first else "",
                    q["strategy"] if first else "",
                    res,
                    _vector(q["min"], res),
                    _vector(q["max"], res),
                    _vector(q["used"], res),
                    _vector(q["borrowed"], res),
                    str(q["pending"]) if first else "",
                    ("-" if q["admitted"] is None else str(q["admitted"])) if first else "",
                    ready if first else "",
                ]
            )
    return render(header, rows)
