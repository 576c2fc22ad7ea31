"""Every node at once for a pod: the replay's node ranking and its first-fit scan.

`FragmentationIndex.choose` answers for one node; a pod of the replay needs the answer for every
node, and on a cluster of a thousand nodes whose free CPU and memory all differ, one node at a
time was most of a replay's cost. `NodeTable` keeps what the replay reads of each node in arrays
(its GPU state id, its free amount of each resource pods ask for, whether it stands for its
group, its expected fragmentation as it is) and computes, for all nodes in one pass, what
`choose` would: whether the pod fits, each placement option's value, the best option under the
same EPS rule, and the order of the ranking.

The groups are those the ranking has always used: nodes in equal states (devices, availability,
free CPU and memory) form one group, and its first node in node order stands for it. The first
node's fit decides for the group, and only it is ranked. Scored mode orders by FGD's points
for the increase (`fgd_points`), then the free device room after placement, then node order;
best fit by its value rounded to 9 decimals as Python's `round` rounds (`round9`), then the CPU
share left, then node order. The values are the floats `choose` computes (fragindex.py says why
they are bit for bit the same), so orders and ties are exactly those of ranking one node at a
time.

First fit reads the same arrays: the nodes whose free resources take the pod, in node order,
less those the allocator turned down for the same claims since their usage last changed.

A node's state changes when a pod lands on it or leaves it (the replay says so through `moved`)
and, for devices whose counters span nodes, when another node's usage changes: those are read
from the usage's change log (`catch_up`).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from dra_driver.allocator import Usage
from dra_driver.noderesources import CPU, PODS
from dra_driver.simulation.fragindex import (
    EPS,
    Choice,
    FragmentationIndex,
    Objective,
    State,
    fgd_points,
    int_array,
)
from dra_driver.simulation.ledger import NodeResourceLedger
from dra_driver.simulation.workload import PodShape


class NodeTable:
    def __init__(
        self,
        nodes: Sequence[str],
        ledger: NodeResourceLedger,
        usage: Usage,
        index: FragmentationIndex,
    ) -> None:
        self.nodes = list(nodes)
        self.ledger = ledger
        self.usage = usage
        self.index = index
        self._order = {n: i for i, n in enumerate(self.nodes)}
        self._built = False
        self._groups: dict[State, list[int]] = {}
        self._group_of: dict[str, State] = {}
        size = len(self.nodes)
        self._gpu = np.zeros(size, dtype=np.int64)
        self._first = np.zeros(size, dtype=bool)
        """The node stands for its group: the first in node order of the nodes in its state."""
        self._limited = np.array([ledger.limited(n) for n in self.nodes], dtype=bool)
        """Nodes without allocatable resources take any pod (the ledger's rule)."""
        self._columns: dict[str, NDArray[Any]] = {}
        self._cpu_total: NDArray[Any] | None = None
        self._before = np.zeros(size)
        """Per node, the expected fragmentation of its state (key in `_before_key`)."""
        self._before_key = np.full(size, -1, dtype=np.int64)
        self._before_table: object = None
        self._unfit: dict[str, NDArray[np.bool_]] = {}
        """Per claim-set signature: nodes whose devices did not take it, until their usage
        changes (first fit skips them)."""
        self._log = (usage.changes_epoch, len(usage.changes))
        """Where the usage's change log was last read."""

    # -- keeping up with the replay ----------------------------------------------------------

    def moved(self, node: str) -> None:
        """`node`'s usage or free resources changed: note its free resources, and move it to
        the group of its new state."""
        i = self._order[node]
        free = self.ledger.free(node)
        for name, column in self._columns.items():
            self._set(name, column, i, free.get(name, 0))
        if not self._built:
            return
        old = self._group_of.get(node)
        if old is not None:
            members = self._groups[old]
            members.remove(i)
            self._first[i] = False
            if members:
                self._first[members[0]] = True
            else:
                del self._groups[old]
        state, gpu = self.index.state_and_gpu(node, free)
        self._gpu[i] = gpu
        self._group_of[node] = state
        members = self._groups.setdefault(state, [])
        if members:
            self._first[members[0]] = False
        bisect.insort(members, i)
        self._first[members[0]] = True

    def _set(self, name: str, column: NDArray[Any], i: int, value: int) -> None:
        try:
            column[i] = value
        except OverflowError:
            column = self._columns[name] = column.astype(object)
            column[i] = value

    def build(self) -> None:
        """Group the nodes by state now (else on the first ranking)."""
        if not self._built:
            self._build()

    def _build(self) -> None:
        self._built = True
        for i, node in enumerate(self.nodes):
            state, gpu = self.index.state_and_gpu(node, self.ledger.free(node))
            self._gpu[i] = gpu
            self._group_of[node] = state
            self._groups.setdefault(state, []).append(i)
        for members in self._groups.values():
            self._first[members[0]] = True

    def catch_up(self) -> None:
        """Read the usage's change log: the nodes whose device usage changed since the last
        call get fresh GPU state ids and lose their "did not fit" marks."""
        usage = self.usage
        epoch, seen = self._log
        if epoch == usage.changes_epoch and len(usage.changes) == seen:
            return
        if epoch != usage.changes_epoch or "*" in usage.changes[seen:]:
            changed: Sequence[str] = self.nodes
        else:
            changed = usage.changes[seen:]
        self._log = (usage.changes_epoch, len(usage.changes))
        rows = [self._order[n] for n in dict.fromkeys(changed) if n in self._order]
        for marks in self._unfit.values():
            marks[rows] = False
        if self._built:
            for i in rows:
                node = self.nodes[i]
                self._gpu[i] = self.index.state_and_gpu(node, self.ledger.free(node))[1]

    def unfit(self, signature: str) -> NDArray[np.bool_]:
        """Nodes known not to take claims of `signature` at their current usage; the caller
        sets a node's mark when the allocator turns it down (after `catch_up`)."""
        found = self._unfit.get(signature)
        if found is None:
            found = self._unfit[signature] = np.zeros(len(self.nodes), dtype=bool)
        return found

    def _column(self, name: str) -> NDArray[Any]:
        """Free `name` per node (0 where the node has none, or no limits)."""
        found = self._columns.get(name)
        if found is None:
            found = self._columns[name] = int_array(
                [self.ledger.free(n).get(name, 0) for n in self.nodes]
            )
        return found

    def mask(self, names: Iterable[str]) -> NDArray[np.bool_]:
        """The nodes of `names` (those the table knows) as a mask over its nodes."""
        found = np.zeros(len(self.nodes), dtype=bool)
        found[[i for n in names if (i := self._order.get(n)) is not None]] = True
        return found

    def _standing_for(self, allowed: NDArray[np.bool_]) -> NDArray[np.bool_]:
        """Per group, its first node in node order among `allowed`: a caller that may use only
        some nodes (the controller, after node selectors, taints and room) ranks the same
        groups, each stood for by the first node it may use."""
        first = self._first & allowed
        for i in np.flatnonzero(self._first & ~allowed).tolist():
            for j in self._groups[self._group_of[self.nodes[i]]]:
                if allowed[j]:
                    first[j] = True
                    break
        return first

    def fitting(self, asks: Sequence[tuple[str, int]]) -> NDArray[np.bool_]:
        """Per node, whether its free resources take a pod asking `asks` (`asked(requests)`):
        `NodeResourceLedger.fits` for every node at once."""
        fits = self._column(PODS) >= 1
        for name, amount in asks:
            fits &= self._column(name) >= amount
        result: NDArray[np.bool_] = fits | ~self._limited
        return result

    # -- ranking ------------------------------------------------------------------------------

    def ranked(
        self,
        shape: PodShape,
        asks: Sequence[tuple[str, int]],
        cpu: int,
        objective: Objective,
        fuller_first: bool,
        allowed: NDArray[np.bool_] | None = None,
    ) -> Iterator[Choice]:
        """The groups' best choices, best first, as ranking each group's first node with
        `FragmentationIndex.choose` would order them. `asks` are the pod's requests as the
        ledger checks them, `cpu` its CPU request (best fit's tie), `allowed` the nodes that
        may be chosen (all by default). Lazy: a caller that stops at the first node taking the
        pod builds one Choice."""
        if not self._built:
            self._build()
        index = self.index
        index.refresh()
        self.catch_up()
        first = self._first if allowed is None else self._standing_for(allowed)
        fits = first & self.fitting(asks)
        requested = dict(shape.requests)
        for name in index.names:
            if name in requested:
                # The score's own check, on the free amounts the state holds.
                fits &= self._column(name) >= requested[name]
        nodes = np.flatnonzero(fits)
        counts, afters = index.option_arrays(self._gpu[nodes], shape.demand)
        placeable = counts > 0
        nodes, counts = nodes[placeable], counts[placeable]
        afters = [after[placeable] for after in afters]
        if not nodes.size:
            return
        gpus = self._gpu[nodes]
        if objective is Objective.FRAGMENTATION:
            free = [self._column(name)[nodes] for name in index.names]
            before = self._fragmentation_now(nodes, gpus, index.table.cells_of(free))
            left = [f - requested.get(n, 0) for f, n in zip(free, index.names, strict=True)]
            after_cells = index.table.cells_of(left)
            value, after, room, points, picked = _most_points(
                counts,
                afters,
                lambda states, has: index.values(states, after_cells[has]),
                before,
                index.rooms_of,
                fuller_first,
            )
            tie = room if fuller_first else np.zeros(len(nodes))
            order = np.lexsort((nodes, tie, -points)).tolist()
        else:
            value, after, picked = _least(
                counts, afters, lambda states, has: index.rooms_of(states), np.zeros(len(nodes))
            )
            room, before = after, np.zeros(len(nodes))
            points = np.zeros(len(nodes), dtype=np.int64)
            order = np.lexsort((nodes, self._cpu_left(nodes, cpu), round9(value))).tolist()
        rows, ways, gpu_ids = nodes.tolist(), picked.tolist(), gpus.tolist()
        for j in order:
            node = self.nodes[rows[j]]
            units = index.rooms.node(node)
            chosen = index.picked(gpu_ids[j], shape.demand, ways[j])
            yield Choice(
                node,
                float(value[j]),
                tuple(units.devices[i].id for i in chosen),
                float(before[j]),
                float(after[j]),
                float(room[j]),
                int(points[j]),
            )

    def _fragmentation_now(
        self, nodes: NDArray[np.int64], gpus: NDArray[np.int64], cells: NDArray[np.int64]
    ) -> NDArray[np.float64]:
        """The nodes' expected fragmentation as they are: kept per node, looked up again only
        for nodes whose state changed (most did not since the last pod)."""
        table = self.index.table
        if self._before_table is not table:
            self._before_table = table
            self._before_key[:] = -1
        keys = gpus * table.cells + cells
        stale = keys != self._before_key[nodes]
        if stale.any():
            rows = nodes[stale]
            self._before[rows] = self.index.values(gpus[stale], cells[stale])
            self._before_key[rows] = keys[stale]
        result: NDArray[np.float64] = self._before[nodes]
        return result

    def _cpu_left(self, nodes: NDArray[np.int64], cpu: int) -> NDArray[np.float64]:
        """Best fit's tie: the share of the node's allocatable CPU left after the pod (0 for a
        node without allocatable CPU)."""
        if self._cpu_total is None:
            totals = []
            for node in self.nodes:
                allocatable = self.ledger.allocatable.get(node)
                totals.append(allocatable.amount(CPU) if allocatable is not None else 0)
            self._cpu_total = int_array(totals)
        total = self._cpu_total[nodes]
        left = self._column(CPU)[nodes] - cpu
        shares = [(a / t if t else 0.0) for a, t in zip(left.tolist(), total.tolist(), strict=True)]
        return np.array(shares, dtype=np.float64)


def _most_points(
    counts: NDArray[np.int64],
    afters: Sequence[NDArray[np.int64]],
    measure: Callable[[NDArray[np.int64], NDArray[np.int64]], NDArray[np.float64]],
    before: NDArray[np.float64],
    rooms_of: Callable[[NDArray[np.int64]], NDArray[np.float64]],
    fuller_first: bool,
) -> tuple[
    NDArray[np.float64],
    NDArray[np.float64],
    NDArray[np.float64],
    NDArray[np.int64],
    NDArray[np.int64],
]:
    """Per node, the option with the most FGD points (`fgd_points` of its increase), then
    (`fuller_first`) the least free room after it, then the first, as
    `FragmentationIndex.choose` picks. Returns the increase, the fragmentation after, the room
    after, the points and the option's number."""
    everyone = np.arange(len(counts))
    after = measure(afters[0], everyone)
    value = after - before
    points = fgd_points(value)
    room = rooms_of(afters[0])
    picked = np.zeros(len(counts), dtype=np.int64)
    for k in range(1, len(afters)):
        has = np.flatnonzero(counts > k)
        then = measure(afters[k][has], has)
        increase = then - before[has]
        scored = fgd_points(increase)
        left = rooms_of(afters[k][has])
        better = scored > points[has]
        if fuller_first:
            better |= (scored == points[has]) & (left < room[has])
        wins = has[better]
        value[wins] = increase[better]
        after[wins] = then[better]
        points[wins] = scored[better]
        room[wins] = left[better]
        picked[wins] = k
    return value, after, room, points, picked


def _least(
    counts: NDArray[np.int64],
    afters: Sequence[NDArray[np.int64]],
    measure: Callable[[NDArray[np.int64], NDArray[np.int64]], NDArray[np.float64]],
    before: NDArray[np.float64],
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.int64]]:
    """Per node, the option of least value (`measure` of the state after, less `before`): a
    later option wins only when lower by more than EPS, as `FragmentationIndex.choose` picks.
    Returns the value, the measure after, and the option's number."""
    everyone = np.arange(len(counts))
    after = measure(afters[0], everyone)
    value = after - before
    picked = np.zeros(len(counts), dtype=np.int64)
    for k in range(1, len(afters)):
        has = np.flatnonzero(counts > k)
        then = measure(afters[k][has], has)
        increase = then - before[has]
        better = increase < value[has] - EPS
        wins = has[better]
        value[wins] = increase[better]
        after[wins] = then[better]
        picked[wins] = k
    return value, after, picked


def round9(values: NDArray[np.float64]) -> NDArray[np.float64]:
    """`round(v, 9)` of each value, as Python rounds: the nearest double to the value's exact
    decimal rounded half-even to 9 places. Scaling by 1e9 in floats picks the same integer
    except within float error of a half (or for huge values); those few go through `round`.
    The division is then the nearest double to that integer / 1e9, as Python's result is."""
    with np.errstate(over="ignore", invalid="ignore"):
        scaled = values * 1e9
        out: NDArray[np.float64] = np.rint(scaled) / 1e9
        doubtful = np.flatnonzero(
            (np.abs(scaled - np.floor(scaled) - 0.5) < 1e-4) | ~(np.abs(values) < 1e6)
        )
    for i in doubtful.tolist():
        out[i] = round(float(values[i]), 9)
    return out
