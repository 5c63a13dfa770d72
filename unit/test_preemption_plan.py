"""plan_preemption (admission/preemption.py) on small random clusters, against a brute force
written here from docs/queues.md ("Preemption" and "The rules, precisely") alone: its own
per-node fit (every assignment of the preemptor's pods to nodes), its own candidate rules, its
own reading of the reclaim limit and its own quota arithmetic, over every subset of the
candidates. Nothing of capacity/fit.py, capacity/victims.py or the ledger's decisions is reused
(the ledger only serves the real call; its verdict on the preemptor is checked against the
reference's quota model before anything else).

Instances: 1-3 nodes of a few GPUs and CPUs; up to 6 admitted jobs of 1-2 pods (some marked
kube-queue.io/preemptible "false", by annotation or label); pods of no job; sometimes a
suspended job whose pods are still leaving; either the implicit queue with
``--preemption=lower-priority``, or a research/team-a,b,c tree with random min/max (leaf and
root) and reclaimWithinTree/withinQueue. A second generator lines up reclaims (a preemptor
within its guarantee, other queues borrowing), which random trees rarely do.

1. Soundness: the victims are distinct allowed candidates (withinQueue: same queue, strictly
   lower priority; reclaim: the preemptor stays within its guarantee, the victim's queue is
   another queue of its tree above its min in GPUs, which the preemptor requests; never a job
   marked preemptible "false"); per queue they respect the reclaim limit (they can be taken
   one by one, each while the queue is still above its min); with them and the leaving
   capacity gone every pod of the preemptor fits and its quota allows it; the returned
   placement itself fits; nobody is preempted when it fits with what is leaving.
2. Minimality: putting any one victim back makes it not fit, or not allowed by its quota.
3. Completeness, where the cycle calls plan_preemption (the preemptor does not fit now, or is
   over quota and may preempt within its queue): if it fits once what is leaving is gone, a
   plan (waiting only) is returned; then
   - without reclaim candidates: if removing ALL allowed candidates lets it fit within its
     quota, a plan is returned (fit and quota only get easier as victims are added, so the
     documented greedy finds one);
   - with reclaim candidates the documented algorithm is a heuristic, and what it promises is
     checked: if one of the orders it tries (cheapest first; then each node's candidates first,
     cheapest first, then the rest), taken to the end while the reclaim limit allows, makes it
     fit within its quota, a plan is returned. That some subset within the limit would work
     while plan_preemption returns None is only counted (``event``): it does happen, and the
     clearest case (fixed since) is the reproduction at the end of this file.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pytest
from hypothesis import event, example, given, settings
from hypothesis import strategies as st

from kubequeue.admission.preemption import Preemption, PreemptionPolicy, plan_preemption
from kubequeue.admission.tracker import JobTracker
from kubequeue.capacity.cache import CapacityCache
from kubequeue.capacity.reservations import Reservations
from kubequeue.labels import ADMITTED_AT, PREEMPTIBLE
from kubequeue.queueing.queue import JobQueue
from kubequeue.queueing.spec import parse_queue
from kubequeue.resources import GPU
from unit import builders as b
from unit.simcluster import JOB, Cluster, queue

TEAMS = ("team-a", "team-b", "team-c")
NS = {"team-a": "ns-a", "team-b": "ns-b", "team-c": "ns-c", "": "ns"}
PRIORITY_CLASSES = {"p0": 0, "p1": 1, "p2": 2}


# --------------------------------------------------------------------------- the instance
@dataclass(frozen=True)
class Job:
    name: str
    team: str  # "" for the implicit queue
    priority: int
    gpu: int  # per pod
    cpu: int  # per pod
    nodes: tuple[int, ...]  # one entry per bound pod
    preemptible: bool = True
    opt_out_by_label: bool = False  # "false" as a label rather than an annotation

    @property
    def gpus(self) -> int:
        return self.gpu * len(self.nodes)


@dataclass(frozen=True)
class Quota:
    min: int | None
    max: int | None


@dataclass(frozen=True)
class Tree:
    root_max: int | None
    leaves: dict[str, Quota]


@dataclass(frozen=True)
class Preemptor:
    team: str
    priority: int
    count: int
    gpu: int
    cpu: int


@dataclass(frozen=True)
class Instance:
    nodes: tuple[tuple[int, int], ...]  # (gpus, cpus)
    jobs: tuple[Job, ...]  # admitted, in admission order
    foreign: tuple[tuple[int, int, int], ...]  # (node, gpus, cpus), owned by no job
    leaving: Job | None  # suspended (queued again), its pods still terminating
    tree: Tree | None  # None: no Queue objects, the implicit queue
    preemptor: Preemptor
    reclaim: bool
    lower_priority: bool


@st.composite
def instances(draw: st.DrawFn, reclaiming: bool = False) -> Instance:
    """``reclaiming``: a tree where the preemptor's queue has a guarantee to reclaim and the
    other queues have jobs that borrow (random instances rarely line all that up)."""
    if reclaiming:  # GPU nodes, filled by several small jobs of other queues
        gpus, cpus = st.sampled_from([2, 4, 4]), st.sampled_from([2, 4, 8])
    else:
        gpus, cpus = st.sampled_from([0, 1, 2, 2, 4, 4]), st.sampled_from([1, 2, 4, 4, 8])
    nodes = tuple((draw(gpus), draw(cpus)) for _ in range(draw(st.sampled_from([1, 2, 2, 3, 3]))))
    room = [list(n) for n in nodes]
    node_index = st.integers(0, len(nodes) - 1)

    def bind(count: int, gpu: int, cpu: int) -> tuple[int, ...]:
        """Nodes for up to ``count`` pods: a drawn node, else the next one with room (a pod
        that fits nowhere is not created: a cluster is never over-full)."""
        out = []
        for _ in range(count):
            first = draw(node_index)
            for n in [*range(first, len(nodes)), *range(first)]:
                if room[n][0] >= gpu and room[n][1] >= cpu:
                    room[n][0] -= gpu
                    room[n][1] -= cpu
                    out.append(n)
                    break
        return tuple(out)

    flat = not reclaiming and draw(st.booleans())
    if flat:
        reclaim, lower = False, True  # no Queue objects, --preemption=lower-priority
    elif reclaiming:
        reclaim, lower = True, draw(st.booleans())
    else:
        reclaim, lower = draw(st.sampled_from([(True, False), (False, True), (True, True)]))
    # GPUs per pod: what the biggest node could hold (else it never fits, and says little);
    # a reclaim mostly wants a whole node (so that it takes several small borrowed jobs).
    biggest = max(n[0] for n in nodes)
    sizes = [g for g in (0, 1, 1, 2, 2, 3, 4) if g <= biggest]
    preemptor = Preemptor(
        "" if flat else draw(st.sampled_from(TEAMS)),
        draw(st.sampled_from([0, 1, 2, 2])),
        draw(st.sampled_from([1, 1, 2])),
        draw(st.sampled_from([1, 2, biggest, biggest] if reclaiming else sizes)),
        draw(st.sampled_from([1, 1, 2])),
    )
    # Half the jobs in the preemptor's queue, the rest anywhere.
    own = [preemptor.team] * (1 if reclaiming else 3)
    teams = st.just("") if flat else st.sampled_from(own + list(TEAMS))
    jobs = []
    shapes = [0, 1, 1, 1, 2] if reclaiming else [0, 1, 1, 2, 2, 3]
    for i in range(draw(st.sampled_from([3, 4, 5, 6] if reclaiming else [1, 2, 3, 4, 4, 5, 5, 6]))):
        gpu, cpu = draw(st.sampled_from(shapes)), draw(st.sampled_from([1, 1, 2]))
        placed = bind(draw(st.integers(1, 2)), gpu, cpu)
        team, priority = draw(teams), draw(st.integers(0, 2))
        preemptible = draw(st.sampled_from([True, True, True, False]))
        by_label = draw(st.booleans())
        if placed:
            jobs.append(Job(f"j{i}", team, priority, gpu, cpu, placed, preemptible, by_label))
    foreign = []
    for _ in range(draw(st.integers(0, 2))):
        gpu, cpu = draw(st.integers(0, 2)), draw(st.integers(0, 1))
        [n] = bind(1, gpu, cpu) or [None]
        if n is not None:
            foreign.append((n, gpu, cpu))
    leaving = None
    if draw(st.integers(0, 3)) == 0:
        gpu, cpu = draw(st.integers(0, 2)), 1
        placed = bind(1, gpu, cpu)
        if placed:
            leaving = Job("gone", draw(teams), 0, gpu, cpu, placed)
    tree: Tree | None = None
    if not flat:
        leaves = {}
        for team in TEAMS:
            if reclaiming:
                # A guarantee the preemptor stays within, on top of what its queue runs; the
                # other queues mostly borrow.
                if team == preemptor.team:
                    mine = sum(j.gpus for j in jobs if j.team == team)
                    need = preemptor.gpu * preemptor.count
                    # (and now and then one it would exceed: then it may not reclaim)
                    mins = [
                        mine + need + extra
                        for extra in (-1, 0, 0, 1, 4)
                        if mine + need + extra >= 0
                    ]
                else:
                    mins = [0, 1, 1, 2]
            else:
                mins = [None, 0, 1, 2, 4, 4, 8] if team == preemptor.team else [None, 0, 0, 1, 2]
            low = draw(st.sampled_from(mins))
            extra = draw(st.sampled_from([None, 0, 1, 2, 4]))
            leaves[team] = Quota(low, None if extra is None else (low or 0) + extra)
        total = sum(q.min or 0 for q in leaves.values())
        extra = draw(st.sampled_from([None, 0, 2, 4]))
        tree = Tree(None if extra is None else total + extra, leaves)
    return Instance(nodes, tuple(jobs), tuple(foreign), leaving, tree, preemptor, reclaim, lower)


# --------------------------------------------------------------------------- the real thing
def key(name: str, team: str) -> tuple[str, str, str]:
    return ("Job", NS[team], name)


def requests(gpu: int, cpu: int) -> dict[str, str]:
    out = {"cpu": str(cpu)}
    if gpu:
        out[GPU] = str(gpu)
    return out


def queue_objects(tree: Tree, preemption: dict[str, str]) -> list[dict[str, object]]:
    out: list[dict[str, object]] = [
        {
            "metadata": {"name": "research"},
            "spec": {"quota": {"max": {GPU: tree.root_max}}} if tree.root_max is not None else {},
        }
    ]
    for team, q in tree.leaves.items():
        quota: dict[str, object] = {}
        if q.min is not None:
            quota["min"] = {GPU: q.min}
        if q.max is not None:
            quota["max"] = {GPU: q.max}
        spec: dict[str, object] = {
            "parent": "research",
            "namespaceSelector": {"matchLabels": {"team": team}},
            "preemption": preemption,
        }
        if quota:
            spec["quota"] = quota
        out.append({"metadata": {"name": team}, "spec": spec})
    return out


def build(inst: Instance) -> JobTracker:
    cache = CapacityCache()
    for n, (gpu, cpu) in enumerate(inst.nodes):
        cache.upsert_node(b.node(f"n{n}", cpu=str(cpu), gpu=gpu))
    tracker = JobTracker(cache, JobQueue(), Reservations(cache))
    tracker.register(JOB)
    tracker.set_priority_classes(PRIORITY_CLASSES, 0)
    for team in TEAMS:
        tracker.set_namespace(NS[team], {"team": team})
    tracker.set_namespace("ns", {})
    if inst.tree is not None:
        preemption = {
            "reclaimWithinTree": "Any" if inst.reclaim else "Never",
            "withinQueue": "LowerPriority" if inst.lower_priority else "Never",
        }
        tracker.set_queues(parse_queue(q) for q in queue_objects(inst.tree, preemption))
        assert not any(n.unusable for n in tracker.ledger.tree.nodes.values())

    def bind_pods(job: Job) -> None:
        for k, n in enumerate(job.nodes):
            uid = f"{job.name}-{k}"
            pod = b.pod(
                uid,
                f"n{n}",
                requests(job.gpu, job.cpu),
                namespace=NS[job.team],
                owner_job=job.name,
                uid=uid,
            )
            tracker.pod_changed(cache.upsert_pod(pod, (key(job.name, job.team), None)))

    for i, job in enumerate(inst.jobs):
        annotations = {ADMITTED_AT: f"2026-01-01T00:01:{i:02d}Z"}
        labels = {}
        if not job.preemptible:
            (labels if job.opt_out_by_label else annotations)[PREEMPTIBLE] = "false"
        obj = b.job(
            job.name,
            requests(job.gpu, job.cpu),
            namespace=NS[job.team],
            parallelism=len(job.nodes),
            suspend=False,
            annotations=annotations,
            labels=labels,
            priority_class=f"p{job.priority}",
        )
        tracker.observe(JOB, obj)
        bind_pods(job)
    if inst.leaving is not None:
        gone = inst.leaving
        tracker.observe(
            JOB,
            b.job(
                gone.name,
                requests(gone.gpu, gone.cpu),
                namespace=NS[gone.team],
                parallelism=len(gone.nodes),
            ),
        )
        bind_pods(gone)
    for k, (n, gpu, cpu) in enumerate(inst.foreign):
        cache.upsert_pod(b.pod(f"f{k}", f"n{n}", requests(gpu, cpu), uid=f"f{k}"), None)
    p = inst.preemptor
    tracker.observe(
        JOB,
        b.job(
            "preemptor",
            requests(p.gpu, p.cpu),
            namespace=NS[p.team],
            parallelism=p.count,
            priority_class=f"p{p.priority}",
            created="2026-01-01T00:02:00Z",
        ),
    )
    return tracker


def plan(inst: Instance, tracker: JobTracker) -> Preemption | None:
    job = tracker.queue.get(key("preemptor", inst.preemptor.team))
    assert job is not None and job.problem is None
    assert job.queue == (inst.preemptor.team if inst.tree is not None else "")
    return plan_preemption(tracker, job, PreemptionPolicy(inst.reclaim, inst.lower_priority))


# --------------------------------------------------------------------------- the reference
class Reference:
    """docs/queues.md, in whole GPUs and CPUs, for one instance."""

    def __init__(self, inst: Instance) -> None:
        self.inst = inst
        self.p = inst.preemptor
        self.jobs = {j.name: j for j in inst.jobs}
        self.need = self.p.gpu * self.p.count  # the preemptor's GPUs; the only quota resource

    # ---------------------------------------------------------------- capacity
    def free(self, gone: Iterable[str]) -> list[list[int]]:
        """Free (gpus, cpus) per node once ``gone`` and the leaving job's pods are gone."""
        gone = set(gone)
        free = [list(n) for n in self.inst.nodes]
        pods = [(n, j.gpu, j.cpu) for j in self.inst.jobs if j.name not in gone for n in j.nodes]
        pods += list(self.inst.foreign)
        for n, gpu, cpu in pods:
            free[n][0] -= gpu
            free[n][1] -= cpu
        assert all(g >= 0 and c >= 0 for g, c in free)
        return free

    def fits(self, gone: Iterable[str], leaving: bool = True) -> bool:
        """Some assignment of every pod of the preemptor to a node, all at once."""
        free = self.free(gone)
        if not leaving and self.inst.leaving is not None:
            for n in self.inst.leaving.nodes:
                free[n][0] -= self.inst.leaving.gpu
                free[n][1] -= self.inst.leaving.cpu
        for nodes in itertools.product(range(len(free)), repeat=self.p.count):
            if self.room(free, nodes):
                return True
        return False

    def room(self, free: Sequence[Sequence[int]], nodes: Iterable[int]) -> bool:
        left = [list(f) for f in free]
        for n in nodes:
            left[n][0] -= self.p.gpu
            left[n][1] -= self.p.cpu
        return all(g >= 0 and c >= 0 for g, c in left)

    # ---------------------------------------------------------------- quota
    def named(self, team: str) -> bool:
        """Whether GPUs limit this queue: it or the root names them in min or max."""
        tree = self.inst.tree
        assert tree is not None
        q = tree.leaves[team]
        return q.min is not None or q.max is not None or tree.root_max is not None

    def pooled(self) -> bool:
        tree = self.inst.tree
        return tree is not None and any(q.min is not None for q in tree.leaves.values())

    def emin(self, team: str) -> int:
        tree = self.inst.tree
        assert tree is not None
        return tree.leaves[team].min or 0

    def used(self, team: str, gone: Iterable[str] = ()) -> int:
        gone = set(gone)
        return sum(j.gpus for j in self.inst.jobs if j.team == team and j.name not in gone)

    def named_used(self, team: str, gone: Iterable[str] = ()) -> int:
        return self.used(team, gone) if self.named(team) else 0

    def borrowed(self, team: str) -> int:
        if not self.pooled() or not self.named(team):
            return 0
        return max(0, self.used(team) - self.emin(team))

    def quota_ok(self, gone: Iterable[str]) -> bool:
        """The rules, precisely: ceiling (with room for others' unused guarantees when
        borrowing), then guarantee or the tree's pool, for the preemptor's GPUs."""
        tree = self.inst.tree
        if tree is None:
            return True
        gone = set(gone)
        team, d = self.p.team, self.need
        if not d or not self.named(team):
            return True
        own = self.used(team, gone)
        borrowing = own + d > self.emin(team)
        ceilings = [([team], tree.leaves[team].max), (list(TEAMS), tree.root_max)]
        for under, limit in ceilings:
            if limit is None:
                continue
            after = sum(self.used(t, gone) for t in under) + d
            if after > limit:
                return False
            if borrowing:
                kept = sum(
                    max(0, self.emin(t) - self.used(t, gone) - (d if t == team else 0))
                    for t in under
                )
                if after + kept > limit:
                    return False
        if self.pooled():
            covered = self.named_used(team, gone) + d <= self.emin(team) or sum(
                self.named_used(t, gone) for t in TEAMS
            ) + d <= sum(self.emin(t) for t in TEAMS)
            if not covered:
                return False
        return True

    # ---------------------------------------------------------------- candidates
    def within_guarantee(self) -> bool:
        """The preemptor stays within its queue's min (so it may reclaim)."""
        team = self.p.team
        if not self.pooled() or not self.named(team) or not self.need:
            return True
        return self.named_used(team) + self.need <= self.emin(team)

    def by_priority(self, job: Job) -> bool:
        return (
            self.inst.lower_priority
            and job.preemptible
            and job.team == self.p.team
            and job.priority < self.p.priority
        )

    def by_reclaim(self, job: Job) -> bool:
        return (
            self.inst.reclaim
            and self.inst.tree is not None
            and job.preemptible
            and self.within_guarantee()
            and job.team != self.p.team
            and self.need > 0  # above its min in a resource the preemptor requests (GPUs)
            and self.borrowed(job.team) > 0
        )

    def candidates(self) -> list[str]:
        return [j.name for j in self.inst.jobs if self.by_priority(j) or self.by_reclaim(j)]

    def within_limit(self, victims: Iterable[str]) -> bool:
        """A queue gives up only what it borrowed: its victims can be taken one by one, each
        while the queue is still above its min, i.e. all but the last taken fit in what it
        borrowed (with room to spare)."""
        taken: dict[str, list[int]] = {}
        for name in victims:
            job = self.jobs[name]
            if not self.by_priority(job):
                taken.setdefault(job.team, []).append(job.gpus)
        return all(
            self.borrowed(team) - (sum(gpus) - max(gpus)) > 0 for team, gpus in taken.items()
        )

    def taken(self, order: Sequence[str]) -> list[str]:
        """What the documented greedy removes going through ``order`` to the end: every
        candidate, except a reclaim one whose queue is no longer above its min by then."""
        gone: dict[str, int] = {}
        out = []
        for name in order:
            job = self.jobs[name]
            if not self.by_priority(job):
                if self.borrowed(job.team) - gone.get(job.team, 0) <= 0:
                    continue
                gone[job.team] = gone.get(job.team, 0) + job.gpus
            out.append(name)
        return out

    def works(self, victims: Iterable[str]) -> bool:
        victims = list(victims)
        return self.fits(victims) and self.quota_ok(victims)


