"""Choosing which pods to evict so that a queue short of its guarantee gets a waiting pod placed.

Only pods on *borrowed* capacity may go: the pods under each lending queue (see `lender`: the
queue itself among flat queues, the whole organisation when the requester is outside it) are
ranked as they would have been admitted (higher priority first, then older), and those that fit
inside that queue's guarantee in that order are protected; the rest are borrowed. A gang goes
whole or not at all, so it is a candidate only when every member is borrowed.

The caller knows the devices; this module only asks it whether freeing a set of candidates would
let the pod fit on a node (`fits`). Single candidates are tried first, cheapest first across the
cluster (one pod before a gang, then lowest priority, then newest); when none alone will do,
each node's candidates are accumulated, cheapest first, until the pod fits, and those it fits
without are dropped again. The fewest victims win, then the lowest priority, then the newest.

When no set of borrowed pods makes room, the guarantee is read as an amount rather than a list
of pods (`BorrowedUnits.surplus`): any single pod of a lending queue that holds more than its
guarantee may go, as long as every lending queue that victims are taken from still holds its
guarantee once they are gone (`Allowed`). Borrowed pods are ranked by admission order, not by
where their devices are: the newest may sit beside a protected pod on the same GPU (half of a
GPU each), where evicting it frees nothing a whole-GPU pod can use, while the queue's surplus
is the same whichever of its pods goes. Without this, a queue could end one GPU short of its
guarantee for good, with that GPU lent as two unusable halves. The fallback takes single pods
only (a gang still goes only when every member is borrowed). If nothing works, nobody is
evicted.

Idle units first: a unit is idle when every device of every pod in it is idle (the `Idle`
condition the kubelet plugins write into the claims' status, read by the caller into
`Running.idle_since`). Idleness ranks *above* the number of victims: of two choices the one with
fewer busy victims wins, then the one with fewer victims, then the lowest priority, then the
newest. A pod that computes nothing loses nothing of value when it goes, a busy one loses its
work, so two idle pods go before one busy pod, and an idle gang before a busy single pod; among
choices with as many busy victims the order is exactly the one above. When candidates are
accumulated on a node, idle units are taken first, and when the unneeded ones are dropped again,
busy ones are dropped first. Callers without idleness (`dra-driver simulate`) leave `idle_since`
None: every unit is busy and the order is the one without idleness.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from dra_driver.queues.fairness import Ledger
from dra_driver.queues.spec import ZERO, Amounts
from dra_driver.queues.tree import QueueTree


@dataclass(frozen=True, slots=True)
class Running:
    """A pod that holds devices, as reclaim sees it."""

    key: tuple[str, str]
    queue: str
    nodes: frozenset[str]
    priority: int
    created: str
    amounts: Amounts
    gang: str | None = None
    idle_since: datetime | None = None
    """When the last of the pod's devices went idle, if every one of them is idle now (see
    `dra_driver.device_status.idle_since`); None when any is busy or unknown."""


class Unit:
    """What is evicted together: a pod, or a gang's running members. Its figures are worked out
    once: a pass ranks every borrowed unit for every waiting pod."""

    __slots__ = ("busy", "created", "idle", "nodes", "pods", "priority")

    pods: tuple[Running, ...]
    priority: int
    created: str
    nodes: frozenset[str]
    idle: bool
    """Every device of every pod in it is idle."""
    busy: int
    """How many of its pods are not idle (all of them unless the unit is idle)."""

    def __init__(self, pods: tuple[Running, ...]) -> None:
        self.pods = pods
        self.priority = max(p.priority for p in pods)
        self.created = max(p.created for p in pods)
        self.nodes = frozenset(n for p in pods for n in p.nodes)
        self.idle = all(p.idle_since is not None for p in pods)
        self.busy = 0 if self.idle else len(pods)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Unit) and other.pods == self.pods

    def __hash__(self) -> int:
        return hash(tuple(p.key for p in self.pods))

    def __repr__(self) -> str:
        return f"Unit({self.pods!r})"

    @property
    def amounts(self) -> Amounts:
        total = ZERO
        for pod in self.pods:
            total = total + pod.amounts
        return total


Fits = Callable[[str, Sequence[Running]], bool]
"""(node, pods freed) → whether the waiting pod would fit on that node then."""
Allowed = Callable[[Sequence[Running]], bool]
"""Pods freed → whether they may go together (the lenders' guarantees, `BorrowedUnits.
surplus`)."""


def lender(tree: QueueTree, queue: str, requester: str) -> str:
    """The queue whose guarantee says whether `queue`'s pods are borrowed, as seen by
    `requester`: the highest ancestor of `queue` that is not also the requester's. Between two
    teams of one organisation that is the team; between two organisations, the organisation,
    so a team beyond its own guarantee but inside its organisation's lends nothing to others."""
    theirs = set(tree.path(requester)) if requester in tree.queues else set()
    return next((q for q in tree.path(queue) if q not in theirs), queue)


def borrowed_units(ledger: Ledger, running: Iterable[Running], requester: str) -> list[Unit]:
    """Units that hold only borrowed capacity, of queues other than `requester`."""
    return BorrowedUnits(ledger, running).units(requester)


Key = tuple[str, str]


class BorrowedUnits:
    """`borrowed_units` for many waiting pods over the same running pods (one pass): each
    lender's pods are ranked once, and its split into protected and borrowed is kept until one
    of its pods goes. Evicting borrowed pods can only protect more of the rest (what the
    lender holds shrinks), so that lender's split is made again then."""

    def __init__(self, ledger: Ledger, running: Iterable[Running]) -> None:
        self._tree = ledger.tree
        self._running = {pod.key: pod for pod in running}
        self._gone: set[Key] = set()
        self._groups: dict[str, dict[str, list[Running]]] = {}
        """Requester → lender → its pods that are left, ranked as they were admitted."""
        self._splits: dict[str, dict[str, tuple[set[Key], list[Running], Key | None]]] = {}
        """Requester → lender → (protected pods, borrowed pods, the first pod past the
        lender's guarantee)."""
        self._singles: dict[Key, Unit] = {}
        self._answers: dict[str, list[Unit]] = {}
        """Requester → its units, until one of the pods goes."""

    def units(self, requester: str, gone: Iterable[Key] = ()) -> list[Unit]:
        """The units of `borrowed_units`, without the pods in `gone` (being evicted). The list
        is kept until one of them goes, and a single pod's unit is made once."""
        self._forget_gone(gone)
        kept = self._answers.get(requester)
        if kept is not None:
            return list(kept)
        groups = self._lenders(requester)
        splits = self._splits[requester]
        protected: set[Key] = set()
        borrowed: list[Running] = []
        for name, pods in groups.items():
            split = splits.get(name)
            if split is None:
                split = splits[name] = self._split(name, pods, requester)
            protected |= split[0]
            borrowed += split[1]
        gangs: dict[str, list[Running]] = {}
        units: list[Unit] = []
        for pod in borrowed:
            if pod.gang is None:
                units.append(self._single(pod))
            else:
                gangs.setdefault(pod.gang, []).append(pod)
        for gang in gangs:
            members = [
                p for k, p in self._running.items() if p.gang == gang and k not in self._gone
            ]
            if all(m.key not in protected and m.queue != requester for m in members):
                units.append(Unit(tuple(sorted(members, key=lambda p: p.key))))
        self._answers[requester] = units
        return list(units)

    def surplus(self, requester: str, gone: Iterable[Key] = ()) -> tuple[list[Unit], Allowed]:
        """The fallback candidates (see the module's docstring): every single pod of a lender
        other than the requester's own queue that holds more than its guarantee, no larger than
        that surplus, and the rule that a set of them keeps every lender at its guarantee."""
        self._forget_gone(gone)
        spare: dict[str, Amounts] = {}
        lender_of: dict[Key, str] = {}
        units: list[Unit] = []
        for name, pods in self._lenders(requester).items():
            guaranteed = self._tree.queues[name].guaranteed
            if guaranteed.is_empty() or all(p.queue == requester for p in pods):
                continue  # no guarantee: every pod is borrowed already; or the requester's
            held = ZERO
            for pod in pods:
                held = held + pod.amounts
            left = guaranteed.excess(held)
            if left is None:
                continue
            spare[name] = left
            for pod in pods:
                if pod.gang is None and pod.queue != requester and pod.amounts.within(left):
                    lender_of[pod.key] = name
                    units.append(self._single(pod))

        def allowed(freed: Sequence[Running]) -> bool:
            taken: dict[str, Amounts] = {}
            for pod in freed:
                name = lender_of.get(pod.key)
                if name is None:
                    return False
                taken[name] = taken.get(name, ZERO) + pod.amounts
            return all(amounts.within(spare[name]) for name, amounts in taken.items())

        return units, allowed

    def _forget_gone(self, gone: Iterable[Key]) -> None:
        self._forget([key for key in gone if key not in self._gone and key in self._running])

    def _lenders(self, requester: str) -> dict[str, list[Running]]:
        """Lender → its pods that are left, ranked, as `requester` sees them (made once)."""
        groups = self._groups.get(requester)
        if groups is None:
            groups = self._groups[requester] = self._grouped(requester)
            self._splits[requester] = {}
        return groups

    def _single(self, pod: Running) -> Unit:
        """A lone pod's unit, made once: a pass ranks every one for every waiting pod."""
        unit = self._singles.get(pod.key)
        if unit is None:
            unit = self._singles[pod.key] = Unit((pod,))
        return unit

    def _grouped(self, requester: str) -> dict[str, list[Running]]:
        groups: dict[str, list[Running]] = {}
        lenders: dict[str, str] = {}
        for key, pod in self._running.items():
            if key in self._gone or pod.queue not in self._tree.queues:
                continue
            found = lenders.get(pod.queue)
            if found is None:
                found = lenders[pod.queue] = lender(self._tree, pod.queue, requester)
            groups.setdefault(found, []).append(pod)
        for pods in groups.values():
            pods.sort(key=lambda p: (-p.priority, p.created, p.key))
        return groups

    def _split(
        self, name: str, ranked: Sequence[Running], requester: str
    ) -> tuple[set[Key], list[Running], Key | None]:
        """(protected, borrowed, the first pod past the guarantee)."""
        guaranteed = self._tree.queues[name].guaranteed
        protected: set[Key] = set()
        borrowed: list[Running] = []
        held = ZERO
        cut: Key | None = None
        for pod in ranked:
            if cut is None:
                held = held + pod.amounts
                if guaranteed.covers(held):
                    protected.add(pod.key)
                    continue
                cut = pod.key  # what is held only grows: past the guarantee once, for good
            if pod.queue != requester:
                borrowed.append(pod)
        return protected, borrowed, cut

    def _forget(self, keys: Sequence[Key]) -> None:
        if not keys:
            return
        self._gone.update(keys)
        self._answers.clear()
        for requester, groups in self._groups.items():
            for key in keys:
                pod = self._running[key]
                if pod.queue not in self._tree.queues:
                    continue
                name = lender(self._tree, pod.queue, requester)
                if name in groups:
                    groups[name] = [p for p in groups[name] if p.key != key]
                    split = self._splits[requester].get(name)
                    if split is not None and key not in split[0] and key != split[2]:
                        # Ranked after the first pod past the guarantee: what comes before
                        # is as it was, so the split is too, less this pod.
                        split[1][:] = [p for p in split[1] if p.key != key]
                    else:
                        self._splits[requester].pop(name, None)


def _rank(node: str, chosen: Sequence[Unit]) -> tuple[object, ...]:
    """Smaller is better: fewest busy victims, then fewest victims, then lowest priority, then
    newest (see the module's docstring)."""
    if len(chosen) == 1:
        return _single_rank(chosen[0], node)
    return (
        sum(u.busy for u in chosen),
        sum(len(u.pods) for u in chosen),
        max(u.priority for u in chosen),
        _newest_first(max(u.created for u in chosen)),
        node,
    )


def _single_rank(unit: Unit, node: str) -> tuple[object, ...]:
    """`_rank` of one unit, the shape every candidate is first ranked in."""
    return (unit.busy, len(unit.pods), unit.priority, _newest_first(unit.created), node)


def choose_victims(
    units: Sequence[Unit], fits: Fits, allowed: Allowed | None = None
) -> tuple[str, list[Unit]] | None:
    """The node and the units to evict so the pod fits there: the fewest busy ones, then the
    fewest (see the module's docstring). With `allowed`, only sets it accepts are tried.

    Single units are tried first across the whole cluster in the order of their rank, so the
    first that fits is the best single choice and, when it is one pod, the answer: on a large
    cluster one trial usually settles it, instead of one per node."""
    singles = sorted(
        (
            (unit, node)
            for unit in units
            if allowed is None or allowed(unit.pods)
            for node in sorted(unit.nodes)
        ),
        key=lambda pair: _single_rank(pair[0], pair[1]),
    )
    best: tuple[tuple[object, ...], str, list[Unit]] | None = None
    for unit, node in singles:
        if fits(node, unit.pods):
            best = (_single_rank(unit, node), node, [unit])
            break
    if best is not None and len(best[2][0].pods) == 1 and (best[2][0].idle or not idle_any(units)):
        # Nothing can beat one pod unless it is busy and idle units could go instead.
        return best[1], best[2]
    by_node: dict[str, list[Unit]] = {}
    for unit in units:
        for node in unit.nodes:
            by_node.setdefault(node, []).append(unit)
    for node in sorted(by_node):
        if len(by_node[node]) < 2:
            continue
        ranked = sorted(by_node[node], key=cheapest_first)
        chosen = (
            _several(node, ranked, fits)
            if allowed is None
            else _several_allowed(node, ranked, fits, allowed)
        )
        if chosen is None:
            continue
        rank = _rank(node, chosen)
        if best is None or rank < best[0]:
            best = (rank, node, chosen)
    return None if best is None else (best[1], best[2])


def choose_reclaim(
    lenders: BorrowedUnits, requester: str, fits: Fits, gone: Iterable[Key] = ()
) -> tuple[str, list[Unit]] | None:
    """`choose_victims` among the borrowed units, then, when none make room, among the
    lenders' surplus (see the module's docstring); nobody when nothing is borrowed. The
    controller and `simulate` both reclaim through this, so they agree."""
    units = lenders.units(requester, gone)
    if not units:
        return None
    chosen = choose_victims(units, fits)
    if chosen is None:
        spare, allowed = lenders.surplus(requester, gone)
        chosen = choose_victims(spare, fits, allowed) if spare else None
    return chosen


def idle_any(units: Sequence[Unit]) -> bool:
    return any(u.idle for u in units)


def _several(node: str, ranked: Sequence[Unit], fits: Fits) -> list[Unit] | None:
    """Units of one node taken cheapest first until the pod fits, then the unneeded dropped."""
    chosen: list[Unit] = []
    freed: list[Running] = []
    for unit in ranked:
        chosen.append(unit)
        freed.extend(unit.pods)
        if len(chosen) > 1 and fits(node, freed):
            return _pruned(node, chosen, fits)
    return None


def _several_allowed(
    node: str, ranked: Sequence[Unit], fits: Fits, allowed: Allowed
) -> list[Unit] | None:
    """`_several` where only some sets may go. Taking units cheapest first would stop at the
    first one a lender's surplus cannot add (a lender half a GPU over may give one half, so
    which half comes first decides what else can join), so: a node where even all of them
    would not do is passed over at the cost of one trial, then every allowed pair is tried
    cheapest first, then each unit in turn as the first one taken, passing over those that
    would make the set not allowed."""
    if not fits(node, [p for unit in ranked for p in unit.pods]):
        return None
    for first, second in itertools.combinations(ranked, 2):
        pair = [*first.pods, *second.pods]
        if allowed(pair) and fits(node, pair):
            return _pruned(node, [first, second], fits)
    for first in ranked:
        chosen = [first]
        freed = list(first.pods)
        for unit in ranked:
            if unit is first or not allowed([*freed, *unit.pods]):
                continue
            chosen.append(unit)
            freed.extend(unit.pods)
            if len(chosen) > 2 and fits(node, freed):
                # Dropping a victim only leaves the lenders more: what is left is allowed.
                return _pruned(node, chosen, fits)
    return None


def _pruned(node: str, chosen: list[Unit], fits: Fits) -> list[Unit]:
    """Drop every unit the pod fits without, costliest first: each victim left is needed."""
    kept = list(chosen)
    for unit in sorted(chosen, key=costliest_first):
        rest = [u for u in kept if u is not unit]
        if rest and fits(node, [p for u in rest for p in u.pods]):
            kept = rest
    return kept


def cheapest_first(unit: Unit) -> tuple[object, ...]:
    """The order candidates are taken in: idle before busy, then lowest priority, newest."""
    return (not unit.idle, unit.priority, _newest_first(unit.created))


def costliest_first(unit: Unit) -> tuple[object, ...]:
    """The order victims found unneeded are dropped in: busy before idle, then highest
    priority, oldest."""
    return (unit.idle, -unit.priority, unit.created)


@functools.lru_cache(maxsize=4096)
def _newest_first(created: str) -> tuple[int, ...]:
    """A sort key that puts later RFC 3339 timestamps first. Cached: a pass ranks every
    borrowed pod for every waiting pod, and pods created in the same second share a key."""
    return tuple(-ord(c) for c in created)
