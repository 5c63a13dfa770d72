"""Queues against a real API server: teams sharing GPU nodes with guaranteed and maximum quota,
borrowing, fair sharing, per-queue StrictFIFO, unknown queues, and what users see (Events,
``kube-queue status``, ``kubectl get queues``). The controller runs under the chart's RBAC."""

from __future__ import annotations

import asyncio
import json
import sys

import pytest

from e2e.cluster.nodes import NodeSpec
from e2e.controller_fixtures import StartController
from e2e.jobs import events_for, get_job, is_suspended, job, suspended_states
from e2e.queues import Queues
from e2e.support import FakeNodes, Kubectl, wait_until

pytestmark = pytest.mark.e2e
GPU = "nvidia.com/gpu"


async def _cli(*args: str) -> str:
    """``kube-queue <args>`` as a user runs it; its stdout."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "kubequeue", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, err.decode()
    return out.decode()


async def _admitted(kubectl: Kubectl, namespace: str, name: str) -> bool:
    return not is_suspended(await get_job(kubectl, namespace, name))


async def _two_teams(queues: Queues, namespace: str, kubectl: Kubectl, **team_a: object) -> None:
    """research with team-a (selected by the namespace's label) and team-b (named by label),
    min 8 and max 16 GPUs each."""
    await kubectl("label", "namespace", namespace, f"team={queues.prefix}-a")
    await queues.create("research")
    await queues.create(
        "team-a", parent="research", quota={"min": {GPU: 8}, "max": {GPU: 16}},
        namespaceSelector={"matchLabels": {"team": f"{queues.prefix}-a"}}, **team_a)
    await queues.create(
        "team-b", parent="research", quota={"min": {GPU: 8}, "max": {GPU: 16}})


async def test_a_team_borrows_all_gpus_then_the_other_gets_freed_ones_until_its_min(
    kubectl: Kubectl, namespace: str, fake_nodes: FakeNodes, kube_queue: StartController,
    queues: Queues,
) -> None:
    await fake_nodes.create(NodeSpec("gpu-1", gpus=8), NodeSpec("gpu-2", gpus=8))
    await _two_teams(queues, namespace, kubectl)
    kq = await kube_queue()
    # team-a: four 4-GPU jobs fill both nodes (8 of them borrowed from idle team-b); a0 and
    # a1 end after a few seconds. a4 and a5 wait.
    for i, run_for in enumerate(["8s", "12s", "600s", "600s", "600s", "600s"]):
        await kubectl.apply(job(f"a{i}", gpus=4, run_for=run_for), "-n", namespace)

    async def four_running() -> dict[str, bool] | None:
        states = await suspended_states(kubectl, namespace)
        return states if list(states.values()).count(False) == 4 else None

    states = await wait_until("team-a runs on all 16 GPUs", four_running)
    assert [n for n, s in sorted(states.items()) if not s] == ["a0", "a1", "a2", "a3"]
    a3 = await get_job(kubectl, namespace, "a3")
    assert a3["metadata"]["annotations"]["kube-queue.io/borrowing"] == "true"
    assert a3["metadata"]["annotations"]["kube-queue.io/queue"] == queues.name("team-a")
    team_a = queues.name("team-a")
    borrowing = [f'kube_queue_queue_borrowed{{queue="{team_a}",resource="nvidia.com/gpu"}} 8.0',
                 f'kube_queue_queue_admitted_jobs{{queue="{team_a}"}} 4.0',
                 f'kube_queue_queue_admission_wait_seconds_count{{queue="{team_a}"}} 4.0']

    async def borrowing_metrics() -> bool:  # the gauges are refreshed once a second
        metrics = await kq.metrics()
        return all(line in metrics for line in borrowing)

    await wait_until("per-queue borrowed, admitted and wait metrics", borrowing_metrics, 10)
    # team-b submits after a4 and a5 were created; it gets the next freed GPUs, up to its min.
    for name in ("b0", "b1"):
        await kubectl.apply(job(name, gpus=4, labels=queues.label("team-b")), "-n", namespace)

    async def team_b_running() -> dict[str, bool] | None:
        states = await suspended_states(kubectl, namespace)
        return states if not states["b0"] and not states["b1"] else None

    states = await wait_until("team-b gets the GPUs a0 and a1 free", team_b_running, 60)
    assert states["a4"] and states["a5"], f"team-a's earlier jobs still wait: {states}"
    snapshot = await kq.queue()
    assert {j["name"] for j in snapshot["jobs"]} == {"a4", "a5"}


async def test_a_queue_at_its_max_waits_with_the_reason_while_gpus_are_free(
    kubectl: Kubectl, namespace: str, fake_nodes: FakeNodes, kube_queue: StartController,
    queues: Queues,
) -> None:
    await fake_nodes.create(NodeSpec("gpu-1", gpus=8), NodeSpec("gpu-2", gpus=8))
    await queues.create("capped", quota={"max": {GPU: 4}})
    kq = await kube_queue()
    label = queues.label("capped")
    await kubectl.apply(job("first", gpus=4, run_for="10s", labels=label), "-n", namespace)
    await wait_until("first admitted", lambda: _admitted(kubectl, namespace, "first"))
    await kubectl.apply(job("second", gpus=2, labels=label), "-n", namespace)

    async def quota_event() -> dict[str, str] | None:
        found = [e for e in await events_for(kubectl, namespace, "second")
                 if e["reason"] == "Queued"]
        return found[0] if found else None

    event = await wait_until("a Queued event naming the queue's max", quota_event)
    assert event["message"] == (
        f"waiting for quota: queue {queues.name('capped')} is at its max nvidia.com/gpu"
    )
    assert is_suspended(await get_job(kubectl, namespace, "second")), "12 GPUs are free"
    # `kube-queue status` shows the job, its queue, and the reason with the numbers.
    out = (await _cli("status", "--url", kq.url, "-n", namespace)).splitlines()
    assert out[0].split() == ["POSITION", "QUEUE", "JOB", "PRIORITY", "DEMAND", "AGE", "WHY"]
    [row] = out[1:]
    assert row.split()[:5] == ["0", queues.name("capped"), f"Job/{namespace}/second", "0", "2"]
    assert row.endswith(
        f"queue {queues.name('capped')} at max nvidia.com/gpu (4/4, needs 2 more)"), row
    # ... and the Queue's own status, as `kubectl get queues` prints it.

    async def status_written() -> dict[str, object] | None:
        status = (await queues.get("capped")).get("status") or {}
        return status if status.get("pending") == 1 and status.get("admitted") == 1 else None

    status = await wait_until("the Queue's status written", status_written)
    assert status["used"] == {"cpu": "1", "memory": "1Gi", GPU: "4"}, status
    table = await kubectl("get", "queues", queues.name("capped"))
    header, line = table.strip().splitlines()
    assert header.split()[:5] == ["NAME", "PARENT", "PENDING", "ADMITTED", "GPU"], header
    assert "4/0/4" in line.split() and "True" in line.split(), line

    capped = queues.name("capped")
    wanted = [f'kube_queue_queue_used{{queue="{capped}",resource="nvidia.com/gpu"}} 4.0',
              f'kube_queue_queue_pending_jobs{{queue="{capped}"}} 1.0']

    async def per_queue_metrics() -> bool:  # the gauges are refreshed once a second
        metrics = await kq.metrics()
        return all(line in metrics for line in wanted)

    await wait_until("per-queue metrics", per_queue_metrics, 10)

    await wait_until("second admitted once first finishes",
                     lambda: _admitted(kubectl, namespace, "second"), 60)


async def test_strict_fifo_blocks_only_its_queue_and_unknown_queues_wait_for_creation(
    kubectl: Kubectl, namespace: str, fake_nodes: FakeNodes, kube_queue: StartController,
    queues: Queues,
) -> None:
    await fake_nodes.create(NodeSpec("gpu", gpus=8))
    await _two_teams(queues, namespace, kubectl, strategy="StrictFIFO")
    kq = await kube_queue()
    await kubectl.apply(job("blocker", gpus=6, labels=queues.label("team-b")), "-n", namespace)
    await wait_until("blocker admitted", lambda: _admitted(kubectl, namespace, "blocker"))
    # team-a (StrictFIFO, by namespace selector): a head that does not fit holds its queue...
    await kubectl.apply(job("a-head", gpus=4), "-n", namespace)
    await asyncio.sleep(1.1)  # creation timestamps are whole seconds: make the order certain
    await kubectl.apply(job("a-small", gpus=1), "-n", namespace)
    # ... but not team-b's.
    await kubectl.apply(job("b-small", gpus=1, labels=queues.label("team-b")), "-n", namespace)
    # A job naming a queue that does not exist waits with a Warning.
    await kubectl.apply(job("lost", gpus=1, labels=queues.label("team-z")), "-n", namespace)
    await wait_until("b-small admitted", lambda: _admitted(kubectl, namespace, "b-small"))

    async def unknown_queue() -> dict[str, str] | None:
        found = [e for e in await events_for(kubectl, namespace, "lost")
                 if e["reason"] == "UnknownQueue"]
        return found[0] if found else None

    warning = await wait_until("an UnknownQueue warning", unknown_queue)
    assert warning["type"] == "Warning" and queues.name("team-z") in warning["message"]
    await asyncio.sleep(2)
    states = await suspended_states(kubectl, namespace)
    assert states["a-head"] and states["a-small"] and states["lost"], states
    status = json.loads(await _cli("status", "--url", kq.url, "-o", "json"))
    why = {j["name"]: j["why"] for j in status["jobs"]}
    assert why["a-small"] == (
        f"behind {queues.name('team-a')}'s head {namespace}/a-head (StrictFIFO)"), why
    assert why["lost"].startswith("UnknownQueue: queue"), why
    # The queue appears: the job moves on by itself.
    await queues.create("team-z")
    await wait_until("lost admitted once its queue exists",
                     lambda: _admitted(kubectl, namespace, "lost"))


async def test_a_starved_whole_node_job_gets_a_node_drained_across_queues(
    kubectl: Kubectl, namespace: str, fake_nodes: FakeNodes, kube_queue: StartController,
    queues: Queues,
) -> None:
    """Holding a queue's line is not enough when the small jobs that refill a node come from
    another queue: past the starvation timeout the big job gets the node held for it, the
    other queue's waiting jobs stay off it, and the big job starts once it has drained. The
    job behind big in its own queue that cannot land on the held node starts meanwhile
    (backfill) instead of waiting behind it."""
    gpu, side = await fake_nodes.create(NodeSpec("gpu", gpus=8), NodeSpec("side", gpus=2))
    on_gpu = {"kubernetes.io/hostname": gpu}
    on_side = {"kubernetes.io/hostname": side}
    await queues.create("whole")
    await queues.create("small")
    kq = await kube_queue("--starvation-timeout=3")
    small, whole = queues.label("small"), queues.label("whole")
    # The node full of 2-GPU jobs of the other queue, ending one after another; the side node
    # busy until after big has starved.
    for i, run_for in enumerate(["6s", "9s", "12s", "18s"]):
        await kubectl.apply(job(f"run{i}", gpus=2, run_for=run_for, labels=small,
                                node_selector=on_gpu), "-n", namespace)
    await kubectl.apply(job("side-run", gpus=2, run_for="10s", labels=whole,
                            node_selector=on_side), "-n", namespace)

    async def node_full() -> bool:
        states = await suspended_states(kubectl, namespace)
        return len(states) == 5 and not any(states.values())

    await wait_until("the nodes full", node_full)
    await kubectl.apply(job("big", gpus=8, run_for="600s", labels=whole), "-n", namespace)
    await asyncio.sleep(1.1)  # creation timestamps are whole seconds: big is the oldest waiting
    for i in range(4):
        await kubectl.apply(job(f"next{i}", gpus=2, labels=small, node_selector=on_gpu),
                            "-n", namespace)
    await kubectl.apply(job("mate", gpus=2, labels=whole, node_selector=on_side),
                        "-n", namespace)

    async def node_held() -> bool:  # the gauge is refreshed once a second
        return "kube_queue_held_nodes 1.0" in await kq.metrics()

    await wait_until("one node held for big", node_held, 30)

    async def big_admitted() -> dict[str, bool] | None:
        states = await suspended_states(kubectl, namespace)
        return states if not states["big"] else None

    states = await wait_until("big admitted once the held node drained", big_admitted, 60)
    assert all(states[f"next{i}"] for i in range(4)), f"nothing refilled the node: {states}"
    held = [e for e in await events_for(kubectl, namespace, "big") if e["reason"] == "NodesHeld"]
    assert held and "node(s) gpu-" in held[0]["message"], held
    assert held[0]["message"].endswith("are held for it; no other job starts there until it fits")
    waiting = [e["message"] for e in await events_for(kubectl, namespace, "next0")
               if e["reason"] == "Queued"]
    assert any("held for a job that has waited past the starvation timeout" in m
               for m in waiting), waiting
    # The log says which nodes were held for whom, and why the hold ended.
    taken = kq.log_events("queue.node_hold")[0]
    assert taken["job"] == f"Job/{namespace}/big" and taken["nodes"][0].startswith("gpu-"), taken
    released = kq.log_events("queue.node_hold_released")[0]
    assert released["job"] == f"Job/{namespace}/big" and released["why"] == "admitted", released
    # mate, behind big in its queue, started on the side node while gpu was held for big.
    log = [json.loads(line) for line in kq.log().splitlines() if line.startswith("{")]
    order = [(e["event"], e.get("job", "").rsplit("/", 1)[-1]) for e in log]
    hold_at = order.index(("queue.node_hold", "big"))
    mate_at = order.index(("job.admitted", "mate"))
    big_at = order.index(("job.admitted", "big"))
    assert hold_at < mate_at < big_at, (hold_at, mate_at, big_at)


async def test_an_invalid_queue_is_reported_waits_and_the_rest_keeps_admitting(
    kubectl: Kubectl, namespace: str, fake_nodes: FakeNodes, kube_queue: StartController,
    queues: Queues,
) -> None:
    """Two queues whose parents loop: both are InvalidSpec (Ready=False on the Queue, with a
    Warning Event on it), a job naming one waits with InvalidQueue, and a queue outside the
    loop keeps admitting. Fixing the loop makes them Ready and the job runs."""
    await fake_nodes.create(NodeSpec("gpu", gpus=8))
    await queues.create("ok", quota={"max": {GPU: 4}})
    await queues.create("loop-a", parent="loop-b")
    await queues.create("loop-b", parent="loop-a")
    kq = await kube_queue()
    await kubectl.apply(job("fine", gpus=2, labels=queues.label("ok")), "-n", namespace)
    await kubectl.apply(job("stranded", gpus=2, labels=queues.label("loop-a")), "-n", namespace)
    await wait_until("fine admitted", lambda: _admitted(kubectl, namespace, "fine"))

    async def ready(short: str) -> dict[str, str] | None:
        status = (await queues.get(short)).get("status") or {}
        found = [c for c in status.get("conditions") or [] if c.get("type") == "Ready"]
        return found[0] if found else None

    async def invalid() -> dict[str, str] | None:
        cond = await ready("loop-a")
        return cond if cond and cond["status"] == "False" else None

    cond = await wait_until("loop-a's Ready=False written", invalid)
    assert cond["reason"] == "InvalidSpec" and "loops" in cond["message"], cond

    async def queue_warning() -> dict[str, str] | None:
        found = (await kubectl.json(
            "get", "events", "-A", "--field-selector",
            f"involvedObject.kind=Queue,involvedObject.name={queues.name('loop-a')}"))["items"]
        return found[0] if found else None

    warning = await wait_until("a Warning Event on the Queue", queue_warning)
    assert warning["type"] == "Warning" and warning["reason"] == "InvalidSpec", warning

    async def invalid_queue() -> dict[str, str] | None:
        found = [e for e in await events_for(kubectl, namespace, "stranded")
                 if e["reason"] == "InvalidQueue"]
        return found[0] if found else None

    await wait_until("an InvalidQueue warning on the job", invalid_queue)
    assert is_suspended(await get_job(kubectl, namespace, "stranded"))
    # `kube-queue queues` shows it too, one line per queue, and --queue filters status.
    table = await _cli("queues", "--url", kq.url)
    lines = {line.split()[0]: line for line in table.splitlines()[1:] if line.strip()}
    assert "InvalidSpec" in lines[queues.name("loop-a")], table
    assert lines[queues.name("ok")].split()[-1] == "True", table
    status = json.loads(await _cli("status", "--url", kq.url, "--queue", queues.name("loop-a"),
                                   "-o", "json"))
    assert [j["name"] for j in status["jobs"]] == ["stranded"], status
    # Fixed: loop-b becomes a root, loop-a its child; both are Ready and the job runs.
    await kubectl("patch", "queue", queues.name("loop-b"), "--type=json",
                  "-p", '[{"op": "remove", "path": "/spec/parent"}]')

    async def valid() -> bool:
        cond = await ready("loop-a")
        return bool(cond and cond["status"] == "True")

    await wait_until("loop-a Ready again", valid)
    await wait_until("stranded admitted once its queue is fixed",
                     lambda: _admitted(kubectl, namespace, "stranded"))
