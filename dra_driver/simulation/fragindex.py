"""Choosing a node (and the devices on it) for a pod: the workload-aware fragmentation score.

This is the FGD idea (Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with
Fragmentation Gradient Descent", USENIX ATC '23), over any driver's slices. For a node state and
one pod shape, the *fragment* is the free device room that shape cannot use: all of it when the
node cannot host the shape (CPU, memory or too few usable devices), else the room of the units
(see rooms.py) whose best matching device offers less than the shape needs. The node's expected
fragmentation weighs the shapes by the learned workload (workload.py). A pod goes to the node,
and the unit on it, that increases expected fragmentation least.

Shapes are weighed by their share of the pods, as in the paper; the most common ones that
together make up `COVERAGE` of the pods are kept, at most `MAX_SHAPES` (a node state costs one
pass per shape kept; on the openb traces 48 shapes make up 81 to 94 % of the pods). Weighing shapes
by the device room they ask for instead was measured and rejected: it helps where pods mostly
share GPUs and costs several points where pods are pinned to models (docs/performance.md).

Among nodes whose increase is equal, the node with the least free device room wins, then node
order. Equal increases mostly mean "no common shape is hurt here"; the kube-scheduler breaks such
ties at random, node order alone piles pods onto the first nodes, and filling the fuller node
keeps the emptier ones whole for the large shapes (on the openb traces it beat node order on two
and tied on the third; random ties did as well on the one seed tried, but make a replay
unrepeatable; docs/performance.md).

Every node is considered: nodes in equal states (same devices, availability and free resources)
share one evaluation, and evaluations are cached per state until the workload is refreshed. The
score only ranks; the allocator decides fit, so a node whose real allocation fails is skipped
and, when no ranked node takes the pod, the caller falls back to first fit.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dra_driver.allocator import ClusterSnapshot, Usage
from dra_driver.allocator.capacity import share_demand
from dra_driver.allocator.quantities import Number
from dra_driver.allocator.search import CandidateIndex
from dra_driver.allocator.snapshot import Device
from dra_driver.simulation.rooms import NodeUnits, Rooms, unit_rooms
from dra_driver.simulation.workload import Demand, Shape, Workload

EPS = 1e-9
COVERAGE = 0.95
"""The shapes kept are the most common ones that together make up this share of the pods."""
MAX_SHAPES = 48
"""...and no more than this many: a node's fragmentation costs one pass per shape kept."""


class Objective(enum.StrEnum):
    FRAGMENTATION = "fragmentation"
    """Least increase of expected fragmentation (scored mode)."""
    BEST_FIT = "best-fit"
    """Least free device room left, then least free CPU share (the benchmark's baseline)."""


@dataclass(frozen=True, slots=True)
class Choice:
    node: str
    value: float
    """The objective's value: the fragmentation increase, or the free room left (best fit)."""
    devices: tuple[int, ...]
    """Device ids the score chose; the allocator is steered towards them."""
    before: float
    after: float
    room: float = 0.0
    """Free device room on the node before the pod: among equal values, the fuller node wins."""


State = tuple[int, tuple[float, ...], tuple[int, ...]]


