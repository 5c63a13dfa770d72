"""Which node each gated pod of an admitted job is pinned to: one its job's plan held room on.

kube-queue admits a job when a per-node simulation finds room for all of its pods, and holds
that room on concrete nodes until the pods are bound (capacity/reservations.py). Left alone,
the scheduler binds them by its own scoring, often elsewhere: the room held for one job is then
taken by another's pods and somebody's pod waits (the scale soak saw 3,056 of ~5,500 pods bound
off-plan). Pinning makes the plan binding. The webhook creates the pods of queued kinds with the
scheduling gate ``kube-queue.io/placement`` (webhook/mutations.py), so the scheduler leaves them
alone; kube-queue picks for each one a node its job holds room on for a pod of that request,
adds ``kubernetes.io/hostname: <that node's hostname label>`` to its nodeSelector and removes
the gate in one write (admission/pinner.py). The scheduler can then bind it there only.

A held slot is used once: pods pinned to a node and not bound yet count against the job's holds
of their pod set there (``_unbound``, re-derived from the pods' own nodeSelectors after a
restart). When a pinned pod binds, the reservation shrinks (Reservations._drop keeps the holds
pinned pods count on), so holds and pinned pods stay consistent without a second book.

Outcomes, most to least planned:

- ``planned``: a held slot of its job, on the node the plan chose (or relocated it to);
- ``replanned``: no held slot left (a replacement pod, more pods than the plan had, or holds
  already taken by other pinned pods): a node with free room for it now, as the plan would have
  found it, in its pod set's topology domain if it is held in one and that has room;
- ``unpinned``: nothing fits now, the pod is of no job kube-queue admitted (or of none it
  queues), it already names its node, or the node has no hostname label: the gate is removed
  without a pin and the pod is the scheduler's, as without pinning. A gated pod is never kept
  waiting for room: the requeue of jobs that never start covers a pod that then stays Pending.

Pure and synchronous; the pinner calls ``take`` and ``choose`` and does the writes.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from kubequeue.capacity.cache import CapacityCache
from kubequeue.capacity.fit import place
from kubequeue.capacity.reservations import UNPLACED, Reservations
from kubequeue.demand import DemandError, PodSet, pod_request
from kubequeue.identity import JobKey, PodOwner
from kubequeue.labels import HOSTNAME, PLACEMENT_GATE
from kubequeue.objects import Pod
from kubequeue.resources import Resources
from kubequeue.scheduling import ConstraintError, NodeConstraints, constraints_of

__all__ = ["GatedPod", "Pin", "Pins"]

# How long a slot pinned at creation is kept for a pod not seen yet (its create may have failed
# after the webhook answered: another webhook refused it, a quota, a timeout).
_PROVISIONAL_S = 30.0
_ENDED = frozenset({"Succeeded", "Failed"})

_Extra = tuple[str, Resources]  # a replanned pod's node and the room reserved there for it


@dataclass(frozen=True, slots=True)
class GatedPod:
    """A pod waiting behind kube-queue's gate, as much of it as pinning needs."""

    uid: str
    namespace: str
    name: str
    owner: PodOwner | None
    request: Resources
    constraints: NodeConstraints
    gates: tuple[str, ...]  # every gate it has, ours included, in order
    host: str | None  # the kubernetes.io/hostname its nodeSelector already names
    has_selector: bool  # its nodeSelector has any key (an add then goes into that map)
    has_labels: bool  # likewise its labels


@dataclass(frozen=True, slots=True)
class Pin:
    """What to write for one gated pod: ``host`` None means remove the gate without a pin."""

    pod: GatedPod
    outcome: str  # planned | replanned | unpinned
    node: str | None
    host: str | None
    why: str