def subsets(names: Sequence[str]) -> Iterable[tuple[str, ...]]:
    return itertools.chain.from_iterable(
        itertools.combinations(names, r) for r in range(len(names) + 1)
    )


def cost_order(inst: Instance, names: Iterable[str]) -> list[str]:
    """Cheapest first, as documented: lowest priority, most recently admitted, smallest."""
    index = {j.name: i for i, j in enumerate(inst.jobs)}
    jobs = {j.name: j for j in inst.jobs}
    return sorted(
        names,
        key=lambda n: (jobs[n].priority, -index[n], jobs[n].gpus, jobs[n].cpu * len(jobs[n].nodes)),
    )


# --------------------------------------------------------------------------- the properties
def check(inst: Instance) -> None:
    tracker = build(inst)
    ref = Reference(inst)
    if inst.tree is not None:
        # The quota model here and the ledger agree where they can be compared directly.
        real = tracker.ledger.check(
            inst.preemptor.team, tracker.queue.get(key("preemptor", inst.preemptor.team)).demand
        ).allowed
        assert real == ref.quota_ok(()), "the reference's quota model disagrees with the ledger"
    result = plan(inst, tracker)
    allowed = ref.candidates()

    if result is not None:
        victims = [v.key[2] for v in result.victims]
        why = sorted({"priority" if ref.by_priority(ref.jobs[v]) else "reclaim" for v in victims})
        event("plan: " + ("wait only" if not victims else f"{len(victims)} victim(s)"))
        event("victims by: " + "+".join(why))
        # (1) soundness
        assert len(set(victims)) == len(victims), "a victim twice"
        for name in victims:
            job = ref.jobs[name]
            assert name in allowed, f"{name} is not a candidate ({job}, {inst.preemptor})"
            assert job.preemptible
        assert ref.within_limit(victims), f"more than a queue borrowed: {victims}"
        assert ref.fits(victims), f"removing {victims} does not make room"
        assert ref.quota_ok(victims), f"with {victims} gone its quota still refuses it"
        free = ref.free(victims)
        nodes = [int(a.node[1:]) for a in result.placement for _ in range(a.count)]
        assert len(nodes) == inst.preemptor.count
        assert ref.room(free, nodes), f"placement {result.placement} overcommits a node"
        if ref.works(()):
            assert victims == [], "it fits with what is leaving: nobody is to be preempted"
        # (2) minimality
        for name in victims:
            rest = [v for v in victims if v != name]
            assert not ref.works(rest), f"{name} was not needed (victims {victims})"

    # (3) completeness, where the cycle asks (admission/cycle.py: no fit now, or over quota
    # with withinQueue preemption).
    fits_now = ref.fits((), leaving=False)
    if fits_now and (ref.quota_ok(()) or not inst.lower_priority):
        event("not a call the cycle makes")
        return
    if result is None and ref.works(()):
        pytest.fail("it fits once the leaving capacity is gone, yet no plan (not even waiting)")
    reclaim = [n for n in allowed if not ref.by_priority(ref.jobs[n])]
    if not reclaim:
        if ref.works(allowed):
            assert result is not None, f"removing every candidate {allowed} works; no plan"
        else:
            event("nothing works")
        return
    # Reclaim: the documented algorithm is a heuristic; what it promises is that it finds a
    # plan when one of the orders it tries would: cheapest first, then (having failed) each
    # node's candidates first, cheapest first, then the rest. Fit and quota only get easier as
    # victims are added, so a plan exists iff removing all that an order lets it take works.
    order = cost_order(inst, allowed)
    tries = [order] + [
        [n for n in order if node in ref.jobs[n].nodes]
        + [n for n in order if node not in ref.jobs[n].nodes]
        for node in range(len(inst.nodes))
    ]
    for tried in tries:
        if ref.works(ref.taken(tried)):
            assert result is not None, f"taking {ref.taken(tried)} works; no plan"
    if result is None:
        works = [s for s in subsets(allowed) if ref.within_limit(s) and ref.works(s)]
        event("reclaim: a set within the limit works, no plan" if works else "nothing works")


