"""The Queue objects as a validated forest, and which queue a job belongs to.

Validation is per tree and local: a queue whose spec is invalid, whose parent is missing, whose
parent chain loops, or whose children's guarantees add up to more than its own, is *unusable*,
and so is everything below it (their limits are defined through it); every other queue keeps
working. Jobs that land in an unusable queue wait with the reason, never in another queue.

Guarantees (``min``) pool per tree: the *effective min* of a queue is its own ``min`` for a
resource it names there, else the sum of its children's effective mins; the pool a tree can lend
is its root's effective min (see docs/queues.md for the borrowing rules built on it). Those rules
bind a queue only in the resources it or an ancestor names (``QueueNode.named``): a sibling's
``min`` makes a resource part of the pool, not a limit on queues that never named it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kubequeue.labels import QUEUE_LABEL
from kubequeue.quantity import format_milli
from kubequeue.queueing.spec import BEST_EFFORT_FIFO, STRICT_FIFO, QueueSpec
from kubequeue.resources import Resources

__all__ = ["DEFAULT_QUEUE", "Assignment", "QueueNode", "QueueTree"]

# Where jobs go that name no queue and match no selector: a Queue of this name if one exists,
# else an implicit queue without limits (kube-queue's behaviour before queues existed).
DEFAULT_QUEUE = "default"


@dataclass(slots=True)
class QueueNode:
    spec: QueueSpec
    children: list[str] = field(default_factory=list)
    path: tuple[str, ...] = ()  # root .. this queue
    problem: str | None = None  # this queue's own problem
    unusable: str | None = None  # the first problem on its path (its own or an ancestor's)
    emin: Resources = field(default_factory=dict)  # effective min
    leaves: tuple[str, ...] = ()  # the leaf queues at or below this one
    # Resources this queue or an ancestor names in min or max: only those limit its jobs, count
    # as borrowed and weigh in its share (a sibling's or child's min does not name them here).
    named: frozenset[str] = frozenset()
    # Part of its spec that has no effect (the queue works otherwise): said on its Ready
    # condition and in one Warning Event, so a selector that catches nothing is not a mystery.
    ignored: str | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def root(self) -> str:
        return self.path[0] if self.path else self.spec.name

    @property
    def leaf(self) -> bool:
        return not self.children


@dataclass(frozen=True, slots=True)
class Assignment:
    """Where a job waits: ``queue`` ("" for the implicit default queue), or why it cannot."""

    queue: str
    problem: str | None = None
    reason: str = ""  # UnknownQueue | InvalidQueue when ``problem`` is set


class QueueTree:
    def __init__(self, specs: Iterable[QueueSpec] = ()) -> None:
        self.nodes: dict[str, QueueNode] = {}
        for spec in sorted(specs, key=lambda s: s.name):
            if spec.name and spec.name not in self.nodes:
                self.nodes[spec.name] = QueueNode(spec, problem=spec.problem)
        self._link()
        self._name_resources()
        self._effective_mins()
        self._check_guarantees()
        for node in self.nodes.values():
            node.leaves = (
                tuple(sorted(self._leaves_under(node.name))) if node.children else (node.name,)
            )
        for node in self.nodes.values():
            node.unusable = next(
                (
                    f"queue {name}: {self.nodes[name].problem}" if name != node.name else p
                    for name in node.path
                    if (p := self.nodes[name].problem) is not None
                ),
                None,
            )
        # The longest path in the forest: fair-share tuples are padded to it.
        self.depth = max((len(node.path) for node in self.nodes.values()), default=0)
        # Pooled resources per root: those some queue of the tree guarantees.
        self.pools: dict[str, Resources] = {}
        for node in self.nodes.values():
            pool = self.pools.setdefault(node.root, {})
            for res in node.spec.guaranteed:
                pool[res] = 0
        for root, pool in self.pools.items():
            for res in pool:
                pool[res] = self.nodes[root].emin.get(res, 0)
        # Leaves that select namespaces, in name order ("the first Queue that matches").
        self._selecting = [n for n in self.nodes.values() if n.leaf and n.spec.selector is not None]
        for node in self.nodes.values():
            if not node.leaf and node.spec.selector is not None:
                node.ignored = (
                    "its namespaceSelector is ignored: a queue with children holds no jobs "
                    "(put the selector on one of its leaf queues)"
                )

    def __len__(self) -> int:
        return len(self.nodes)

    def __bool__(self) -> bool:
        return bool(self.nodes)

    # ----------------------------------------------------------------- building
    def _link(self) -> None:
        nodes = self.nodes
        for node in nodes.values():
            parent = node.spec.parent
            if parent is None:
                continue
            if parent not in nodes:
                node.problem = node.problem or f"parent queue {parent} does not exist"
            else:
                nodes[parent].children.append(node.name)
        for node in nodes.values():
            chain = [node.name]
            seen = {node.name}
            parent = node.spec.parent
            while parent is not None and parent in nodes:
                if parent in seen:
                    loop = " -> ".join([*chain[chain.index(parent) :], parent])
                    node.problem = node.problem or f"the parent chain loops ({loop})"
                    chain = [node.name]  # a queue in a loop is a root of nothing
                    break
                seen.add(parent)
                chain.append(parent)
                parent = nodes[parent].spec.parent
            node.path = tuple(reversed(chain))

    def _name_resources(self) -> None:
        """A limit set on a queue governs everything below it, so the resources that govern a
        queue are those named along its path, never those named only beside or below it."""
        for node in self.nodes.values():
            node.named = frozenset(
                res
                for name in node.path
                for limits in (self.nodes[name].spec.guaranteed, self.nodes[name].spec.ceiling)
                for res in limits
            )

    def _effective_mins(self) -> None:
        done: dict[str, Resources] = {}

        def emin(name: str, depth: int = 0) -> Resources:
            if name in done:
                return done[name]
            node = self.nodes[name]
            done[name] = {}  # guards loops (those queues are invalid anyway)
            total: Resources = {}
            if depth < 64:
                for child in node.children:
                    for res, amount in emin(child, depth + 1).items():
                        total[res] = total.get(res, 0) + amount
            total.update(node.spec.guaranteed)
            done[name] = node.emin = total
            return total

        for name in self.nodes:
            emin(name)

    def _check_guarantees(self) -> None:
        """Children's guarantees must fit in the parent's: within its min where it names one,
        and under its max (else a guarantee below could be refused by the ceiling above)."""
        for node in self.nodes.values():
            if not node.children:
                continue
            for bound, limits in (("min", node.spec.guaranteed), ("max", node.spec.ceiling)):
                for res, amount in sorted(limits.items()):
                    given = sum(self.nodes[c].emin.get(res, 0) for c in node.children)
                    if given > amount:
                        node.problem = node.problem or (
                            f"its children's guarantees (effective min) in {res} add up to "
                            f"{format_milli(res, given)}, "
                            f"more than its own {bound} ({format_milli(res, amount)})"
                        )

    # ----------------------------------------------------------------- questions
    def strategy(self, queue: str, default: str = BEST_EFFORT_FIFO) -> str:
        node = self.nodes.get(queue)
        return node.spec.strategy if node is not None else default

    def strict(self, queue: str, default: bool) -> bool:
        node = self.nodes.get(queue)
        return default if node is None else node.spec.strategy == STRICT_FIFO

    def assign(
        self, job_labels: Mapping[str, str], namespace_labels: Mapping[str, str] | None
    ) -> Assignment:
        """The queue a job waits in: its queue label, else the first leaf queue (by name) whose
        namespaceSelector matches its namespace, else ``default``."""
        named = job_labels.get(QUEUE_LABEL)
        if named is not None:
            return self._named(named)
        if namespace_labels is not None:
            for node in self._selecting:
                assert node.spec.selector is not None
                if node.spec.selector.matches(namespace_labels):
                    return self._usable(node)
        return self._named(DEFAULT_QUEUE)

    def _named(self, name: str) -> Assignment:
        node = self.nodes.get(name)
        if node is None:
            if name == DEFAULT_QUEUE:
                return Assignment("")
            return Assignment(
                name,
                f"queue {name} does not exist; create it or fix the {QUEUE_LABEL} label "
                "(the job waits and moves on by itself once the queue exists)",
                "UnknownQueue",
            )
        if not node.leaf and node.unusable is None:
            # (An unusable one says why it is unusable first: in a parent chain that loops,
            # every queue is some other's parent and there is no leaf to name.)
            return Assignment(
                name,
                f"queue {name} is a parent queue and holds no jobs; name one of its leaf "
                f"queues ({', '.join(sorted(self._leaves_under(name))[:5])})",
                "UnknownQueue",
            )
        return self._usable(node)

    def _usable(self, node: QueueNode) -> Assignment:
        if node.unusable is not None:
            return Assignment(
                node.name,
                f"queue {node.name} cannot be used until its spec is fixed: {node.unusable}",
                "InvalidQueue",
            )
        return Assignment(node.name)

    def _leaves_under(self, name: str) -> list[str]:
        out: list[str] = []
        stack = [name]
        seen = {name}
        while stack:
            node = self.nodes[stack.pop()]
            if node.leaf and node.name != name:
                out.append(node.name)
            for child in node.children:
                if child not in seen:  # a parent chain that loops must not loop here
                    seen.add(child)
                    stack.append(child)
        return out