class Pins:
    def __init__(
        self,
        cache: CapacityCache,
        reservations: Reservations,
        resolve: Callable[[PodOwner], tuple[JobKey, str | None]],
        admitted: Callable[[JobKey], bool],
    ) -> None:
        self._cache = cache
        self._reservations = reservations
        reservations.pinned = self.pinned_on
        self._resolve = resolve  # a pod's raw owner -> its job and pod set (aliases followed)
        self._admitted = admitted  # the job is admitted by kube-queue (or its write in flight)
        # Gated by us, waiting for the pinner (a dict: first come, first pinned).
        self.waiting: dict[str, GatedPod] = {}
        # Ungated, pinned by nodeSelector and not bound yet: uid -> (job, host, pod set), and
        # per job the count per (host, pod set).
        self._unbound: dict[str, tuple[JobKey, str, str]] = {}
        self._per_job: dict[JobKey, Counter[tuple[str, str]]] = {}
        # Replanned pods, pinned and not bound yet: the room reserved for each in the cache.
        self._extra: dict[str, _Extra] = {}
        # Chosen, their write in flight: uid -> the newest gated view of the pod seen meanwhile
        # (the scheduler marks a gated pod SchedulingGated: an event that still shows the gate
        # must neither free the slot just chosen nor queue the pod again), sent back to waiting
        # if the write fails because the pod changed.
        self._writing: dict[str, GatedPod | None] = {}
        # Pinned at creation by the leader's webhook (``pin_at_creation``): the pod has no uid
        # or name yet, so its slot is counted per (job, host, pod set), with a deadline, until
        # the pod is seen (unbound or bound) and takes the count over, or the deadline passes
        # (its create failed after the webhook answered).
        self._provisional: dict[tuple[JobKey, str, str], list[float]] = {}
        # Left the unbound watch, their bound event not seen yet (the two watches are not
        # ordered between them): still counted, their slot (or reserved room) taken, until the
        # bound event or, for a pod deleted unbound, a deadline.
        self._leaving: dict[str, tuple[tuple[JobKey, str, str] | None, _Extra | None, float]] = {}
        # The earliest deadline of either (a burst creates thousands of pods before the
        # watches show them: ``_expire`` must not walk them all for each new pod).
        self._next_expiry = math.inf
        self.clock: Callable[[], float] = time.monotonic

    # ----------------------------------------------------------------- pod events
    def upsert(self, pod: Pod, owner: PodOwner | None) -> bool:
        """An unbound pod, as its watch has it. True when it now waits for the pinner."""
        uid = pod.metadata.uid
        spec = pod.spec
        gates = tuple(g.name for g in spec.schedulingGates)
        host = spec.nodeSelector.get(HOSTNAME)
        if PLACEMENT_GATE in gates:
            if uid not in self._writing:
                self._uncount(uid)
            try:
                request = pod_request(spec, f"pod {pod.metadata.namespace}/{pod.metadata.name}")
                constraints = constraints_of(spec)
            except (DemandError, ConstraintError):
                request, constraints = {}, NodeConstraints()  # unpinned (host None below)
                owner = None
            gated = GatedPod(
                uid=uid,
                namespace=pod.metadata.namespace,
                name=pod.metadata.name,
                owner=owner,
                request=request,
                constraints=constraints,
                gates=gates,
                host=host,
                has_selector=bool(spec.nodeSelector),
                has_labels=bool(pod.metadata.labels),
            )
            if uid in self._writing:
                self._writing[uid] = gated
                return False
            self.waiting[uid] = gated
            return True
        self.waiting.pop(uid, None)
        self._writing.pop(uid, None)  # ungated: the write applied (or someone else's did)
        slot = self._slot_of(pod, owner) if host is not None and not gates else None
        if host is not None and slot is not None:
            self._count(uid, slot[0], host, slot[1])
        return False

    def delete(self, uid: str) -> None:
        """The pod left the unbound watch: bound, or gone. Its slot (or reserved room) stays
        taken until the bound watch shows it bound (``bound``): released here, the slot would
        look free while the cache does not count the pod yet, and another pod could be pinned
        into it. A pod deleted unbound gives it back after ``_PROVISIONAL_S``."""
        self.waiting.pop(uid, None)
        self._writing.pop(uid, None)
        slot = self._unbound.pop(uid, None)
        extra = self._extra.pop(uid, None)
        if slot is None and extra is None:
            return
        if self._cache.is_bound(uid):  # its bound event came first: the cache counts it
            self._release(slot, extra)
            return
        deadline = self.clock() + _PROVISIONAL_S
        self._leaving[uid] = (slot, extra, deadline)
        self._next_expiry = min(self._next_expiry, deadline)

    def _release(self, slot: tuple[JobKey, str, str] | None, extra: _Extra | None) -> None:
        if slot is not None:
            self._decrement(*slot)
        if extra is not None:
            self._cache.unreserve(extra[0], extra[1], 1)

    def written(self, uid: str) -> None:
        """The chosen write applied. The pod stays "being written" until the watch shows it
        ungated: events older than the write (the scheduler's SchedulingGated status) may still
        arrive after the answer, and must not free its slot or queue it again."""
        if uid in self._writing:
            self._writing[uid] = None

    def failed(self, uid: str, *, retry: bool) -> bool:
        """The chosen write did not apply: its slot is free again. With ``retry`` (the pod
        changed meanwhile), its newest gated view waits again; True if it does."""
        latest = self._writing.pop(uid, None)
        self._uncount(uid)
        if retry and latest is not None:
            self.waiting[uid] = latest
            return True
        return False

    def take(self) -> list[GatedPod]:
        out = list(self.waiting.values())
        self.waiting.clear()
        return out

    # ----------------------------------------------------------------- the choice
    def choose(self, pod: GatedPod) -> Pin:
        """Where this pod goes; counted at once (the next pod's choice sees it taken). The
        caller writes it and reports ``written`` or ``failed``."""
        self._expire()
        self._writing[pod.uid] = None
        return self._choose(pod)

    def choose_unpinned(self, pod: GatedPod, why: str) -> Pin:
        """Ungate it without a pin (pinning off, or the pin was refused)."""
        self._writing[pod.uid] = None
        return self._unpinned(pod, why)

    def _choose(self, pod: GatedPod) -> Pin:
        if pod.host is not None:
            return self._unpinned(pod, "its nodeSelector names its node already")
        if pod.owner is None:
            return self._unpinned(pod, "not a pod of a job kind kube-queue queues")
        job, pod_set = self._resolve(pod.owner)
        if not self._admitted(job):
            return self._unpinned(pod, f"{job[0]} {job[1]}/{job[2]} is not admitted by kube-queue")
        name = self._which_set(job, pod_set, pod.request)
        node = self._held_slot(job, name) if name is not None else None
        outcome, why = "planned", "room held for its job"
        if node is None:
            found = None
            beside = self._in_domain(pod, job, name)
            if beside is not None:
                found = place([PodSet("pin", 1, pod.request, beside)], self._cache)
            if not found:
                found = place([PodSet("pin", 1, pod.request, pod.constraints)], self._cache)
            if not found:
                return self._unpinned(pod, "no node has room for it now; the scheduler decides")
            node = found[0].node
            outcome, why = "replanned", "no held room of its job left; a node with room now"
        host = self._cache.hostname(node)
        if not host:
            return self._unpinned(pod, f"node {node} has no {HOSTNAME} label to pin to")
        if outcome == "planned" and name is not None:
            self._count(pod.uid, job, host, name)
        elif outcome == "replanned":
            # Room its job's plan did not hold: held here until the pod binds (or goes), or the
            # next pod would be replanned into the same room.
            self._cache.reserve(node, pod.request, 1)
            self._extra[pod.uid] = (node, pod.request)
        return Pin(pod, outcome, node, host, why)

    def _in_domain(self, pod: GatedPod, job: JobKey, name: str | None) -> NodeConstraints | None:
        """The pod's constraints plus the topology domain its pod set is held in (the
        reservation's pod set carries it as node selector terms: capacity/topology.py
        ``within_recorded``), so a replacement pod of a running gang is replanned beside its
        siblings first; None when its pod set names nothing more than the pod does."""
        held = self._reservations.pod_sets(job).get(name) if name is not None else None
        if held is None:
            return None
        own = dict(pod.constraints.node_selector)
        extra = {k: v for k, v in held.constraints.node_selector if k not in own}
        if not extra:
            return None
        own.update(extra)
        c = pod.constraints
        return NodeConstraints(tuple(sorted(own.items())), c.terms, c.tolerations)

    def _slot_of(self, pod: Pod, owner: PodOwner | None) -> tuple[JobKey, str] | None:
        """The job and the pod set of its plan a pod counts against (None: no job's, or its
        pod set is not the plan's)."""
        if owner is None:
            return None
        try:
            request = pod_request(pod.spec)
        except DemandError:
            return None
        job, pod_set = self._resolve(owner)
        name = self._which_set(job, pod_set, request)
        return (job, name) if name is not None else None

    def _which_set(self, job: JobKey, pod_set: str | None, request: Resources) -> str | None:
        """The pod set of the job's plan a pod belongs to: the one its labels name, the only
        one, or the one whose pods request what it requests (a pod's request may differ from
        its template's, e.g. after a LimitRange filled in defaults: then the label or the
        single set decides)."""
        sets = self._reservations.pod_sets(job)
        if pod_set is not None and pod_set in sets:
            return pod_set
        if len(sets) == 1:
            return next(iter(sets))
        for name, ps in sets.items():
            if ps.request == request:
                return name
        return None

    def _held_slot(self, job: JobKey, name: str) -> str | None:
        """A node holding room for a pod of this pod set that no pinned pod has taken."""
        used = self._per_job.get(job) or Counter()
        held = [a for a in self._reservations.assignments(job) if a.pod_set == name]
        for a in sorted(held, key=lambda a: a.node):
            if a.node != UNPLACED and a.count - used[(self._cache.hostname(a.node), name)] > 0:
                return a.node
        return None

    def _unpinned(self, pod: GatedPod, why: str) -> Pin:
        return Pin(pod, "unpinned", None, None, why)

    def _count(self, uid: str, job: JobKey, host: str, key: str) -> None:
        if uid in self._extra or self._unbound.get(uid) == (job, host, key):
            return  # counted already (a replanned pod keeps its own room, not a slot)
        self._uncount(uid)
        if self._cache.is_bound(uid):
            # An event older than the bind (the two watches are not ordered between them):
            # bound() has settled this pod's slot pinned at creation already, and a provisional
            # one left for (job, host) is a sibling's, not to be taken.
            return
        taken_over = self._take_provisional(job, host, key)
        self._unbound[uid] = (job, host, key)
        if not taken_over:
            self._per_job.setdefault(job, Counter())[(host, key)] += 1

    # ----------------------------------------------------------------- pinned at creation
    def pin_at_creation(self, pod: Pod, owner: PodOwner | None) -> str | None:
        """For the leader's webhook: the hostname to pin a new pod to right away (no gate, no
        PATCH), when its job holds a slot for it; None: gate it as usual."""
        self._expire()
        if pod.spec.nodeName or HOSTNAME in pod.spec.nodeSelector:
            return None
        slot = self._slot_of(pod, owner)
        if slot is None or not self._admitted(slot[0]):
            return None
        job, name = slot
        node = self._held_slot(job, name)
        host = self._cache.hostname(node) if node is not None else ""
        if not host:
            return None
        deadline = self.clock() + _PROVISIONAL_S
        self._provisional.setdefault((job, host, name), []).append(deadline)
        self._next_expiry = min(self._next_expiry, deadline)
        self._per_job.setdefault(job, Counter())[(host, name)] += 1
        return host

    def bound(self, pod: Pod, owner: PodOwner | None) -> None:
        """A pod is bound (the bound watch): it counts as pinned-and-unbound no more, and a pod
        pinned at creation that was never seen unbound takes its provisional count with it."""
        uid = pod.metadata.uid
        if uid in self._unbound or uid in self._extra or uid in self._leaving:
            self._uncount(uid)
            return
        if self._cache.is_bound(uid) or pod.status.phase in _ENDED:
            # Not its bind: a later event of a pod the cache counts already (the caller calls
            # this before the cache), or of one that ended. Only the bind settles its slot; a
            # provisional one left for (job, host) is a sibling's. (A pod first seen ended
            # leaves its own to expire: held a little long, never over-committed.)
            return
        self.waiting.pop(uid, None)
        self._writing.pop(uid, None)
        host = pod.spec.nodeSelector.get(HOSTNAME)
        if host is None or not self._provisional:
            return
        slot = self._slot_of(pod, owner)
        if slot is not None and self._take_provisional(slot[0], host, slot[1]):
            self._decrement(slot[0], host, slot[1])

    def _take_provisional(self, job: JobKey, host: str, key: str) -> bool:
        deadlines = self._provisional.get((job, host, key))
        if not deadlines:
            return False
        deadlines.pop(0)
        if not deadlines:
            del self._provisional[(job, host, key)]
        return True

    def _expire(self) -> None:
        now = self.clock()
        if now <= self._next_expiry:
            return
        for uid, (slot, extra, deadline) in list(self._leaving.items()):
            if deadline < now:
                del self._leaving[uid]
                self._release(slot, extra)
        for key, deadlines in list(self._provisional.items()):
            while deadlines and deadlines[0] < now:
                deadlines.pop(0)
                self._decrement(*key)
            if not deadlines:
                del self._provisional[key]
        self._next_expiry = min(
            [d for _, _, d in self._leaving.values()]
            + [deadlines[0] for deadlines in self._provisional.values()],
            default=math.inf,
        )

    def _decrement(self, job: JobKey, host: str, key: str) -> None:
        counts = self._per_job.get(job)
        if counts is None:
            return
        counts[(host, key)] -= 1
        if counts[(host, key)] <= 0:
            del counts[(host, key)]
            if not counts:
                del self._per_job[job]

    def _uncount(self, uid: str) -> None:
        leaving = self._leaving.pop(uid, None)
        if leaving is not None:
            self._release(leaving[0], leaving[1])
        self._release(self._unbound.pop(uid, None), self._extra.pop(uid, None))

    def pinned_on(self, job: JobKey, pod_set: str) -> dict[str, int]:
        """Pods of this pod set pinned and not bound yet, per node hostname."""
        counts = self._per_job.get(job)
        if not counts:
            return {}
        return {host: n for (host, name), n in counts.items() if name == pod_set}
