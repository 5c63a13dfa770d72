"""Keeps the benchmark from rotting: ``python -m bench --quick`` runs end to end and its numbers
are sane. It asserts nothing about speed (benchmarks are not timed tests)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog
from bench.__main__ import main


@pytest.fixture
def keep_structlog_config() -> Iterator[None]:
    saved = structlog.get_config()
    yield
    structlog.configure(**saved)  # the bench counts log events instead of printing them


@pytest.mark.usefixtures("keep_structlog_config")
def test_quick_bench_runs_and_never_overcommits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bench.json"
    assert main(["--quick", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "pod watch-event ingest" in printed
    report = json.loads(out.read_text())
    (run,) = report["main"]["raw"]

    assert run["pods"] == 2_000 and run["queued"] > 0
    assert run["ingest_eps"] > 0 and run["decode_eps"] > 0 and run["reference_eps"] > 0
    drain = run["drain"]
    assert drain["rounds"] > 0 and drain["evaluated"] > 0
    assert drain["admitted"] > 0, "capacity was freed but the drain admitted nothing"
    assert run["latency_enabled_s"], "no pod deletion enabled an admission"
    assert all(x > 0 for x in run["latency_enabled_s"] + run["latency_idle_s"])

    # Independent recomputation from the cache's pods and the held reservations: no node's
    # used + reserved exceeds allocatable, and the incremental bookkeeping matches.
    assert run["problems"] == []
    for event in (
        "reservation.overcommitted",
        "reservation.no_node",
        "informer.handler_failed",
        "informer.undecodable",
    ):
        assert event not in run["log_events"], run["log_events"]

    for key in ("memory", "memory_trace"):
        mem = report[key]
        assert mem["pods"] == 2_000 and mem["peak_rss_mib"] > 0
    assert 0 < report["memory_trace"]["heap_mib"] < report["memory_trace"]["peak_rss_mib"]
    assert not math.isnan(report["main"]["summary"]["figures"]["decisions_per_s"]["median"])


@pytest.mark.usefixtures("keep_structlog_config")
def test_quick_trace_records_every_cycles_decisions(tmp_path: Path) -> None:
    out = tmp_path / "trace.json"
    assert main(["--quick", "--trace", str(out)]) == 0
    cycles = json.loads(out.read_text())
    assert cycles and all(len(c) == 4 for c in cycles)
    assert any(c[2] for c in cycles), "no cycle admitted anything"


@pytest.mark.usefixtures("keep_structlog_config")
def test_quick_bench_with_a_queue_tree_runs_and_never_overcommits(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    # Memory is the first test's subject; here only the tree's decisions are (no children).
    assert main(["--quick", "--queues", "50", "--no-memory", "--json", str(out)]) == 0
    (run,) = json.loads(out.read_text())["main"]["raw"]
    assert run["drain"]["admitted"] > 0
    assert run["problems"] == []
    assert "informer.handler_failed" not in run["log_events"], run["log_events"]


@pytest.mark.usefixtures("keep_structlog_config")
def test_quick_bench_pinned_at_creation_with_topology(tmp_path: Path) -> None:
    """``--pin``: every admitted pod goes through the webhook's code and is pinned at creation
    to room its job holds, and binds there; Pins is left with nothing counted once all bound."""
    out = tmp_path / "bench.json"
    args = ["--quick", "--pin", "--topology-share", "0.3", "--no-memory", "--json", str(out)]
    assert main(args) == 0
    (run,) = json.loads(out.read_text())["main"]["raw"]
    pin = run["pin"]
    assert pin["pinned"] > 0 and pin["unpinned"] == 0 and pin["off_plan"] == 0
    assert len(pin["per_pod_s"]) == pin["pinned"] and all(x > 0 for x in pin["per_pod_s"])
    assert run["drain"]["admitted"] > 0 and run["latency_enabled_s"]
    assert run["problems"] == []  # the accounting check, and Pins empty after every bind
    assert "informer.handler_failed" not in run["log_events"], run["log_events"]


@pytest.mark.usefixtures("keep_structlog_config")
def test_pinning_at_creation_changes_no_decision(tmp_path: Path) -> None:
    """The pods pinned at creation bind on the nodes the plan held, so every cycle decides as
    without pinning (the bench binds them in the plan's order either way)."""
    plain, pinned = tmp_path / "plain.json", tmp_path / "pinned.json"
    assert main(["--quick", "--trace", str(plain)]) == 0
    assert main(["--quick", "--pin", "--trace", str(pinned)]) == 0
    assert json.loads(plain.read_text()) == json.loads(pinned.read_text())