class FragmentationIndex:
    def __init__(
        self,
        snapshot: ClusterSnapshot,
        usage: Usage,
        workload: Workload,
        resource_names: Sequence[str],
    ) -> None:
        self.snapshot = snapshot
        self.usage = usage
        self.workload = workload
        self.rooms = Rooms(snapshot)
        self.names = tuple(resource_names)
        self._candidates = CandidateIndex(snapshot)
        self._matches: dict[
            tuple[str, tuple[object, ...]], tuple[tuple[tuple[int, float], ...], ...]
        ] = {}
        self._conflicts: dict[int, tuple[frozenset[int], ...]] = {}
        self._f: dict[State, float] = {}
        self._choices: dict[
            tuple[State, tuple[object, ...], str],
            tuple[float, tuple[int, ...], float, float] | None,
        ] = {}
        self._version = -1
        self._weighted: list[tuple[Shape, float]] = []
        self._states: dict[str, tuple[object, State]] = {}

    # -- static structure -----------------------------------------------------------------

    def matching(self, node: str, demand: Demand) -> tuple[tuple[tuple[int, float], ...], ...]:
        """Per unit: (device index, size) of the devices the demand's selectors accept."""
        units = self.rooms.node(node)
        key = (node, demand.key)
        found = self._matches.get(key)
        if found is None:
            alt = demand.alternative
            accepted = {
                d.id
                for d, verdict in self._candidates.candidates(self.snapshot.view(node), alt)
                if verdict is True
            }
            found = tuple(
                tuple(
                    (i, self._size(units.devices[i], alt.capacity))
                    for i in unit
                    if units.devices[i].id in accepted
                )
                for unit in units.units
            )
            self._matches[key] = found
        return found

    def _size(self, device: Device, capacity: Mapping[str, Number]) -> float:
        weight = self.rooms.weight(device)
        if not device.allow_multiple:
            return weight
        demand = share_demand(device, capacity)
        if demand is None:
            return float("inf")
        fractions = [
            float(amount / device.capacity[name].value)
            for name, amount in demand.items()
            if device.capacity[name].value
        ]
        return weight * max(fractions, default=1.0)

    def conflicts(self, units: NodeUnits) -> tuple[frozenset[int], ...]:
        found = self._conflicts.get(units.signature)
        if found is None:
            found = tuple(
                frozenset(
                    j
                    for j, other in enumerate(units.devices)
                    if j != i
                    and other.pool_index == d.pool_index
                    and {c for c, _ in other.consumes} & {c for c, _ in d.consumes}
                )
                for i, d in enumerate(units.devices)
            )
            self._conflicts[units.signature] = found
        return found

    # -- state ------------------------------------------------------------------------------

    def state(self, node: str, free: Mapping[str, int]) -> State:
        """Cached per node until its device usage or its free resources change."""
        stamp = (self.usage.node_version(node), tuple(free.get(n, 0) for n in self.names))
        cached = self._states.get(node)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        units = self.rooms.node(node)
        state = (units.signature, self.rooms.availability(self.usage, node), stamp[1])
        self._states[node] = (stamp, state)
        return state

    def _refresh(self) -> None:
        if self._version != self.workload.version:
            self._version = self.workload.version
            self._f.clear()
            self._choices.clear()
            self._weighted = self.weighted(self.workload.distribution())

    def weighted(self, distribution: Sequence[tuple[Shape, float]]) -> list[tuple[Shape, float]]:
        """The most common shapes that make up `COVERAGE` of the pods (at most `MAX_SHAPES`),
        renormalised."""
        ranked = sorted(distribution, key=lambda item: -item[1])
        kept: list[tuple[Shape, float]] = []
        mass = 0.0
        for shape, p in ranked:
            if mass >= COVERAGE or len(kept) >= MAX_SHAPES:
                break
            kept.append((shape, p))
            mass += p
        return [(shape, p / mass) for shape, p in kept] if mass > 0 else []

    def fragmentation(self, node: str, avail: Sequence[float], free: tuple[int, ...]) -> float:
        units = self.rooms.node(node)
        key = (units.signature, tuple(avail), free)
        found = self._f.get(key)
        if found is None:
            found = self._fragmentation(node, units, avail, free, self._weighted)
            self._f[key] = found
        return found

    def _fragmentation(
        self,
        node: str,
        units: NodeUnits,
        avail: Sequence[float],
        free: tuple[int, ...],
        distribution: Sequence[tuple[Shape, float]],
    ) -> float:
        rooms = unit_rooms(units, avail)
        total = sum(rooms)
        if total <= EPS:
            return 0.0
        where = {n: i for i, n in enumerate(self.names)}
        expected = 0.0
        for shape, p in distribution:
            if any(free[where[n]] < amount for n, amount in shape.requests if n in where):
                expected += p * total
                continue
            demand = shape.demand
            if demand is None:
                continue
            usable = 0
            lost = 0.0
            for u, matched in enumerate(self.matching(node, demand)):
                if any(avail[i] >= size - EPS for i, size in matched):
                    usable += 1
                else:
                    lost += rooms[u]
            expected += p * (total if usable < demand.count else lost)
        return expected

    # -- choosing -----------------------------------------------------------------------------

    def choose(
        self, node: str, free: Mapping[str, int], shape: Shape, objective: Objective
    ) -> Choice | None:
        """The best way to put `shape` on `node` under `objective`, or None if it cannot fit."""
        self._refresh()
        state = self.state(node, free)
        key = (state, shape.key, objective.value)
        if key in self._choices:
            found = self._choices[key]
        else:
            found = self._choose(node, state, shape, objective)
            self._choices[key] = found
        if found is None:
            return None
        units = self.rooms.node(node)
        value, picked, before, after = found
        room = sum(unit_rooms(units, state[1]))
        picked_ids = tuple(units.devices[i].id for i in picked)
        return Choice(node, value, picked_ids, before, after, room)

    def _choose(
        self, node: str, state: State, shape: Shape, objective: Objective
    ) -> tuple[float, tuple[int, ...], float, float] | None:
        _, avail, free = state
        where = {n: i for i, n in enumerate(self.names)}
        left = list(free)
        for name, amount in shape.requests:
            i = where.get(name)
            if i is not None:
                if left[i] < amount:
                    return None
                left[i] -= amount
        after_free = tuple(left)
        units = self.rooms.node(node)
        options: list[tuple[int, ...]] = [()]
        if shape.demand is not None:
            options = self._options(node, units, avail, shape.demand)
            if not options:
                return None
        best: tuple[float, tuple[int, ...], float, float] | None = None
        before = (
            self.fragmentation(node, avail, free) if objective is Objective.FRAGMENTATION else 0.0
        )
        for picked in options:
            after_avail = self._after(units, avail, picked, shape.demand, node)
            if objective is Objective.FRAGMENTATION:
                after = self.fragmentation(node, after_avail, after_free)
                value = after - before
            else:
                rooms = sum(unit_rooms(units, after_avail))
                after = rooms
                value = rooms
            if best is None or value < best[0] - EPS:
                best = (value, picked, before, after)
        return best

    def _options(
        self, node: str, units: NodeUnits, avail: Sequence[float], demand: Demand
    ) -> list[tuple[int, ...]]:
        usable: list[tuple[float, int]] = []
        for matched in self.matching(node, demand):
            fits = [(avail[i], i) for i, size in matched if avail[i] >= size - EPS]
            if fits:
                usable.append(min(fits))
        if len(usable) < demand.count:
            return []
        if demand.count == 1:
            seen: set[float] = set()
            options: list[tuple[int, ...]] = []
            for value, i in usable:
                if value not in seen:
                    seen.add(value)
                    options.append((i,))
            return options
        usable.sort()
        return [tuple(i for _, i in usable[: demand.count])]

    def _after(
        self,
        units: NodeUnits,
        avail: Sequence[float],
        picked: Sequence[int],
        demand: Demand | None,
        node: str,
    ) -> tuple[float, ...]:
        if not picked or demand is None:
            return tuple(avail)
        after = list(avail)
        conflicts = self.conflicts(units)
        unit_of = {i: u for u, unit in enumerate(units.units) for i in unit}
        sizes = {i: s for matched in self.matching(node, demand) for i, s in matched}
        for i in picked:
            device = units.devices[i]
            size = sizes[i]
            room = max(after[j] for j in units.units[unit_of[i]])
            left = max(room - size, 0.0)
            after[i] = max(after[i] - size, 0.0) if device.allow_multiple else 0.0
            for j in units.units[unit_of[i]]:
                if j == i:
                    continue
                after[j] = 0.0 if j in conflicts[i] else min(after[j], left)
        return tuple(after)
