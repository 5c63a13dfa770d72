"""Parking (admission/parking.py) never changes what a cycle decides or reports.

Two controllers see the same random history of events (jobs submitted, changed and deleted,
nodes added, changed and removed, other pods starting and ending, admissions bound or failed,
jobs completing, preemptions carried out, requeues, Queue quotas, namespace labels and priority
classes changing, time passing) and run a cycle at the same moments: one with parking, the
reference without (every queued job visited on every cycle). After every cycle, everything a
user or the loop sees must be identical: the admissions (order and placement), preemptions,
requeues, Events, the evaluated/waiting counts, the blocked lines, and each queued job's
reasons, explanation time and verdict memos.

Nor does running a cycle in slices (AdmissionCycle.slices, as the admission loop does): the
controller with parking also stops its cycles at every job, the reference runs them in one go.
"""

from __future__ import annotations

import datetime
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kubequeue.admission import parking
from kubequeue.admission.cycle import AdmissionCycle, CycleResult
from kubequeue.admission.preemption import PreemptionPolicy
from kubequeue.admission.requeue import RequeuePolicy
from kubequeue.admission.tracker import JobTracker
from kubequeue.capacity.cache import CapacityCache
from kubequeue.capacity.reservations import Reservations
from kubequeue.kinds.common import spec_hash
from kubequeue.labels import ADMITTED_AT, GAVE_UP, PREEMPTED_BY, REQUEUED_AT, REQUEUES
from kubequeue.queueing.queue import JobQueue
from kubequeue.queueing.spec import parse_queue
from kubequeue.resources import GPU
from unit import builders as b
from unit.simcluster import JOB, admitted_annotations

START = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC).timestamp()
NAMESPACES = ("ns-a", "ns-b", "ns-c")
TEAMS = ("team-a", "team-b", "team-c")