# derandomize: the same 200 instances on every run (no example database either), so the test
# is deterministic; unit/ has no shared hypothesis profile.
@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(instances())
def test_plan_preemption_against_a_brute_force(inst: Instance) -> None:
    check(inst)


def spread_borrower() -> Instance:
    """The docs' worked example, halved and spread by the scheduler: team-a (min 4) runs four
    2-GPU jobs over two 4-GPU nodes, a0 and a2 on n0, a1 and a3 on n1; team-b (min 4) needs a
    whole node. The cheapest two (a3, a2) are on different nodes and use up what team-a
    borrowed: only the node-by-node retry finds a0 + a2."""
    jobs = tuple(Job(f"a{i}", "team-a", 0, 2, 1, (i % 2,)) for i in range(4))
    leaves = {"team-a": Quota(4, None), "team-b": Quota(4, None), "team-c": Quota(None, None)}
    return Instance(
        ((4, 4), (4, 4)), jobs, (), None, Tree(None, leaves),
        Preemptor("team-b", 0, 1, 4, 1), reclaim=True, lower_priority=False,
    )  # fmt: skip


def over_the_limit() -> Instance:
    """team-c (min 2) runs 1 + 2 GPUs on a 4-GPU node, so it borrowed 1: after one of its jobs
    it is back at its min, and a 4-GPU job of team-a may not take both (nothing is preempted)."""
    jobs = (Job("c0", "team-c", 0, 1, 1, (0,)), Job("c1", "team-c", 0, 2, 1, (0,)))
    leaves = {"team-a": Quota(4, None), "team-b": Quota(0, None), "team-c": Quota(2, None)}
    return Instance(
        ((4, 2),), jobs, (), None, Tree(None, leaves),
        Preemptor("team-a", 0, 1, 4, 1), reclaim=True, lower_priority=False,
    )  # fmt: skip


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(instances(reclaiming=True))
@example(spread_borrower())
@example(over_the_limit())
def test_plan_preemption_reclaims_against_a_brute_force(inst: Instance) -> None:
    check(inst)


