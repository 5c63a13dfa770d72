"""Quota accounting on the queue tree: what each queue uses, and whether a job's demand may be
admitted into its queue *by policy*. Physical fit is judged separately (capacity/fit.py): a job
runs only when both agree.

Rules (resource by resource, for the resources the job requests; docs/queues.md has examples):

1. Ceiling: no queue on the job's path (its queue up to the root) may go above its ``max``.
2. Guarantee and borrowing, for a resource the tree *pools* (some queue of it names the resource
   in ``min``) and the job's path names (its queue or an ancestor, in ``min`` or ``max``):
   walking up from the job's queue, the admission is covered at the first queue that stays
   within its effective min (a queue may always use up to its guarantee); if none does, the
   root's pool (the tree's total guarantee) must still have room: the job borrows what other
   queues' guarantees leave unused.
3. A job that goes above its own queue's min must leave, under every ``max`` on its path, room
   for the guarantees not yet used below that max, counted hierarchically (``_reserves``): a
   guarantee set on a parent queue is kept for its subtree as surely as a leaf's.
4. A resource no queue on the path names is not limited by the tree, even where a sibling
   guarantees it: it never counts as borrowed, nor in the queue's fair share.

A job *borrows* (recorded on it, ordered after jobs that do not, never reclaims) when some queue
on its path cannot cover it from guarantee that is neither used nor kept for the queues beside
its path: a team under a department whose guarantee is unused stays within guarantee even
though the team names no min of its own.

Usage is the admitted jobs' demand, all pods of every pod set (the same arithmetic as the fit,
``pods`` included, so a ``pods`` quota counts pods), charged to the queue a job was admitted
into and to every ancestor of it. Guarantees, borrowing and shares are measured on a second
tally that counts a job's resource only where its queue's path names it (rule 3), so an
ancestor's usage there is that of the queues its guarantee actually binds.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from kubequeue.identity import JobKey
from kubequeue.quantity import format_milli
from kubequeue.queueing.tree import QueueNode, QueueTree
from kubequeue.resources import PODS, Resources, add_into

__all__ = ["QuotaLedger", "Verdict"]


@dataclass(frozen=True, slots=True)
class Verdict:
    """The policy answer for one job: allowed (and whether it borrows), or why not."""

    allowed: bool
    borrowing: bool = False
    reason: str = ""  # with the numbers, for `kube-queue status`
    cause: str = ""  # the same without numbers: stable, for Events (which change on a new cause)


_ALLOWED = Verdict(True)


def _amount(res: str, milli: int) -> str:
    return f"{format_milli(res, milli)}"


class QuotaLedger:
    def __init__(self, tree: QueueTree | None = None) -> None:
        self.tree = tree or QueueTree()
        self._jobs: dict[JobKey, tuple[str, Resources]] = {}
        self._used: dict[str, Resources] = {}
        # The same, counting a job's resource only where its queue's path names it: the usage
        # that guarantees are measured on (rule 3: usage nobody limits borrows nothing).
        self._named_used: dict[str, Resources] = {}
        self._admitted: dict[str, int] = {}
        # Moves whenever usage in a tree changes (by root; "" for queues outside any tree): a
        # verdict for a queue stays valid while its root's version does (the cycle memoises).
        self.versions: dict[str, int] = {}
        self.epoch = 0  # moves when the tree itself is replaced
        # (root, resource) -> (usage version, epoch, per queue (reserve, children's reserves))
        self._reserve_memo: dict[tuple[str, str], tuple[int, int, dict[str, tuple[int, int]]]] = {}
        # root -> (usage version, epoch, per queue of the tree its share): see ``shares``
        self._share_memo: dict[str, tuple[int, int, dict[str, float]]] = {}

    # ----------------------------------------------------------------- bookkeeping
    def set_tree(self, tree: QueueTree) -> None:
        """New Queue objects: re-aggregate every admitted job on the new paths."""
        self.tree = tree
        self._used = {}
        self._named_used = {}
        self._admitted = {}
        self.epoch += 1
        for queue, demand in self._jobs.values():
            self._add(queue, demand, 1)

    def charge(self, job: JobKey, queue: str, demand: Mapping[str, int]) -> None:
        """Count an admitted job's demand in its queue (replacing what it counted before). Jobs
        of the implicit queue ("" while no Queue objects exist) are not counted: nothing limits
        them, and a cluster without Queues pays nothing for the ledger."""
        if not queue and not self.tree:
            self.release(job)
            return
        entry = (queue, {r: v for r, v in demand.items() if v})
        if self._jobs.get(job) == entry:
            return
        self.release(job)
        self._jobs[job] = entry
        self._add(entry[0], entry[1], 1)

    def release(self, job: JobKey) -> None:
        old = self._jobs.pop(job, None)
        if old is not None:
            self._add(old[0], old[1], -1)

    def version(self, queue: str) -> tuple[int, str, int]:
        """Changes whenever anything that decides ``check(queue, ...)`` may have changed."""
        node = self.tree.nodes.get(queue)
        root = node.root if node is not None else ""
        return self.epoch, root, self.versions.get(root, 0)

    def _add(self, queue: str, demand: Resources, sign: int) -> None:
        node = self.tree.nodes.get(queue)
        path = node.path if node is not None else (queue,)
        root = node.root if node is not None else ""
        names = node.named if node is not None else frozenset()
        named = {r: v for r, v in demand.items() if r in names}
        self.versions[root] = self.versions.get(root, 0) + 1
        for name in path:
            add_into(self._used.setdefault(name, {}), demand, sign)
            if named:
                add_into(self._named_used.setdefault(name, {}), named, sign)
        self._admitted[queue] = self._admitted.get(queue, 0) + sign

    def demand_of(self, job: JobKey) -> Resources:
        entry = self._jobs.get(job)
        return dict(entry[1]) if entry is not None else {}

    def queue_of(self, job: JobKey) -> str | None:
        entry = self._jobs.get(job)
        return entry[0] if entry is not None else None

    def used(self, queue: str) -> Resources:
        """``pods`` only where the queue's path names it: every job has pods, and a count no
        queue limits would only add a line to every Queue's status."""
        node = self.tree.nodes.get(queue)
        pods = node is not None and PODS in node.named
        return {r: v for r, v in self._used.get(queue, {}).items() if v and (pods or r != PODS)}

    def admitted(self, queue: str) -> int:
        return self._admitted.get(queue, 0)

    def borrowed(self, queue: str) -> Resources:
        """Usage above the queue's effective min, for the resources its tree pools (usage its
        path does not name borrows nothing: preemption must not reclaim it)."""
        node = self.tree.nodes.get(queue)
        if node is None:
            return {}
        used = self._named_used.get(queue, {})
        out: Resources = {}
        for res in self.tree.pools.get(node.root, {}):
            over = used.get(res, 0) - node.emin.get(res, 0)
            if over > 0:
                out[res] = over
        return out

    # ----------------------------------------------------------------- decisions
    def check(self, queue: str, demand: Mapping[str, int]) -> Verdict:
        """May ``demand`` be admitted into ``queue`` now, by policy? (See the module docstring.)"""
        node = self.tree.nodes.get(queue)
        if node is None:
            return _ALLOWED  # the implicit default queue has no limits
        refused = self._ceilings(node, demand)
        return refused if refused is not None else self._guarantees(node, demand)

    def _ceilings(self, node: QueueNode, demand: Mapping[str, int]) -> Verdict | None:
        """Rule 1, from the queue up (None: no max refuses). A job that borrows a resource must
        also leave, under every ceiling, room for the unused guarantees of the other queues
        below it: a borrower may never make a guarantee unreachable. A max names its resource
        for every queue below it, so the full usage is the one to hold it to."""
        used = self._used
        nodes = self.tree.nodes
        queue = node.name
        own = used.get(queue, {})
        for name in reversed(node.path):
            ceiling = nodes[name].spec.max
            if not ceiling:
                continue
            have = used.get(name, {})
            for res, limit in ceiling.items():
                need = demand.get(res, 0)
                if not need:
                    continue
                after = have.get(res, 0) + need
                if after > limit:
                    return Verdict(
                        False,
                        reason=(
                            f"queue {name} at max {res} ({_amount(res, have.get(res, 0))}/"
                            f"{_amount(res, limit)}, needs {_amount(res, need)} more)"
                        ),
                        cause=f"queue {name} is at its max {res}",
                    )
                if own.get(res, 0) + need > node.emin.get(res, 0):
                    kept = self._kept_under(name, res, node, need)
                    if kept and after + kept > limit:
                        return Verdict(
                            False,
                            borrowing=True,
                            reason=(
                                f"queue {name} at max {res} for borrowing "
                                f"({_amount(res, have.get(res, 0))}/{_amount(res, limit)} in use, "
                                f"{_amount(res, kept)} kept for other queues' unused min, "
                                f"needs {_amount(res, need)} more)"
                            ),
                            cause=(
                                f"queue {name} is at its max {res} for borrowing (the rest is "
                                "kept for other queues' guarantees)"
                            ),
                        )
        return None

    def _guarantees(self, node: QueueNode, demand: Mapping[str, int]) -> Verdict:
        """Rule 2: guarantees, then borrowing from the tree's pool, only in the resources the
        queue's path names (rule 3), measured on the named tally."""
        nodes = self.tree.nodes
        queue = node.name
        pool = self.tree.pools.get(node.root, {})
        named = self._named_used
        borrowing = False
        for res, total in pool.items():
            need = demand.get(res, 0)
            if not need or res not in node.named:
                continue
            if not borrowing and need > self._room(node, res):
                borrowing = True
            covered = False
            for name in reversed(node.path):
                if named.get(name, {}).get(res, 0) + need <= nodes[name].emin.get(res, 0):
                    covered = True
                    break
            if not covered:
                in_use = named.get(node.root, {}).get(res, 0)
                return Verdict(
                    False,
                    borrowing=True,
                    reason=(
                        f"{node.root} borrowing limit: {_amount(res, in_use)} of its "
                        f"{_amount(res, total)} {res} guaranteed quota in use, "
                        f"{_amount(res, need)} more needed and queue {queue} is at its min "
                        f"({_amount(res, node.emin.get(res, 0))})"
                    ),
                    cause=(
                        f"queue {queue} is at its min {res} and {node.root} has no unused "
                        "guaranteed quota to lend"
                    ),
                )
        return Verdict(True, borrowing=borrowing)

    def beyond_limits(self, queue: str, demand: Mapping[str, int]) -> str:
        """Why ``demand`` could never be admitted into ``queue``, even with the whole tree idle
        ("" if it could): it is above a max on its path, or above its tree's whole pool."""
        node = self.tree.nodes.get(queue)
        if node is None:
            return ""
        for name in reversed(node.path):
            for res, limit in self.tree.nodes[name].spec.ceiling.items():
                need = demand.get(res, 0)
                if need > limit:
                    return (
                        f"it needs {_amount(res, need)} {res}, above queue {name}'s max of "
                        f"{_amount(res, limit)}"
                    )
        for res, total in self.tree.pools.get(node.root, {}).items():
            need = demand.get(res, 0)
            if need > total and res in node.named:
                return (
                    f"it needs {_amount(res, need)} {res}, more than all the guaranteed quota of "
                    f"{node.root} ({_amount(res, total)})"
                )
        return ""

    # ----------------------------------------------------------------- guarantees kept
    def _reserves(self, root: str, res: str) -> dict[str, tuple[int, int]]:
        """Per queue of the tree: (its reserve, the sum of its children's reserves) in ``res``.

        A queue's *reserve* is the guarantee that must stay reachable below it: for a queue
        that names ``res`` in its own min, the larger of what is left of its min and what its
        children keep (their guarantees may be used unevenly: a child over its min does not
        give a sibling's guarantee away); for any other queue, what its children keep. Each
        guarantee is so counted once, at the highest queue that names it, and never twice. An
        unusable queue keeps nothing (it takes no jobs until it is fixed). Memoised on the
        tree's usage version."""
        key = (root, res)
        version = self.versions.get(root, 0)
        found = self._reserve_memo.get(key)
        if found is not None and found[0] == version and found[1] == self.epoch:
            return found[2]
        nodes = self.tree.nodes
        named = self._named_used
        out: dict[str, tuple[int, int]] = {}

        def walk(name: str, depth: int) -> int:
            node = nodes[name]
            below = 0
            if depth < 64:
                for child in node.children:
                    below += walk(child, depth + 1)
            if node.unusable is not None:
                own = 0
            elif res in node.spec.guaranteed:
                left = node.emin.get(res, 0) - named.get(name, {}).get(res, 0)
                own = max(left, below, 0)
            else:
                own = below
            out[name] = (own, below)
            return own

        if root in nodes:
            walk(root, 0)
        self._reserve_memo[key] = (version, self.epoch, out)
        return out

    def _kept_under(self, under: str, res: str, node: QueueNode, need: int) -> int:
        """Guarantee below ``under`` (its children's reserves) still to be kept for others once
        ``node`` takes ``need`` more of ``res``: the job's own path keeps only what is left of
        its guarantees after it."""
        reserves = self._reserves(node.root, res)
        nodes = self.tree.nodes
        named = self._named_used
        after = 0  # the reserve of the path queue just below, once the job is admitted
        child = ""
        for name in reversed(node.path):
            below = reserves[name][1]
            if child:
                below += after - reserves[child][0]
            if name == under:
                return below
            member = nodes[name]
            if member.unusable is not None:
                after = 0
            elif res in member.spec.guaranteed:
                used = named.get(name, {}).get(res, 0) + need
                after = max(member.emin.get(res, 0) - used, below, 0)
            else:
                after = below
            child = name
        return 0

    def _rooms_on_path(self, node: QueueNode, res: str) -> Iterator[tuple[int, int]]:
        """(depth, room) for each queue A on the path, from the queue up (depth 0: the root):
        A's effective min less A's usage and less what the queues beside the path below A
        keep (their reserves). A job taking no more than that is covered by A's guarantee."""
        reserves = self._reserves(node.root, res)
        nodes = self.tree.nodes
        named = self._named_used
        beside = 0
        child = ""
        for depth in range(len(node.path) - 1, -1, -1):
            name = node.path[depth]
            if child:
                beside += reserves[name][1] - reserves[child][0]
            yield depth, nodes[name].emin.get(res, 0) - named.get(name, {}).get(res, 0) - beside
            child = name

    def _room(self, node: QueueNode, res: str) -> int:
        """The most of ``res`` a job of ``node`` can take within guarantee (the best room on
        its path); above it the job borrows. (``_rooms_on_path``'s rooms, in one loop: the walk
        of several queues asks this of every line after each admission.)"""
        reserves = self._reserves(node.root, res)
        nodes = self.tree.nodes
        named = self._named_used
        path = node.path
        best: int | None = None
        beside = 0
        child = ""
        for depth in range(len(path) - 1, -1, -1):
            name = path[depth]
            if child:
                beside += reserves[name][1] - reserves[child][0]
            used = named.get(name)
            room = nodes[name].emin.get(res, 0) - (used.get(res, 0) if used else 0) - beside
            if best is None or room > best:
                best = room
            child = name
        return 0 if best is None else best

    def within_levels(self, queue: str, demand: Mapping[str, int]) -> dict[str, int] | None:
        """For a job that stays within guarantee: per pooled resource it asks for, the depth
        (0: the root) of the lowest queue on its path whose guarantee covers it. A reclaim may
        take back only what was borrowed from above that queue. None when the job borrows."""
        node = self.tree.nodes.get(queue)
        if node is None:
            return {}
        out: dict[str, int] = {}
        for res in self.tree.pools.get(node.root, ()):
            need = demand.get(res, 0)
            if not need or res not in node.named:
                continue
            level = next((d for d, room in self._rooms_on_path(node, res) if need <= room), None)
            if level is None:
                return None
            out[res] = level
        return out

    def lender(self, victim_queue: str, queue: str, levels: Mapping[str, int]) -> str | None:
        """The queue whose borrowing a reclaim by a job of ``queue`` may take back from a job
        of ``victim_queue``: the child, on the victim's side, of the two queues' lowest common
        ancestor, if that subtree is above its min in a resource the job needs and the common
        ancestor is above the queue whose guarantee covers the job (below it, the job's
        guarantee is not what the victim's subtree used). ``levels``: the job's
        ``within_levels``. None: not reclaimable for this job."""
        nodes = self.tree.nodes
        mine = nodes.get(queue)
        theirs = nodes.get(victim_queue)
        if mine is None or theirs is None or mine.root != theirs.root or queue == victim_queue:
            return None
        if not levels:
            return None
        common = 0
        while (
            common + 1 < len(mine.path)
            and common + 1 < len(theirs.path)
            and mine.path[common + 1] == theirs.path[common + 1]
        ):
            common += 1
        if common + 1 >= len(theirs.path):
            return None  # the victim's queue is an ancestor of the job's (cannot hold jobs)
        side = theirs.path[common + 1]
        borrowed = self.borrowed(side)
        for res, level in levels.items():
            if common < level and borrowed.get(res, 0) > 0:
                return side
        return None

    def needs_to_borrow(self, queue: str, demand: Mapping[str, int]) -> bool:
        """Would admitting ``demand`` into ``queue`` take guarantee that is not its path's to
        take, in some pooled resource its path names (``_room``)? Jobs that do not go first."""
        node = self.tree.nodes.get(queue)
        if node is None:
            return False
        for res in self.tree.pools.get(node.root, ()):
            need = demand.get(res, 0)
            if need and res in node.named and need > self._room(node, res):
                return True
        return False

    def guarantee_room(self, queue: str) -> tuple[tuple[str, int], ...]:
        """(resource, ``_room``) for each resource its tree pools and its path names: a demand
        above that in any of them borrows (``needs_to_borrow``, precomputed for the many jobs
        of one queue)."""
        node = self.tree.nodes.get(queue)
        if node is None:
            return ()
        return tuple(
            (res, self._room(node, res))
            for res in self.tree.pools.get(node.root, ())
            if res in node.named
        )

    def shares(self, queue: str) -> tuple[float, ...]:
        """Weighted dominant shares along the queue's path, root first (hierarchical DRF):
        share(A) = max over pooled resources of (A's usage above its effective min) / (the
        tree's pool of that resource), divided by A's weight (a pool of 0 lends nothing and
        counts 0). Comparing these tuples picks the tree whose root is least above its whole
        guarantee first (separate trees lend nothing to each other, so that is the only fair
        measure between them; within guarantees it is 0), then the child of the root with the
        smallest share, and so on. Usage is the named tally: what no limit on a queue's path
        covers is nobody's borrowing.
        """
        node = self.tree.nodes.get(queue)
        if node is None:
            return ()
        root = node.root
        # Each queue's share depends only on its tree's usage: computed once per usage version
        # for all the lines below it (the walk asks every line after each admission).
        version = self.versions.get(root, 0)
        memo = self._share_memo.get(root)
        if memo is None or memo[0] != version or memo[1] != self.epoch:
            memo = self._share_memo[root] = (version, self.epoch, {})
        known = memo[2]
        pool = self.tree.pools.get(root, {})
        out: list[float] = []
        for name in node.path:
            found = known.get(name)
            if found is None:
                found = known[name] = self._share(name, pool)
            out.append(found)
        # Padded with zeros to the forest's deepest path: a level below a leaf borrows nothing,
        # so a tie with a deeper queue is decided by the heads, not by the tuples' lengths.
        out.extend([0.0] * (self.tree.depth - len(out)))
        return tuple(out)

    def _share(self, name: str, pool: Mapping[str, int]) -> float:
        """One queue's weighted dominant share (``shares``)."""
        member = self.tree.nodes[name]
        used = self._named_used.get(name, {})
        share = 0.0
        for res, total in pool.items():
            if total <= 0:
                continue
            over = used.get(res, 0) - member.emin.get(res, 0)
            if over > 0:
                share = max(share, over / total)
        return share / member.spec.weight
