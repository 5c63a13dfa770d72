"""What users see: the status rows and tables, and how the kubectl plugin reaches the leader."""

from __future__ import annotations

import argparse

import pytest

from kubequeue import cli, tables
from kubequeue.kube.leader_proxy import LeaderNotFound, get_from_leader
from unit.apiserver import FakeApi, client_for, serve

LEASE = "/apis/coordination.k8s.io/v1/namespaces/kq/leases/kube-queue"
JOB_ROW = {
    "position": 0,
    "queue": "team-a",
    "kind": "Job",
    "namespace": "ml",
    "name": "train",
    "priority": 100,
    "demand": "4 GPU, 16 CPU, 64Gi",
    "demand_raw": {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "4", "pods": "1"},
    "age_s": 150,
    "why": "queue team-a at max nvidia.com/gpu (16/16, needs 4 more)",
}


async def test_the_plugin_finds_the_leader_from_its_lease_and_asks_through_the_pod_proxy() -> None:
    api = FakeApi()
    api.put(LEASE, {"spec": {"holderIdentity": "kube-queue-7d9f-x2_ab12cd34"}})
    api.put(
        "/api/v1/namespaces/kq/pods/kube-queue-7d9f-x2:8080/proxy/debug/status",
        {"leader": True, "queued": 1, "jobs": [JOB_ROW]},
    )
    async with serve(api.app) as url, client_for(url) as client:
        data = await get_from_leader(client, "kq", "kube-queue", 8080, "/debug/status")
    assert data["jobs"] == [JOB_ROW]
    assert ("GET", LEASE) in api.requests


async def test_the_plugin_says_why_it_cannot_find_a_leader() -> None:
    api = FakeApi()
    async with serve(api.app) as url, client_for(url) as client:
        with pytest.raises(LeaderNotFound, match="no Lease kq/kube-queue"):
            await get_from_leader(client, "kq", "kube-queue", 8080, "/debug/status")
        api.put(LEASE, {"spec": {"holderIdentity": ""}})
        with pytest.raises(LeaderNotFound, match="nobody holds"):
            await get_from_leader(client, "kq", "kube-queue", 8080, "/debug/status")


def test_job_table_columns_order_and_truncation() -> None:
    long = {**JOB_ROW, "name": "eval", "position": 1, "why": "x" * 150, "age_s": 3 * 86400}
    lines = tables.job_table([JOB_ROW, long]).splitlines()
    assert lines[0].split() == ["POSITION", "QUEUE", "JOB", "PRIORITY", "DEMAND", "AGE", "WHY"]
    assert lines[1].split()[:4] == ["0", "team-a", "Job/ml/train", "100"]
    assert "4 GPU, 16 CPU, 64Gi" in lines[1] and " 2m " in lines[1]
    assert lines[1].endswith("(16/16, needs 4 more)")
    assert lines[2].endswith("x" * 97 + "...") and " 3d " in lines[2]
    wide = tables.job_table([long], wide=True).splitlines()[1]
    assert wide.endswith("x" * 150) and "nvidia.com/gpu=4" in wide and "pods=" not in wide


def test_queue_table_shows_each_named_resource() -> None:
    row = {
        "name": "team-a",
        "parent": "research",
        "strategy": "StrictFIFO",
        "min": {"nvidia.com/gpu": "8", "cpu": "100"},
        "max": {"nvidia.com/gpu": "16"},
        "used": {"nvidia.com/gpu": "12", "cpu": "40", "memory": "1Ti"},
        "borrowed": {"nvidia.com/gpu": "4"},
        "pending": 3,
        "admitted": 5,
        "ready": True,
        "reason": "Ready",
        "message": "",
    }
    lines = tables.queue_table([row]).splitlines()
    assert lines[0].split()[:4] == ["QUEUE", "PARENT", "STRATEGY", "RESOURCE"]
    assert lines[1].split() == [
        "team-a",
        "research",
        "StrictFIFO",
        "cpu",
        "100",
        "-",
        "40",
        "-",
        "3",
        "5",
        "True",
    ]
    assert lines[2].split() == ["nvidia.com/gpu", "8", "16", "12", "4"]
    assert len(tables.queue_table([row], wide=True).splitlines()) == 4, "wide adds memory"


def test_age_reads_like_kubectl() -> None:
    assert [tables.age(s) for s in (5, 119, 120, 7199, 7200, 172800, None)] == [
        "5s",
        "119s",
        "2m",
        "119m",
        "2h",
        "2d",
        "<unknown>",
    ]


