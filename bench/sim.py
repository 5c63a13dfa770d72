"""Plays the API server, the job controller, the scheduler and the kubelet around the core.

Everything the core receives is a raw watch line fed to a real informer; the only shortcut is the
admission write: where the admission loop would PATCH ``suspend: false`` and get the object back,
the simulator hands the tracker the patched object directly (``admission_succeeded``, as
``AdmissionLoop._admit`` does with the response), then echoes it on the Job watch, then binds the
job's pods where the reservation put them (ADDED pod lines), as the scheduler would.

With ``pin`` the pods are created the production way instead: for each pod, the AdmissionReview
the API server would send goes through the webhook's own code (``review_response`` with
``pod_gate`` and the controller's ``_pin_at_creation``, i.e. ``Pins.pin_at_creation``), decoded
and the answer encoded as the webhook does; the pod is bound on the node of the hostname it was
pinned to, and its events reach the controller as they would: ADDED on the watch of unbound pods
kube-queue placed, ADDED on the bound-pod watch (``PodHandler`` calls ``Pins.bound``), DELETED
on the unbound watch. That per-pod work, which runs on the controller's event loop, is timed
(``last_pin_s`` for the last ``admit``, ``pin_per_pod_s`` per pod); generating the lines is not.
A pod the webhook did not pin (it would be gated and pinned later by the pinner) is bound where
the reservation is and counted in ``unpinned``.
"""

from __future__ import annotations

import functools
import json
import random
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

from bench.harness import Harness
from bench.state import Cluster, NodeRec, PodRec, Workload, event, priority_class_lines
from kubequeue.admission.cycle import Admission, CycleResult
from kubequeue.identity import JobKey
from kubequeue.labels import TOPOLOGY_DOMAIN
from kubequeue.webhook.mutations import pod_gate
from kubequeue.webhook.server import review_response

__all__ = ["Simulator"]


clock = time.perf_counter


class Simulator:
    def __init__(
        self, cluster: Cluster, harness: Harness, seed: int = 1, *, pin: bool = False
    ) -> None:
        self.cluster = cluster
        self.h = harness
        self.rng = random.Random(seed)
        self.running: list[Workload] = []
        self.queued: dict[JobKey, Workload] = {}
        self.admitted = 0
        self.finished = 0
        self.pin = pin
        self.pinned = 0  # pods the webhook pinned at creation
        self.unpinned = 0  # pods it answered None for (gated in production): bound as planned
        self.off_plan = 0  # pinned pods on a node the admission did not name for its job
        self.last_pin_s = 0.0  # the pinning work of the last admit()
        self.pin_per_pod_s: list[float] = []
        self._host: str | None = None
        self._mutate = functools.partial(pod_gate, pin=self._pin_callback)

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
        self.last_pin_s = 0.0
        for admission in result.admitted:
            key = admission.job.key
            w = self.queued.pop(key)
            w.admitted = True
            # The topology domain the admission write records (the only admission annotation
            # echoed: the others would change what --trace compares with older trees).
            w.domain = admission.job.admission_annotations.get(TOPOLOGY_DOMAIN)
            obj = c.job_obj(w, suspend=False)
            h.tracker.admission_succeeded(key, h.adapter, obj)
            h.feed_jobs([event("MODIFIED", obj)])
            if self.pin:
                bound += self._create_pinned(w, admission)
            else:
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

    def _pin_callback(self, obj: dict[str, Any]) -> str | None:
        self._host = self.h.controller._pin_at_creation(obj)
        return self._host

    def _create_pinned(self, w: Workload, admission: Admission) -> int:
        """The Job controller creates the admitted job's pods (each through the webhook), the
        scheduler binds each on its pinned node. Adds the timed part to ``last_pin_s``."""
        h, c = self.h, self.cluster
        planned: Counter[str] = Counter()
        for a in admission.assignments:
            planned[a.node] += a.count
        reviews = [c.pod_review(w) for _ in range(sum(planned.values()))]
        mutate = self._mutate
        hosts: list[str | None] = []
        times: list[float] = []
        for review in reviews:
            started = clock()
            json.dumps(review_response(json.loads(review), mutate))  # the answer's body
            times.append(clock() - started)
            hosts.append(self._host)
            self._host = None
        nodes: list[NodeRec | None] = []
        for host in hosts:
            node = c.by_name.get(host) if host is not None else None  # hostname == node name
            if node is not None:
                if planned[node.name] > 0:
                    planned[node.name] -= 1
                else:
                    self.off_plan += 1
            nodes.append(node)
        left = [name for name, n in planned.items() for _ in range(n) if n > 0]
        chosen: list[tuple[NodeRec, str | None, float]] = []
        for host, node, took in zip(hosts, nodes, times, strict=True):
            if node is None:
                self.unpinned += 1
                node = c.by_name[left.pop() if left else admission.assignments[0].node]
            else:
                self.pinned += 1
            chosen.append((node, host, took))
        # The scheduler binds them in the order the plan listed their nodes, as without --pin
        # (the pins come in node-name order): the same pods bound in the same order, so the
        # decisions can be compared with a run without pinning (--trace).
        order = {a.node: i for i, a in enumerate(admission.assignments)}
        chosen.sort(key=lambda x: order.get(x[0].name, len(order)))
        pods: list[PodRec] = []
        times = []
        for node, host, took in chosen:
            pod = c.bind(w, node)
            pod.pinned = host
            pods.append(pod)
            times.append(took)
        # Only pinned pods carry the placement label the unbound watch selects on. It sees a
        # pod created (Pending, no node), then DELETED as it binds and leaves its field
        # selector (the object as it is then: bound).
        added = [event("ADDED", c.pod_obj(p, bound=False)) if p.pinned else b"" for p in pods]
        bound_lines = [c.pod_line(p) for p in pods]
        gone = [event("DELETED", c.pod_obj(p)) if p.pinned else b"" for p in pods]
        unbound = h.unbound_informer._dispatch
        for i, line in enumerate(added):  # the watch of unbound placed pods: created
            if line:
                started = clock()
                unbound(line)
                times[i] += clock() - started
        h.feed_pods(bound_lines)  # bound: PodHandler calls Pins.bound, then the cache
        for i, line in enumerate(gone):  # ... and it left the unbound watch
            if line:
                started = clock()
                unbound(line)
                times[i] += clock() - started
        self.pin_per_pod_s.extend(times)
        self.last_pin_s += sum(times)
        return len(pods)

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
