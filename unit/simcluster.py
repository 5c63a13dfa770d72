"""A simulated cluster for admission-logic tests: the real tracker, cycle and capacity cache,
with the API server's part played here (admitted jobs' pods bind where the placement put them;
stopped jobs' pods go when told), so tests read as what happens to jobs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubequeue.admission.cycle import AdmissionCycle, CycleResult
from kubequeue.admission.notices import Notice
from kubequeue.admission.preemption import PreemptionPolicy
from kubequeue.admission.tracker import JobTracker
from kubequeue.capacity.cache import CapacityCache
from kubequeue.capacity.reservations import Reservations
from kubequeue.kinds.job import JobKind
from kubequeue.kube import writer
from kubequeue.labels import ADMITTED_AT, PREEMPTED_BY
from kubequeue.queueing.queue import JobQueue
from kubequeue.queueing.spec import parse_queue
from kubequeue.resources import GPU
from unit import builders as b

JOB = JobKind()


def queue(name: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": spec}


def two_teams(**team_b: Any) -> list[dict[str, Any]]:
    """research with team-a and team-b under it (min 8, max 16 GPUs each); ``team_b`` adds to
    team-b's spec (e.g. a preemption policy)."""
    return [
        queue("research"),
        queue(
            "team-a",
            parent="research",
            quota={"min": {GPU: 8}, "max": {GPU: 16}},
            namespaceSelector={"matchLabels": {"team": "a"}},
        ),
        queue(
            "team-b",
            parent="research",
            quota={"min": {GPU: 8}, "max": {GPU: 16}},
            namespaceSelector={"matchLabels": {"team": "b"}},
            **team_b,
        ),
    ]


TWO_TEAMS = two_teams()


def make(
    queues: list[dict[str, Any]], *nodes: Any, **cycle_kw: Any
) -> tuple[JobTracker, AdmissionCycle]:
    cache = CapacityCache()
    for n in nodes:
        cache.upsert_node(n)
    tracker = JobTracker(cache, JobQueue(), Reservations(cache))
    tracker.register(JOB)
    tracker.set_priority_classes({"low": 0, "high": 1000}, 0)
    tracker.set_namespace("ns-a", {"team": "a"})
    tracker.set_namespace("ns-b", {"team": "b"})
    tracker.set_queues(parse_queue(q) for q in queues)
    return tracker, AdmissionCycle(tracker, **cycle_kw)


def gpu_job(name: str, ns: str, gpus: int, second: int, **kw: Any) -> dict[str, Any]:
    return b.job(
        name,
        {"cpu": "1", GPU: str(gpus)},
        namespace=ns,
        created=f"2026-01-01T00:00:{second:02d}Z",
        **kw,
    )


def admitted_annotations(kept: Mapping[str, str], extra: Mapping[str, str]) -> dict[str, str]:
    """A job's annotations once the API server applied its admission write: ``kept`` with the
    writer's own annotations (kube/writer.py; a None value removes one), ``extra`` being the
    job's ``admission_annotations``. Taken from the writer, not restated, so that a simulated
    admission keeps and drops exactly what a real one does (admitted-at "now" here)."""
    annotations = dict(kept)
    for name, value in writer.admission_annotations(extra, "now").items():
        if value is None:
            annotations.pop(name, None)
        else:
            annotations[name] = value
    return annotations