# --------------------------------------------------------------------------- a defect found
# The reclaim limit is applied in cost order while the victims are chosen, so the cheapest
# candidate can use up what its queue borrowed and block the job that, together with it, takes
# exactly that. Found by the brute force above (the "a set within the limit works, no plan"
# event: 36 of 10,000 instances of the reclaim generator, 12 of them taking no more than the
# queue borrowed, all of this kind: a cheaper candidate taken first spends the budget without
# making room). Too rare for 200 examples, hence the explicit reproduction; not fixed here.
# Found by this file (fixed in admission/preemption.py): the reclaim limit was applied in cost
# order, so the most recently admitted job (1 GPU) used up the 1 GPU team-a borrowed and
# team-a's CPU-only job, which holds nothing borrowed but whose CPU the preemptor needs too,
# was skipped: no plan, although taking both gives up exactly what team-a borrowed.


def cpu_side_job() -> Instance:
    """One node (1 GPU, 2 CPUs). team-a (min 0) runs a CPU-only job (1 CPU) and, admitted
    after it, a 1-GPU job (1 GPU, 1 CPU): it borrowed 1 GPU. team-b (min 1) submits a job of
    1 GPU and 2 CPUs: only the whole node holds it."""
    jobs = (Job("cpu-side", "team-a", 0, 0, 1, (0,)), Job("gpu-side", "team-a", 0, 1, 1, (0,)))
    leaves = {"team-a": Quota(0, None), "team-b": Quota(1, None), "team-c": Quota(None, None)}
    return Instance(
        ((1, 2),), jobs, (), None, Tree(None, leaves),
        Preemptor("team-b", 0, 1, 1, 2), reclaim=True, lower_priority=False,
    )  # fmt: skip


