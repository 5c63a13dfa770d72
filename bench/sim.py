"""Plays the API server, the job controller, the scheduler and the kubelet around the core.

Everything the core receives is a raw watch line fed to a real informer; the only shortcut is the
admission write: where the admission loop would PATCH ``suspend: false`` and get the object back,
the simulator hands the tracker the patched object directly (``admission_succeeded``, as
``AdmissionLoop._admit`` does with the response), then echoes it on the Job watch, then binds the
job's pods where the reservation put them (ADDED pod lines), as the scheduler would.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from bench.harness import Harness
from bench.state import Cluster, PodRec, Workload, event, priority_class_lines
from kubequeue.admission.cycle import CycleResult
from kubequeue.identity import JobKey

__all__ = ["Simulator"]


class Simulator:
    def __init__(self, cluster: Cluster, harness: Harness, seed: int = 1) -> None:
        self.cluster = cluster
        self.h = harness
        self.rng = random.Random(seed)
        self.running: list[Workload] = []
        self.queued: dict[JobKey, Workload] = {}
        self.admitted = 0
        self.finished = 0

    # ------------------------------------------------------------------ initial state
    def pod_lines(self) -> list[bytes]:
        """Generate the running workloads; their pods as ADDED lines (the initial pod sync)."""
        c = self.cluster
        lines: list[bytes] = []
        for w in c.running_workloads():
            self.running.append(w)
            lines.extend(c.pod_line(p) for p in w.pods)
        return lines

    def running_job_lines(self) -> list[bytes]:
        c = self.cluster
        return [c.job_line(w, suspend=False) for w in self.running if w.kind == "Job"]

    def queued_job_lines(self) -> list[bytes]:
        c = self.cluster
        lines: list[bytes] = []
        for w in c.queued_jobs():
            self.queued[w.key] = w
            lines.append(c.job_line(w, suspend=True))
        return lines

    def load(self) -> None:
        """The whole initial sync, untimed: nodes, pods, PriorityClasses, running and queued Jobs
        (pods before Jobs, so admitted Jobs find their pods bound and hold nothing)."""
        h = self.h
        h.feed_nodes(self.cluster.node_lines())
        h.feed_pods(self.pod_lines())
        h.feed_priority_classes(priority_class_lines())
        h.feed_jobs(self.running_job_lines())
        h.feed_jobs(self.queued_job_lines())

    # ------------------------------------------------------------------ after a cycle
    def admit(self, result: CycleResult) -> int:
        """The admission writes succeed and the scheduler binds every admitted pod where its
        reservation is. Returns the number of pods bound."""
        h, c = self.h, self.cluster
        bound = 0
        for admission in result.admitted:
            key = admission.job.key
            w = self.queued.pop(key)
            w.admitted = True
            obj = c.job_obj(w, suspend=False)
            h.tracker.admission_succeeded(key, h.adapter, obj)
            h.feed_jobs([event("MODIFIED", obj)])
            lines: list[bytes] = []
            for a in admission.assignments:
                node = c.by_name[a.node]
                for _ in range(a.count):
                    lines.append(c.pod_line(c.bind(w, node)))
            h.feed_pods(lines)
            bound += len(lines)
            self.running.append(w)
            self.admitted += 1
        return bound

    # ------------------------------------------------------------------ capacity frees
    def pick_finishing(self, pods: int) -> list[Workload]:
        """Random running workloads holding about ``pods`` pods, removed from the running set."""
        chosen: list[Workload] = []
        n = 0
        running = self.running
        while n < pods and running:
            i = self.rng.randrange(len(running))
            running[i], running[-1] = running[-1], running[i]
            w = running.pop()
            chosen.append(w)
            n += len(w.pods)
        return chosen

    def finish_lines(self, workloads: list[Workload]) -> tuple[list[bytes], list[bytes]]:
        """(Job lines, pod lines) for workloads that end. The Job's Complete status is fed first:
        a pod of an admitted Job that ends while its Job still wants it is held again (by
        design), which is not what finishing is."""
        c = self.cluster
        jobs: list[bytes] = []
        pods: list[bytes] = []
        for w in workloads:
            if w.kind == "Job":
                jobs.append(c.job_line(w, suspend=False, complete=True, type_="MODIFIED"))
            for p in w.pods:
                pods.append(c.pod_line(p, "DELETED"))
                c.unbind(p)
            w.pods = []
            self.finished += 1
        return jobs, pods

    def free_pods(self) -> Iterator[PodRec]:
        """Pods whose end frees capacity at once (not members of a kube-queue-admitted Job),
        in random order; each is removed from its workload when yielded."""
        while True:
            candidates = [w for w in self.running if not w.admitted and w.pods]
            if not candidates:
                return
            w = candidates[self.rng.randrange(len(candidates))]
            pod = w.pods.pop(self.rng.randrange(len(w.pods)))
            self.cluster.unbind(pod)
            if not w.pods:
                self.running.remove(w)
            yield pod

    def only_hopeless_left(self) -> bool:
        """Every job still queued is invalid or can never fit as the cluster is."""
        return all(j.problem or j.never_fits for j in self.h.queue.ordered())