def accept_admissions(tracker: JobTracker, cycle: AdmissionCycle) -> tuple[list[str], list[Notice]]:
    """Run a cycle whose admissions the API server accepts; no pod is bound yet (binding is the
    test's part: ``bind_gpu_pod``). For ``gpu_job`` jobs of one pod set."""
    result = cycle.run()
    for a in result.admitted:
        _, ns, name = a.job.key
        pods = a.job.pod_sets[0]
        gpus = int(pods.request.get(GPU, 0) // 1000)
        obj = gpu_job(name, ns, gpus, 0, parallelism=pods.count)
        obj["spec"]["suspend"] = False
        obj["metadata"]["annotations"] = {ADMITTED_AT: "now"}
        obj["metadata"]["resourceVersion"] = "2"
        tracker.admission_succeeded(a.job.key, JOB, obj)
    return [a.job.key[2] for a in result.admitted], result.notices


def bind_gpu_pod(tracker: JobTracker, job: str, node: str, gpus: int, uid: str) -> None:
    """A pod of ``job`` (namespace default) bound to ``node``, as the scheduler chose."""
    pod = b.pod(uid, node, {"cpu": "1", GPU: str(gpus)}, owner_job=job, uid=uid)
    tracker.pod_changed(tracker.cache.upsert_pod(pod, (("Job", "default", job), None)))


class Cluster:
    """The tracker plus the API server's part: admitted jobs run (their pods bind where the
    placement put them) and finish on request."""

    def __init__(self, queues: list[dict[str, Any]], *nodes: Any, **cycle_kw: Any) -> None:
        self.tracker, self.cycle = make(queues, *nodes, **cycle_kw)
        self.gpus: dict[str, int] = {}
        self.created: dict[str, int] = {}
        self.extra: dict[str, dict[str, Any]] = {}
        self.pods: dict[str, list[str]] = {}
        # Where the "scheduler" binds a job's pods, when not where kube-queue's placement said
        # (the real scheduler scores nodes its own way), and jobs whose pods never start.
        self.bind_to: dict[str, str] = {}
        self.stuck: set[str] = set()
        # Annotations a job keeps across admissions (what kube-queue wrote when it stopped it).
        self.kept: dict[str, dict[str, str]] = {}
        self.objects: dict[str, dict[str, Any]] = {}

    def submit(self, name: str, ns: str, gpus: int, second: int, **kw: Any) -> None:
        self.gpus[name] = gpus
        self.created[name] = second
        self.extra[name] = kw
        self.tracker.observe(JOB, gpu_job(name, ns, gpus, second, **kw))

    def cycle_admits(self) -> list[str]:
        result = self.cycle.run()
        self.last: CycleResult = result
        names = []
        for a in result.admitted:
            _, ns, name = a.job.key
            obj = gpu_job(
                name, ns, self.gpus[name], self.created.get(name, 0), **self.extra.get(name, {})
            )
            obj["spec"]["suspend"] = False
            # Its own annotations (kube-queue.io/preemptible among them), what kube-queue wrote
            # when it stopped it, and what the admission write changes.
            own = {**obj["metadata"]["annotations"], **self.kept.get(name, {})}
            obj["metadata"]["annotations"] = admitted_annotations(own, a.job.admission_annotations)
            self.objects[name] = obj
            self.tracker.admission_succeeded(a.job.key, JOB, obj)
            uids = []
            for placed in a.assignments:
                for i in range(placed.count):
                    pod = b.pod(
                        f"{name}-{i}",
                        self.bind_to.get(name, placed.node),
                        {"cpu": "1", GPU: str(self.gpus[name])},
                        namespace=ns,
                        owner_job=name,
                        phase="Pending" if name in self.stuck else "Running",
                    )
                    key = (("Job", ns, name), None)
                    self.tracker.pod_changed(self.tracker.cache.upsert_pod(pod, key))
                    uids.append(pod.metadata.uid)
            self.pods[name] = uids
            names.append(name)
        return names

    def finish(self, name: str) -> None:
        obj = self.objects.pop(name)
        obj["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
        for uid in self.pods.pop(name):
            self.tracker.pod_changed(self.tracker.cache.delete_pod(uid))
        self.tracker.observe(JOB, obj)

    def preempted(self) -> list[str]:
        """Apply the last cycle's preemptions as the API server would (victims suspended, with
        our annotation); their pods are still there until ``pods_leave``."""
        names = []
        for plan in self.last.preemptions:
            by = "/".join(plan.job.key)
            for victim in plan.victims:
                name = victim.key[2]
                obj = self.objects[name]
                obj["spec"]["suspend"] = True
                annotations = dict(obj["metadata"]["annotations"])
                annotations.pop(ADMITTED_AT, None)
                annotations[PREEMPTED_BY] = by
                obj["metadata"]["annotations"] = annotations
                self.kept[name] = annotations  # the admission that lets it run again drops it
                self.tracker.observe(JOB, obj)
                names.append(name)
        return sorted(names)

    def requeued(self, now: str) -> list[str]:
        """Apply the last cycle's requeues as the API server would."""
        from kubequeue.labels import GAVE_UP, REQUEUED_AT, REQUEUES

        names = []
        for requeue in self.last.requeues:
            name = requeue.job.key[2]
            obj = self.objects[name]
            obj["spec"]["suspend"] = True
            annotations = dict(obj["metadata"]["annotations"])
            annotations.pop(ADMITTED_AT, None)
            annotations[REQUEUES] = str(requeue.attempt)
            annotations[REQUEUED_AT] = now
            if requeue.gave_up:
                from kubequeue.kinds.common import spec_hash

                annotations[GAVE_UP] = spec_hash(obj)
            obj["metadata"]["annotations"] = annotations
            self.kept[name] = {k: v for k, v in annotations.items() if k != ADMITTED_AT}
            self.tracker.observe(JOB, obj)
            names.append(name)
        return sorted(names)

    def pods_leave(self, name: str) -> None:
        """The Job controller deletes a suspended job's pods."""
        for uid in self.pods.pop(name, []):
            self.tracker.pod_changed(self.tracker.cache.delete_pod(uid))
        self.objects.pop(name, None)


__all__ = [
    "JOB",
    "TWO_TEAMS",
    "Cluster",
    "PreemptionPolicy",
    "admitted_annotations",
    "gpu_job",
    "make",
    "queue",
    "two_teams",
]