def _queue(name: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": spec}


def _queues(config: dict[str, Any]) -> list[dict[str, Any]]:
    if not config["tree"]:
        return []
    top = config["research_max"]
    research = {"quota": {"max": {GPU: top}}} if top is not None else {}
    out = [_queue("research", **research), _queue("ops")]
    for i, team in enumerate(TEAMS):
        strategy, lo, hi, reclaim, within, weight = config["teams"][i]
        quota: dict[str, Any] = {}
        if lo is not None:
            quota["min"] = {GPU: lo}
        if hi is not None:
            quota["max"] = {GPU: max(hi, lo or 0)}
        spec: dict[str, Any] = {
            "parent": "ops" if i == 2 else "research",
            "strategy": strategy,
            "weight": weight,
            "namespaceSelector": {"matchLabels": {"team": team[-1]}},
        }
        if quota:
            spec["quota"] = quota
        if reclaim or within:
            spec["preemption"] = {
                "reclaimWithinTree": "Any" if reclaim else "Never",
                "withinQueue": "LowerPriority" if within else "Never",
            }
        out.append(_queue(team, **spec))
    return out


class World:
    """A tracker and a cycle, with the API server's and the kubelet's parts played here."""

    def __init__(self, config: dict[str, Any], parked: bool) -> None:
        self.config = config
        self.parked = parked
        self.now = 1000.0  # monotonic
        self.wall = START + 120.0
        cache = CapacityCache()
        self.tracker = JobTracker(cache, JobQueue(), Reservations(cache))
        self.tracker.register(JOB)
        self.tracker.set_priority_classes({"low": 0, "high": 1000}, 0)
        self.labels = {"ns-a": "a", "ns-b": "b", "ns-c": "c"}
        for ns, team in self.labels.items():
            self.tracker.set_namespace(ns, {"team": team})
        self.tracker.set_queues(parse_queue(q) for q in _queues(config))
        self.cycle = AdmissionCycle(
            self.tracker,
            strict_fifo=config["strict"],
            starvation_seconds=config["starvation"],
            explain_budget=config["budget"],
            report_interval=config["interval"],
            clock=lambda: self.now,
            wall_clock=lambda: self.wall,
            preemption=PreemptionPolicy(lower_priority=config["preempt"]),
            requeue=RequeuePolicy(timeout=config["requeue_timeout"], backoff=20.0),
            parking=parked,
        )
        self.nodes: dict[str, Any] = {}
        self.specs: dict[str, dict[str, Any]] = {}  # job name -> what it was submitted with
        self.versions: dict[str, int] = {}
        self.objects: dict[str, dict[str, Any]] = {}  # running (admitted and bound) jobs
        self.kept: dict[str, dict[str, str]] = {}  # annotations kube-queue wrote on a job
        self.pods: dict[str, list[str]] = {}
        self.pending: list[Any] = []  # admissions not yet written
        self.victims: list[tuple[str, str]] = []  # (victim name, preemptor key)
        self.others: list[str] = []  # pods of no job
        self.serial = 0

    # ------------------------------------------------------------------ helpers
    def job_obj(self, name: str, *, suspend: bool = True) -> dict[str, Any]:
        s = self.specs[name]
        labels = {"kube-queue.io/queue-name": s["label"]} if s["label"] else None
        annotations = dict(self.kept.get(name, {}))
        obj = b.job(
            name,
            {"cpu": "1", GPU: str(s["gpus"])},
            namespace=s["ns"],
            parallelism=s["pods"],
            created=f"2026-01-01T00:00:{s['second']:02d}Z",
            labels=labels,
            annotations=annotations,
            suspend=suspend,
            resource_version=str(self.versions[name]),
            node_selector={"zone": s["zone"]} if s["zone"] else None,
            priority_class=s["prio"],
        )
        obj["metadata"]["uid"] = f"uid-{name}"
        return obj

    def run_cycle(self, *, split: bool = False) -> tuple[Any, ...]:
        # split: the decisions only, as the admission loop runs them; the reasons they leave due
        # are written by the next settle or cycle, after whatever events come in between.
        # The parked world also runs each cycle in the admission loop's slices, as small as
        # they get (it stops at every job), so this compares slicing too.
        r = sliced(self.cycle) if self.parked else self.cycle.decide()
        if not split:
            r.notices.extend(self.cycle.explain_deferred())
        self.pending.extend(r.admitted)
        for plan in r.preemptions:
            self.victims.extend((v.key[2], "/".join(plan.job.key)) for v in plan.victims)
        for requeue in r.requeues:
            self.requeue(requeue)
        return summary(self, r)

    def requeue(self, requeue: Any) -> None:
        name = requeue.job.key[2]
        if name not in self.objects:
            return
        obj = self.objects.pop(name)
        annotations = dict(obj["metadata"]["annotations"])
        annotations.pop(ADMITTED_AT, None)
        annotations[REQUEUES] = str(requeue.attempt)
        annotations[REQUEUED_AT] = datetime.datetime.fromtimestamp(
            self.wall, datetime.UTC
        ).strftime("%Y-%m-%dT%H:%M:%SZ")
        if requeue.gave_up:
            annotations[GAVE_UP] = spec_hash(obj)
        self.kept[name] = {k: v for k, v in annotations.items() if k != ADMITTED_AT}
        self.versions[name] += 1
        self.tracker.observe(JOB, self.job_obj(name))
        self.pods_leave(name)

    def pods_leave(self, name: str) -> None:
        for uid in self.pods.pop(name, []):
            self.tracker.pod_changed(self.tracker.cache.delete_pod(uid))

    def put_node(self, i: int, gpus: int, zone: str, ready: bool) -> None:
        n = b.node(f"n{i}", gpu=gpus, labels={"zone": zone}, ready=ready, pods="20")
        self.nodes[f"n{i}"] = n
        self.tracker.cache.upsert_node(n)

    # ------------------------------------------------------------------ events
    def apply(self, op: tuple[Any, ...]) -> tuple[Any, ...] | None:
        kind = op[0]
        tracker = self.tracker
        cache = tracker.cache
        if kind == "cycle":
            return self.run_cycle()
        if kind == "decide":
            return self.run_cycle(split=True)
        if kind == "settle":  # the admission loop's idle time: a slice of the parks decided
            self.cycle.settle(op[1])
            return None
        if kind == "submit":
            _, i, ns, gpus, pods, prio, zone, second, label = op
            name = f"j{i:02d}"
            if name in self.objects or any(a.job.key[2] == name for a in self.pending):
                return None  # running or being admitted: a spec change is not ours to judge
            if name in tracker.preempting:
                return None
            self.specs[name] = {
                "ns": NAMESPACES[ns],
                "gpus": gpus,
                "pods": pods,
                "prio": prio,
                "zone": zone,
                "second": second,
                "label": label,
            }
            self.versions[name] = self.versions.get(name, 0) + 1
            tracker.observe(JOB, self.job_obj(name))
        elif kind == "touch":  # a new version with the same spec (labels or status moved)
            name = f"j{op[1]:02d}"
            if name in self.specs and tracker.queue.get(("Job", self.specs[name]["ns"], name)):
                self.versions[name] += 1
                tracker.observe(JOB, self.job_obj(name))
        elif kind == "delete":
            keys = sorted(tracker.queue.keys())
            if keys:
                tracker.forget(keys[op[1] % len(keys)])
        elif kind == "node":
            _, i, gpus, zone, ready = op
            self.put_node(i, gpus, zone, ready)
        elif kind == "node_gone":
            names = sorted(self.nodes)
            if names:
                name = names[op[1] % len(names)]
                del self.nodes[name]
                cache.delete_node(name)
        elif kind == "other_start":
            names = sorted(self.nodes)
            if names:
                node = names[op[1] % len(names)]
                uid = f"other-{self.serial}"
                self.serial += 1
                pod = b.pod(uid, node, {"cpu": "1", GPU: str(op[2])}, uid=uid)
                tracker.pod_changed(cache.upsert_pod(pod, None))
                self.others.append(uid)
        elif kind == "other_end" and self.others:
            uid = self.others.pop(op[1] % len(self.others))
            tracker.pod_changed(cache.delete_pod(uid))
        elif kind in ("bind", "misbind") and self.pending:
            # misbind: the scheduler puts the pods on another node than planned (room held for
            # another job may be taken: capacity is then owed, Reservations.debt)
            a = self.pending.pop(op[1] % len(self.pending))
            names = sorted(self.nodes)
            elsewhere = names[op[3] % len(names)] if kind == "misbind" and names else None
            name = a.job.key[2]
            obj = self.job_obj(name, suspend=False)
            extra = a.job.admission_annotations
            annotations = admitted_annotations(obj["metadata"]["annotations"], extra)
            obj["metadata"]["annotations"] = annotations
            self.kept[name] = {k: v for k, v in annotations.items() if k != ADMITTED_AT}
            self.versions[name] += 1
            obj["metadata"]["resourceVersion"] = str(self.versions[name])
            self.objects[name] = obj
            tracker.admission_succeeded(a.job.key, JOB, obj)
            stuck = op[2]
            uids = []
            for placed in a.assignments:
                for k in range(placed.count):
                    uid = f"{name}-{self.versions[name]}-{placed.node}-{k}"
                    pod = b.pod(
                        uid,
                        elsewhere or placed.node,
                        {"cpu": "1", GPU: str(self.specs[name]["gpus"])},
                        namespace=a.job.key[1],
                        owner_job=name,
                        uid=uid,
                        phase="Pending" if stuck else "Running",
                    )
                    tracker.pod_changed(cache.upsert_pod(pod, (a.job.key, None)))
                    uids.append(uid)
            self.pods[name] = uids
        elif kind == "fail" and self.pending:
            a = self.pending.pop(op[1] % len(self.pending))
            tracker.admission_failed(a.job.key)
        elif kind == "finish" and self.objects:
            names = sorted(self.objects)
            name = names[op[1] % len(names)]
            obj = self.objects.pop(name)
            obj = {**obj, "status": {"conditions": [{"type": "Complete", "status": "True"}]}}
            self.pods_leave(name)
            tracker.observe(JOB, obj)
        elif kind == "preempted" and self.victims:
            for name, by in self.victims:
                obj = self.objects.pop(name, None)
                if obj is None:
                    continue
                annotations = dict(obj["metadata"]["annotations"])
                annotations.pop(ADMITTED_AT, None)
                annotations[PREEMPTED_BY] = by
                self.kept[name] = annotations
                self.versions[name] += 1
                tracker.observe(JOB, self.job_obj(name))
                if op[1]:
                    self.pods_leave(name)
            self.victims = []
        elif kind == "pods_leave":
            for name in [n for n in self.pods if n not in self.objects]:
                self.pods_leave(name)
        elif kind == "quota":
            _, team, lo, hi = op
            self.config["teams"][team] = (
                *self.config["teams"][team][:1],
                lo,
                hi,
                *self.config["teams"][team][3:],
            )
            tracker.set_queues(parse_queue(q) for q in _queues(self.config))
        elif kind == "strategy":  # a Queue's strategy or preemption settings change
            _, team, strategy, reclaim, within = op
            _, lo, hi, _, _, weight = self.config["teams"][team]
            self.config["teams"][team] = (strategy, lo, hi, reclaim, within, weight)
            tracker.set_queues(parse_queue(q) for q in _queues(self.config))
        elif kind == "ns":
            _, ns, team = op
            tracker.set_namespace(NAMESPACES[ns], {"team": team})
        elif kind == "prio":
            tracker.set_priority_classes({"low": 0, "high": op[1]}, 0)
        elif kind == "tick":
            self.now += op[1]
            self.wall += op[1]
        return None


def summary(world: World, r: CycleResult) -> tuple[Any, ...]:
    queue = world.tracker.queue
    jobs = []
    for line in queue.lines():
        for job in queue.ordered(line):
            jobs.append(
                (
                    job.key,
                    job.queue,
                    job.wait_reason,
                    job.quota_reason,
                    job.never_fits,
                    job.never_fits_generation,
                    job.over_quota,
                    job.explained_at,
                    job.failed_at,
                    dict(job.reported or {}),
                    queue.position(job.key),
                )
            )
    return (
        [(a.job.key, [(x.node, x.count) for x in a.assignments]) for a in r.admitted],
        [
            (p.job.key, [v.key for v in p.victims], [(x.node, x.count) for x in p.placement])
            for p in r.preemptions
        ],
        [(q.job.key, q.attempt, q.gave_up) for q in r.requeues],
        [(n.key, n.type, n.reason, n.message) for n in r.notices],
        r.evaluated,
        r.waiting,
        {line: job.key for line, job in world.cycle.blocked.items()},
        jobs,
    )


team_st = st.tuples(
    st.sampled_from(["BestEffortFIFO", "BestEffortFIFO", "StrictFIFO"]),
    st.sampled_from([None, 4, 0, 2, 8, 16]),  # min GPUs
    st.sampled_from([None, 6, 4, 8, 12, 24]),  # max GPUs
    st.sampled_from([False, False, True]),  # reclaim
    st.sampled_from([False, False, True]),  # preempt lower priority within the queue
    st.sampled_from([1, 1, 2]),  # weight
)
config_st = st.fixed_dictionaries(
    {
        "tree": st.booleans(),
        "research_max": st.sampled_from([None, None, 8, 16]),
        "teams": st.lists(team_st, min_size=3, max_size=3),
        "strict": st.sampled_from([False, False, True]),
        "preempt": st.sampled_from([False, False, True]),
        "starvation": st.sampled_from([0.0, 0.0, 30.0, 200.0]),
        "budget": st.sampled_from([0, 1, 2, 25]),
        "interval": st.sampled_from([5.0, 60.0]),
        "requeue_timeout": st.sampled_from([0.0, 0.0, 40.0]),
    }
)
node_st = st.tuples(
    st.just("node"),
    st.integers(0, 5),
    st.sampled_from([8, 8, 4, 2, 0]),
    st.sampled_from(["a", "b"]),
    st.sampled_from([True, True, True, True, False]),
)
submit_st = st.tuples(
    st.just("submit"),
    st.integers(0, 24),
    st.integers(0, 2),  # namespace
    st.sampled_from([2, 1, 1, 2, 3, 4, 8, 0, 9]),  # GPUs per pod
    st.sampled_from([2, 1, 1, 2, 3, 4, 6]),  # pods
    st.sampled_from([None, None, None, "low", "high", "high", "low", "high", "missing"]),
    st.sampled_from([None, None, None, "a", "b"]),  # zone
    st.integers(0, 59),  # created second
    st.sampled_from([None] * 12 + ["team-a", "team-c", "team-z"]),  # queue label
)
op_st = st.one_of(
    st.just(("cycle",)),
    st.just(("cycle",)),
    st.just(("decide",)),
    st.tuples(st.just("settle"), st.integers(1, 3)),
    submit_st,
    submit_st,
    st.tuples(st.just("touch"), st.integers(0, 24)),
    st.tuples(st.just("delete"), st.integers(0, 100)),
    node_st,
    st.tuples(st.just("node_gone"), st.integers(0, 10)),
    st.tuples(st.just("other_start"), st.integers(0, 10), st.integers(0, 4)),
    st.tuples(st.just("other_end"), st.integers(0, 100)),
    st.tuples(st.just("bind"), st.integers(0, 100), st.sampled_from([False, False, True])),
    st.tuples(st.just("bind"), st.integers(0, 100), st.just(False)),
    st.tuples(st.just("misbind"), st.integers(0, 100), st.just(False), st.integers(0, 10)),
    st.tuples(st.just("fail"), st.integers(0, 100)),
    st.tuples(st.just("finish"), st.integers(0, 100)),
    st.tuples(st.just("finish"), st.integers(0, 100)),
    st.tuples(st.just("preempted"), st.booleans()),
    st.just(("pods_leave",)),
    st.tuples(
        st.just("quota"),
        st.integers(0, 2),
        st.one_of(st.none(), st.integers(0, 16)),
        st.one_of(st.none(), st.integers(2, 24)),
    ),
    st.tuples(
        st.just("strategy"),
        st.integers(0, 2),
        st.sampled_from(["BestEffortFIFO", "StrictFIFO"]),
        st.booleans(),
        st.booleans(),
    ),
    st.tuples(st.just("ns"), st.integers(0, 2), st.sampled_from(["a", "b", "c", "x"])),
    st.tuples(st.just("prio"), st.sampled_from([1000, -5, 10])),
    st.tuples(st.just("tick"), st.sampled_from([1.0, 3.0, 10.0, 61.0])),
)


def sliced(cycle: AdmissionCycle) -> CycleResult:
    """The cycle as the admission loop runs it, stopped at every chance (a zero budget)."""
    steps = cycle.slices(0.0)
    while True:
        try:
            next(steps)
        except StopIteration as done:
            result: CycleResult = done.value
            return result


def check(
    config: dict[str, Any],
    nodes: list[tuple[Any, ...]],
    jobs: list[tuple[Any, ...]],
    ops: list[tuple[Any, ...]],
) -> None:
    worlds = [World(dict(config, teams=list(config["teams"])), on) for on in (True, False)]
    slack, factor = parking.COMPACT_SLACK, parking.COMPACT_FACTOR
    # Compact the heaps at every push (as they are, now and then, with many parked jobs).
    parking.COMPACT_SLACK = parking.COMPACT_FACTOR = 0
    try:
        for w in worlds:
            for op in [*nodes, *jobs]:
                w.apply(op)
        for step, op in enumerate([*ops, ("cycle",), ("tick", 61.0), ("cycle",)]):
            outcomes = [w.apply(op) for w in worlds]
            if op[0] in ("cycle", "decide"):
                parked, reference = outcomes
                assert parked == reference, (step, op)
    finally:
        parking.COMPACT_SLACK, parking.COMPACT_FACTOR = slack, factor


def worlds(config: st.SearchStrategy[Any], ops: st.SearchStrategy[Any]) -> Any:
    """What ``check`` takes: a configuration, nodes, queued jobs, then random events."""
    return st.tuples(
        config,
        st.lists(node_st, min_size=2, max_size=6),
        st.lists(submit_st, min_size=5, max_size=40),
        st.lists(ops, min_size=30, max_size=120),
    )


SLOW = {
    "deadline": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
}


@settings(max_examples=400, **SLOW)
@given(worlds(config_st, op_st))
def test_parking_never_changes_what_a_cycle_decides(world: tuple[Any, ...]) -> None:
    check(*world)


# Queues whose quotas refuse often, and events that free and take capacity: jobs are parked for
# quota and woken in the middle of a walk (an admission ahead of them moved their tree's usage).
quota_config_st = st.fixed_dictionaries(
    {
        "tree": st.just(True),
        "research_max": st.sampled_from([None, 12]),
        "teams": st.lists(
            st.tuples(
                st.sampled_from(["BestEffortFIFO", "BestEffortFIFO", "StrictFIFO"]),
                st.sampled_from([None, 2, 4]),
                st.sampled_from([4, 6, 8]),
                st.just(False),
                st.just(False),
                st.sampled_from([1, 2]),
            ),
            min_size=3,
            max_size=3,
        ),
        "strict": st.just(False),
        "preempt": st.just(False),
        "starvation": st.sampled_from([0.0, 0.0, 30.0]),
        "budget": st.sampled_from([1, 25]),
        "interval": st.sampled_from([5.0, 60.0]),
        "requeue_timeout": st.just(0.0),
    }
)
quota_op_st = st.one_of(
    st.just(("cycle",)),
    st.just(("cycle",)),
    submit_st,
    st.tuples(st.just("other_start"), st.integers(0, 10), st.integers(0, 4)),
    st.tuples(st.just("other_end"), st.integers(0, 100)),
    st.tuples(st.just("bind"), st.integers(0, 100), st.just(False)),
    st.tuples(st.just("misbind"), st.integers(0, 100), st.just(False), st.integers(0, 10)),
    st.tuples(st.just("finish"), st.integers(0, 100)),
    st.tuples(st.just("fail"), st.integers(0, 100)),
    st.tuples(st.just("tick"), st.sampled_from([1.0, 10.0])),
)


@settings(max_examples=200, **SLOW)
@given(worlds(quota_config_st, quota_op_st))
def test_parking_for_quota_never_changes_what_a_cycle_decides(world: tuple[Any, ...]) -> None:
    check(*world)


def test_a_quota_parked_job_the_walk_has_not_reached_is_judged_again_after_an_admission() -> None:
    """In the middle of a walk: an admission moves its tree's usage, so a job of that tree that
    was refused at the old usage and that the walk has not reached yet is evaluated again."""
    config = {
        "tree": True,
        "research_max": None,
        "teams": [("BestEffortFIFO", None, 4, False, False, 1)] * 3,
        "strict": False,
        "preempt": False,
        "starvation": 0.0,
        "budget": 25,
        "interval": 60.0,
        "requeue_timeout": 0.0,
    }
    nodes = [("node", 0, 8, "a", True), ("node", 1, 8, "b", True)]
    # a running job of team-a (3 of its max of 4 GPUs), then others fill n0 and n1
    jobs = [("submit", 0, 0, 3, 1, None, "a", 0, None), ("cycle",), ("bind", 0, False)]
    ops = [
        ("other_start", 0, 3),
        ("other_start", 1, 8),
        ("submit", 1, 0, 1, 1, None, "b", 1, None),  # fits quota, not capacity (n1 is full)
        ("submit", 2, 0, 2, 1, None, "a", 2, None),  # fits n0, not team-a's max
        ("cycle",),
        ("other_end", 1),  # n1 is free: the first fits now, then the second is over the max
        ("cycle",),
    ]
    check(config, nodes, jobs, ops)


def test_a_due_job_that_does_not_spend_the_explanation_budget_leaves_it_to_the_next() -> None:
    """Capacity was freed, so parked jobs are evaluated and the budget (1) goes to the first of
    them whose reason is stale. The first such job of the line, woken for it, does not spend
    it: it is admitted, or refused by its quota. The next due job of the line (which nothing
    freed can make fit) is then explained, as with every job visited."""
    team = ("BestEffortFIFO", None, 4, False, False, 1)
    config = {
        "tree": False,
        "research_max": None,
        "teams": [team] * 3,
        "strict": False,
        "preempt": False,
        "starvation": 0.0,
        "budget": 1,
        "interval": 5.0,
        "requeue_timeout": 0.0,
    }
    nodes = [("node", 0, 8, "a", True)]
    jobs = [
        ("submit", 0, 0, 3, 2, None, None, 1, None),  # j00: 2 pods of 3 GPUs, last in line
        ("submit", 1, 0, 1, 2, None, None, 0, None),  # j01 and j02: 2 pods of 1 GPU
        ("submit", 2, 0, 1, 2, None, None, 0, None),
    ]
    ops = [
        ("other_start", 0, 4),
        ("other_start", 0, 4),  # n0 is full
        ("cycle",),  # nothing fits; j01 is explained (the budget), all three are parked
        ("other_end", 0),  # 4 GPUs free: j01 wakes (its shape fits), j02 for its explanation
        ("cycle",),  # j01 and j02 are admitted: the budget is left to j00
    ]
    check(config, nodes, jobs, ops)
    # The same in team-a, whose max of 2 GPUs refuses j02 once j01 is admitted.
    check(
        {**config, "tree": True, "teams": [(*team[:2], 2, *team[3:]), team, team]}, nodes, jobs, ops
    )