def test_a_reclaim_may_take_exactly_what_a_queue_borrowed_whatever_the_cost_order() -> None:
    inst = cpu_side_job()
    ref = Reference(inst)
    # The reference's view: both are candidates, neither alone makes room, both together do
    # and take 1 GPU from team-a, exactly what it borrowed; team-b stays within its min.
    assert ref.within_guarantee() and ref.borrowed("team-a") == 1
    assert ref.candidates() == ["cpu-side", "gpu-side"]
    assert not ref.works(["cpu-side"]) and not ref.works(["gpu-side"])
    assert ref.works(["cpu-side", "gpu-side"]) and ref.within_limit(["cpu-side", "gpu-side"])
    result = plan(inst, build(inst))
    assert result is not None, "no plan: team-b never gets its guarantee back"
    assert sorted(v.key[2] for v in result.victims) == ["cpu-side", "gpu-side"]


def test_through_the_cycle_a_queue_within_its_min_stays_blocked_by_a_borrower() -> None:
    """The same through the admission cycle (unit/simcluster.py): 1 node of 2 GPUs and 2 CPUs;
    team-a (min 0) runs a CPU-only job and then a 1-GPU job (borrowing 1 GPU); team-b (min 2,
    reclaimWithinTree: Any) submits 2 pods of 1 GPU, 1 CPU each, within its guarantee. Only
    stopping both of team-a's jobs frees 2 CPUs; it is never done, and team-b waits while
    team-a keeps the GPU it borrowed."""
    c = Cluster(
        [
            queue("research"),
            queue("team-a", parent="research", quota={"min": {GPU: 0}},
                  namespaceSelector={"matchLabels": {"team": "a"}}),
            queue("team-b", parent="research", quota={"min": {GPU: 2}},
                  namespaceSelector={"matchLabels": {"team": "b"}},
                  preemption={"reclaimWithinTree": "Any"}),
        ],
        b.node("n1", cpu="2", gpu=2),
    )  # fmt: skip
    c.submit("cpu-side", "ns-a", 0, 0)
    c.submit("gpu-side", "ns-a", 1, 1)
    assert c.cycle_admits() == ["cpu-side", "gpu-side"]
    assert c.tracker.ledger.borrowed("team-a") == {GPU: 1000}
    c.submit("b0", "ns-b", 1, 2, parallelism=2)
    assert c.cycle_admits() == []
    assert c.last.preemptions, "no preemption: team-b stays below its min"
    [plan_] = c.last.preemptions
    assert sorted(v.key[2] for v in plan_.victims) == ["cpu-side", "gpu-side"]