def test_the_cli_prints_json_verbatim_and_warns_about_a_standby(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = argparse.Namespace(command="status", output="json")
    assert cli._print_view(args, {"leader": False, "jobs": [JOB_ROW]}) == 0
    out = capsys.readouterr()
    assert '"name": "train"' in out.out and "not the leader" in out.err


async def test_the_plugin_says_when_the_leader_does_not_serve_the_views() -> None:
    api = FakeApi()
    api.put(LEASE, {"spec": {"holderIdentity": "kube-queue-7d9f-x2_ab12cd34"}})
    async with serve(api.app) as url, client_for(url) as client:
        with pytest.raises(LeaderNotFound, match="does not serve /debug/status on port 8080"):
            await get_from_leader(client, "kq", "kube-queue", 8080, "/debug/status")


# ----------------------------------------------------------------- topology in the views
def test_waiting_jobs_say_what_they_ask_of_topology() -> None:
    from kubequeue.admission.tracker import JobTracker
    from kubequeue.capacity.cache import CapacityCache
    from kubequeue.capacity.reservations import Reservations
    from kubequeue.kinds.job import JobKind
    from kubequeue.queueing.queue import JobQueue
    from kubequeue.status import job_rows
    from unit import builders as b

    cache = CapacityCache()
    tracker = JobTracker(cache, JobQueue(), Reservations(cache))
    kind = JobKind()
    tracker.register(kind)
    rack = "example.com/rack"
    tracker.observe(kind, b.job("plain", {"cpu": "1"}))
    tracker.observe(
        kind,
        b.job(
            "racked",
            {"cpu": "1"},
            created="2026-01-01T00:00:01Z",
            annotations={"kube-queue.io/topology-required": rack},
        ),
    )
    tracker.observe(
        kind,
        b.job(
            "maybe",
            {"cpu": "1"},
            created="2026-01-01T00:00:02Z",
            annotations={"kueue.x-k8s.io/podset-preferred-topology": rack},
        ),
    )
    rows = {r["name"]: r["topology"] for r in job_rows(tracker)}
    assert rows == {"plain": "-", "racked": f"{rack} (required)", "maybe": f"{rack} (preferred)"}
    table = tables.job_table([{**JOB_ROW, "topology": f"{rack} (required)"}], wide=True)
    header, line = table.splitlines()
    assert header.split()[-2:] == ["TOPOLOGY", "WHY"]
    assert f"{rack} (required)   queue team-a" in line
    assert "TOPOLOGY" not in tables.job_table([JOB_ROW])


ADMITTED_ROW = {
    "queue": "team-a",
    "kind": "Job",
    "namespace": "ml",
    "name": "train",
    "priority": 0,
    "demand": "16 GPU",
    "domain": "example.com/rack=r1",
    "nodes": ["n1", "n2", "n3", "n4", "n5"],
    "nodes_text": "n1, n2 (+3 more)",
}


def test_admitted_jobs_show_their_domain_and_nodes(capsys: pytest.CaptureFixture[str]) -> None:
    from kubequeue.status import nodes_text

    assert [nodes_text(n) for n in ([], ["a"], ["a", "b"], ["a", "b", "c"])] == [
        "-",
        "a",
        "a, b",
        "a, b (+1 more)",
    ]
    header, line = tables.admitted_table([ADMITTED_ROW]).splitlines()
    assert header.split() == ["QUEUE", "KIND", "NAMESPACE", "NAME", "DOMAIN", "NODES"]
    assert line.split()[:5] == ["team-a", "Job", "ml", "train", "example.com/rack=r1"]
    assert line.endswith("n1, n2 (+3 more)")
    assert tables.admitted_table([ADMITTED_ROW], wide=True).endswith("n1, n2, n3, n4, n5")
    # The same option for kube-queue and the kubectl plugin: one query, one table.
    for parser, argv in (
        (cli._parser(), ["status", "--admitted"]),
        (cli._plugin_parser(), ["status", "--admitted", "-n", "ml"]),
    ):
        args = parser.parse_args(argv)
        path, query = cli._view_query(args)
        assert path == "/debug/status" and ("admitted", "true") in query
        assert cli._print_view(args, {"leader": True, "jobs": [ADMITTED_ROW]}) == 0
        assert "example.com/rack=r1" in capsys.readouterr().out
