"""Choosing a node (and the devices on it) for a pod: the workload-aware fragmentation score.

This is the FGD idea (Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with
Fragmentation Gradient Descent", USENIX ATC '23), over any driver's slices. For a node state and
one pod shape, the *fragment* is the free device room that shape cannot use: all of it when the
node cannot host the shape (CPU, memory or too few usable devices), else the room of the units
(see rooms.py) whose best matching device offers less than the shape needs. The node's expected
fragmentation weighs the shapes by the workload (workload.py). A pod goes to the node, and the
unit on it, whose increase of expected fragmentation scores the most points (below).

Shapes are weighed by their share of all the pods, those that ask for no device included, as
FGD's simulator weighs its typical pods in the paper's experiments; the most common ones that
together make up `COVERAGE` of the pods are kept, as FGD keeps them, with `MAX_SHAPES` only as a
guard on cost (a new GPU state costs one pass per shape kept; the openb traces need 52 to 152
shapes for 95 %, and a cap of 48 cost multigpu30 about 0.1 point). A shape
without devices can use none of a node's free device room, whether or not the node has the CPU
for it, so its term is all of that room on every node (FGD's rule): it never steers a GPU pod
towards CPU, it only shifts every increase by the same amount for a given pod, which changes
which increases round to equal points (docs/performance/traces.md). Weighing shapes by
the device room they ask for instead was measured and rejected: it helps where pods mostly
share GPUs and costs several points where pods are pinned to models (docs/performance/traces.md).
The weights come from the whole workload when it is known in advance (`Workload.of`); learned
while pods arrive, the early weights rest on a handful of pods.

Increases are scored as FGD's scheduler plugin scores a node (`fgd_points`: 100 x
sigmoid(-increase), truncated, so a point is about 0.04 GPU near zero and wider further out). The
most points win; among equal points the caller's node order decides (on one node, the first way
of placing), and scored placement orders nodes pseudo-randomly for that (tie_order.py), as FGD's
runs effectively do. Equal points mostly mean "no common shape is hurt more here". The rule
before, filling the fuller node (`fuller_first`), is kept to measure against. Ranking by the
exact increase instead left the order to differences no pod can use (docs/performance/traces.md;
what each rule gained is in that page's history).

Every node is considered (ranking.py ranks them all at once; `choose` answers for one node).
The score only ranks; the allocator decides fit, so a node whose real allocation fails is
skipped and, when no ranked node takes the pod, the caller falls back to first fit.

How the formula is evaluated, and why it is cheap enough for every node of every pod. A node's
expected fragmentation is

    F = sum over kept shapes s, in order, of  p_s * total room       if its free CPU or memory
                                                                     cannot take s, or s asks
                                                                     for no device
                                              p_s * loss(GPU state, demand of s)   otherwise

(F = 0 when the node has no room). Evaluated as written, once per node state, it cost a pass
over the shapes and their units per node: pods of production traces
have nearly unique CPU and memory requests, so after-states never repeat and a pod cost about a
thousand passes. The pieces are now cached where they repeat:

- *GPU states.* The devices' part depends only on the node's kind (`NodeUnits.kind`: devices
  equal but for the node and pool they are on) and availability; the pair is numbered once
  (`gpu_id`), and its room, its loss per distinct device demand (`losses`), and its placement
  options per demand with the GPU state after each (`option_arrays`) are kept for the run: they
  depend on no workload.
- *Cells.* Free CPU and memory enter only through "is it below shape s's request", so only
  their position among the distinct amounts the kept shapes request matters: a cell
  (`ShapeTable`). F is cached per (GPU state, cell) for the workload version.
- *Exact floats.* A missing F is computed for many keys at once as the same products, added by
  a sequential cumulative sum in shape order: the same additions, in the same order, as the loop
  above, so values (and therefore points, ranks and ties) are bit for bit those of the
  straightforward evaluation (tests/unit/simulation/test_ranking.py compares them).
"""

from __future__ import annotations

import bisect
import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from dra_driver.allocator import ClusterSnapshot, Usage
from dra_driver.allocator.capacity import share_demand
from dra_driver.allocator.devices import Device
from dra_driver.allocator.quantities import Number
from dra_driver.allocator.search import CandidateIndex
from dra_driver.simulation.rooms import NodeUnits, Rooms, unit_rooms
from dra_driver.simulation.workload import Demand, PodShape, Workload

EPS = 1e-9
FGD_POINTS = 100
"""A node's score out of this many, as FGD's scheduler plugin scores (see `fgd_points`)."""
COVERAGE = 0.95
"""The shapes kept are the most common ones that together make up this share of the pods."""
MAX_SHAPES = 256
"""...and no more than this many, a guard against a long tail of rare shapes: a GPU state's
terms cost one pass per shape kept (the openb traces need at most 152)."""


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
    """Free device room on the node after the pod: among equal points, the fuller node wins."""
    points: int = 0
    """Fragmentation: the increase as FGD scores it (`fgd_points`), higher is better."""


State = tuple[int, tuple[float, ...], tuple[int, ...]]
"""A node as the score sees it: (device signature, availability per device, free resources)."""
GpuState = tuple[int, tuple[float, ...]]
"""The device part of a state, for any node of the kind (`NodeUnits.kind`): (kind,
availability per device). The index numbers these: GPU state ids."""
Option = tuple[tuple[int, ...], int]
"""One way to place a demand: (device indexes picked on the node, GPU state id after)."""


def fgd_points(increases: NDArray[np.float64]) -> NDArray[np.int64]:
    """FGD's score of each increase of expected fragmentation (in GPUs): `FGD_POINTS` times the
    logistic function of the decrease, truncated to an integer, as FGD's kube-scheduler plugin
    scores a node. Near zero a point is 0.04 GPU, and the further from zero the wider a point
    grows: increases that round to the same points are ties, which go to packing (the fuller
    node after placement), then node order. Exact ties alone (which is what rounding to 9
    places kept) left the order to differences far below anything a pod can use
    (docs/performance/traces.md)."""
    with np.errstate(over="ignore"):
        scores = np.floor(FGD_POINTS / (1.0 + np.exp(np.asarray(increases, dtype=np.float64))))
    result: NDArray[np.int64] = scores.astype(np.int64)
    return result


def int_array(values: Sequence[int]) -> NDArray[Any]:
    """Quantities as an array that compares exactly: int64 when they fit, else Python ints."""
    try:
        return np.array(values, dtype=np.int64)
    except OverflowError:
        return np.array(values, dtype=object)


class PerGpu:
    """One value per GPU state id, in an array grown as states are numbered (`fill` marks a
    value not computed yet)."""

    def __init__(self, dtype: type[np.generic], fill: float) -> None:
        self.fill = fill
        self.data: NDArray[Any] = np.full(0, fill, dtype=dtype)

    def at(self, size: int) -> NDArray[Any]:
        have = len(self.data)
        if have < size:
            grown = np.full(max(2 * have, size, 1024), self.fill, dtype=self.data.dtype)
            grown[:have] = self.data
            self.data = grown
        return self.data


class ShapeTable:
    """The shapes kept for one workload version, laid out so that a node's expected
    fragmentation is a lookup: (GPU state id, CPU/memory cell) -> value.

    A shape's node requests enter the formula only through "does the node's free CPU/memory
    fall short of them", so the free resources matter only through where they lie among the
    distinct amounts the kept shapes request: a *cell* numbers those positions (per resource,
    how many of its distinct amounts are at most the free amount), and `fail[cell, s]` says
    whether shape `s` cannot fit for resources in that cell. The device part of each shape's
    term depends only on the GPU state and the shape's device demand (`FragmentationIndex.
    losses`). A value is the shapes' terms, each replaced by `p * total room` where the cell
    fails the shape, added in shape order exactly as the straightforward loop adds them (numpy's
    cumulative sum is sequential, so the floats are bit for bit the same)."""

    def __init__(
        self,
        weighted: Sequence[tuple[PodShape, float]],
        names: Sequence[str],
        demand_ids: Sequence[int],
    ) -> None:
        self.weighted = list(weighted)
        self.p = np.array([p for _, p in self.weighted], dtype=np.float64)
        by_demand: dict[int, list[int]] = {}
        for s, did in enumerate(demand_ids):
            if did >= 0:
                by_demand.setdefault(did, []).append(s)
        self.by_demand = [(did, np.array(shapes)) for did, shapes in by_demand.items()]
        """(demand id, the shapes with that demand); a shape without devices fails every cell."""
        requested = [dict(shape.requests) for shape, _ in self.weighted]
        self.thresholds: list[list[int]] = []
        self.arrays: list[NDArray[Any]] = []
        self.strides: list[int] = []
        stride = 1
        for name in names:
            amounts = sorted({r[name] for r in requested if name in r})
            self.thresholds.append(amounts)
            self.arrays.append(int_array(amounts))
            self.strides.append(stride)
            stride *= len(amounts) + 1
        self.cells = stride
        fail = np.zeros((self.cells, len(self.weighted)), dtype=bool)
        numbers = np.arange(self.cells)
        for name, amounts, step in zip(names, self.thresholds, self.strides, strict=True):
            ranks = (numbers // step) % (len(amounts) + 1)
            position = {amount: k for k, amount in enumerate(amounts)}
            # A shape fails on `name` when it asks more than is free: its amount's position is
            # at or past the count of amounts at most the free amount. -1: not asked.
            where = np.array([position[r[name]] if name in r else -1 for r in requested])
            if len(where):
                fail |= where[None, :] >= ranks[:, None]
        # A shape without devices can use none of the free device room, CPU or not (FGD).
        fail[:, [s for s, did in enumerate(demand_ids) if did < 0]] = True
        self.fail = fail
        self.values: dict[int, float] = {}
        """(GPU state id * cells + cell) -> expected fragmentation."""

    def cell(self, free: Sequence[int]) -> int:
        return sum(
            bisect.bisect_right(amounts, f) * step
            for amounts, f, step in zip(self.thresholds, free, self.strides, strict=True)
        )

    def cells_of(self, free: Sequence[NDArray[Any]]) -> NDArray[np.int64]:
        """`cell` for many nodes at once: `free` holds one array per resource name."""
        if any(column.dtype == object for column in free):
            rows = zip(*(column.tolist() for column in free), strict=True)
            return np.array([self.cell(row) for row in rows], dtype=np.int64)
        out = np.zeros(len(free[0]) if free else 0, dtype=np.int64)
        for amounts, column, step in zip(self.arrays, free, self.strides, strict=True):
            if len(amounts):
                out += np.searchsorted(amounts, column, side="right").astype(np.int64) * step
        return out


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
        self.max_shapes: int | None = MAX_SHAPES
        """The most shapes kept (None: every shape up to `COVERAGE`); set before the first
        score, since kept shapes are chosen when the workload's distribution is read."""
        self._candidates = CandidateIndex(snapshot)
        self._matches: dict[
            tuple[str, tuple[object, ...]], tuple[tuple[tuple[int, float], ...], ...]
        ] = {}
        self._conflicts: dict[int, tuple[frozenset[int], ...]] = {}
        """Per node kind (whose layout holds each device's pool and counters)."""
        self._version = -1
        self.table = ShapeTable([], self.names, [])
        self._states: dict[str, tuple[object, State, int]] = {}
        self._gpu_ids: dict[GpuState, int] = {}
        self._gpu_states: list[GpuState] = []
        self._node_of: dict[int, str] = {}
        """Per node kind, a node of the kind: it does the GPU work for all of them."""
        self._kind_matches: dict[tuple[int, int], tuple[tuple[tuple[int, float], ...], ...]] = {}
        """(kind, demand id) -> `_least_avail`."""
        self._room: list[float] = []
        """Per GPU state id: the free device room (sum of its units' rooms)."""
        self._room_array = PerGpu(np.float64, 0.0)
        self._rooms_filled = 0
        """How much of `_room` the array holds: rooms are read for every node of a ranking."""
        self._unit_rooms: list[list[float]] = []
        self._demand_ids: dict[tuple[object, ...], int] = {}
        self._demands: list[Demand] = []
        """Demands numbered: their keys are deep tuples, slow to hash per node."""
        self._option_count: dict[int, PerGpu] = {}
        """Per demand id, per GPU state id: how many options (-1: not computed yet)."""
        self._option_after: dict[int, list[PerGpu]] = {}
        """Per demand id, per option number: the GPU state id after it (-1: none)."""
        self._picked: dict[tuple[int, int], tuple[tuple[int, ...], ...]] = {}
        """(GPU state id, demand id) -> the device indexes each option picks."""
        self._losses: dict[int, PerGpu] = {}
        """Per demand id, per GPU state id: the room a shape with that demand cannot use."""

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

    def _least_avail(self, kind: int, demand_id: int) -> tuple[tuple[tuple[int, float], ...], ...]:
        """Per unit of a node of `kind`: (device index, the least availability at which it
        still takes the demand: its size less EPS) for the devices the demand's selectors
        accept."""
        found = self._kind_matches.get((kind, demand_id))
        if found is None:
            matched = self.matching(self._node_of[kind], self._demands[demand_id])
            found = tuple(tuple((i, size - EPS) for i, size in unit) for unit in matched)
            self._kind_matches[(kind, demand_id)] = found
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
        """Per device, the other devices of its pool that consume a counter it consumes. Found
        through each counter's consumers: comparing every pair cost a MIG-published node of 8
        H100s (248 devices) 60,000 set intersections."""
        found = self._conflicts.get(units.kind)
        if found is None:
            consumers: dict[tuple[int, int], list[int]] = {}
            for i, device in enumerate(units.devices):
                for counter, _ in device.consumes:
                    consumers.setdefault((device.pool_index, counter), []).append(i)
            found = tuple(
                frozenset(
                    j
                    for counter, _ in device.consumes
                    for j in consumers[(device.pool_index, counter)]
                    if j != i
                )
                for i, device in enumerate(units.devices)
            )
            self._conflicts[units.kind] = found
        return found

    # -- state ------------------------------------------------------------------------------

    def state(self, node: str, free: Mapping[str, int]) -> State:
        """Cached per node until its device usage or its free resources change."""
        return self.state_and_gpu(node, free)[0]

    def state_and_gpu(self, node: str, free: Mapping[str, int]) -> tuple[State, int]:
        """The node's state and its GPU state id."""
        stamp = (self.usage.node_version(node), tuple(free.get(n, 0) for n in self.names))
        cached = self._states.get(node)
        if cached is not None and cached[0] == stamp:
            return cached[1], cached[2]
        units = self.rooms.node(node)
        avail = self.rooms.availability(self.usage, node)
        state = (units.signature, avail, stamp[1])
        gpu = self.gpu_id(node, units, avail)
        self._states[node] = (stamp, state, gpu)
        return state, gpu

    def gpu_id(self, node: str, units: NodeUnits, avail: Sequence[float]) -> int:
        """The id of (the node's kind, `avail`): numbered once, kept for the run."""
        key = (units.kind, tuple(avail))
        found = self._gpu_ids.get(key)
        if found is None:
            found = self._gpu_ids[key] = len(self._gpu_states)
            self._gpu_states.append(key)
            self._node_of.setdefault(units.kind, node)
            rooms = unit_rooms(units, key[1])
            self._unit_rooms.append(rooms)
            self._room.append(sum(rooms))
        return found

    @property
    def states_known(self) -> int:
        """GPU states numbered so far (each kept for the run, with what was worked out for it)."""
        return len(self._gpu_states)

    def room(self, gpu: int) -> float:
        return self._room[gpu]

    def rooms_of(self, gpus: NDArray[np.int64]) -> NDArray[np.float64]:
        size = len(self._room)
        data = self._room_array.at(size)
        if self._rooms_filled < size:
            data[self._rooms_filled : size] = self._room[self._rooms_filled :]
            self._rooms_filled = size
        result: NDArray[np.float64] = data[gpus]
        return result

    def demand_id(self, demand: Demand) -> int:
        found = self._demand_ids.get(demand.key)
        if found is None:
            found = self._demand_ids[demand.key] = len(self._demands)
            self._demands.append(demand)
            self._option_count[found] = PerGpu(np.int64, -1)
            self._option_after[found] = []
            self._losses[found] = PerGpu(np.float64, np.nan)
        return found

    def refresh(self) -> None:
        """Take the workload's current shapes when it was refreshed since the last call."""
        if self._version != self.workload.version:
            self._version = self.workload.version
            weighted = self.weighted(self.workload.distribution())
            ids = [-1 if s.demand is None else self.demand_id(s.demand) for s, _ in weighted]
            self.table = ShapeTable(weighted, self.names, ids)

    def weighted(
        self, distribution: Sequence[tuple[PodShape, float]]
    ) -> list[tuple[PodShape, float]]:
        """The most common shapes that make up `COVERAGE` of the pods (at most `max_shapes`,
        `MAX_SHAPES` unless set; None: no cap, as FGD's experiments keep them), renormalised.

        Pods that ask for no device count, as in FGD's experiments (13 % of the openb traces'
        pods): their term is the same on every node, so they do not steer, but they shift and
        scale each increase before it is rounded to points. Left out, they measured worse on
        two of the three openb traces; counted only where a node lacks their CPU, they steered
        GPU pods away from such nodes (docs/performance/traces.md)."""
        ranked = sorted(distribution, key=lambda i: -i[1])
        kept: list[tuple[PodShape, float]] = []
        mass = 0.0
        for shape, p in ranked:
            if mass >= COVERAGE or (self.max_shapes is not None and len(kept) >= self.max_shapes):
                break
            kept.append((shape, p))
            mass += p
        return [(shape, p / mass) for shape, p in kept] if mass > 0 else []

    # -- the fragmentation formula -------------------------------------------------------------

    def losses(self, gpus: NDArray[np.int64], demand_id: int) -> NDArray[np.float64]:
        """Per GPU state: what a shape with the demand cannot use of its room: all of it when
        fewer units than the demand's count have a matching device that still fits, else the
        room of the units that have none. Depends on no workload, so kept for the run."""
        column = self._losses[demand_id]
        data = column.at(len(self._gpu_states))
        missing = np.isnan(data[gpus])
        if missing.any():
            unknown = sorted(set(gpus[missing].tolist()))
            count = self._demands[demand_id].count
            for gpu in unknown:
                kind, avail = self._gpu_states[gpu]
                rooms = self._unit_rooms[gpu]
                usable = 0
                lost = 0.0
                for u, matched in enumerate(self._least_avail(kind, demand_id)):
                    for i, least in matched:
                        if avail[i] >= least:
                            usable += 1
                            break
                    else:
                        lost += rooms[u]
                data[gpu] = self._room[gpu] if usable < count else lost
        result: NDArray[np.float64] = data[gpus]
        return result

    def values(self, gpus: NDArray[np.int64], cells: NDArray[np.int64]) -> NDArray[np.float64]:
        """Expected fragmentation of the states (GPU state id, cell), element by element."""
        table = self.table
        keys = (gpus * table.cells + cells).tolist()
        out = list(map(table.values.get, keys))
        if None in out:
            self._compute(sorted({k for k, v in zip(keys, out, strict=True) if v is None}))
            known = table.values
            out = [known[k] if v is None else v for k, v in zip(keys, out, strict=True)]
        return np.array(out, dtype=np.float64)

    def _compute(self, keys: Sequence[int]) -> None:
        table = self.table
        numbers = np.array(keys, dtype=np.int64)
        gpus, cells = numbers // table.cells, numbers % table.cells
        total = self.rooms_of(gpus)
        if table.p.size == 0:
            sums = np.zeros(len(keys))
        else:
            full = table.p[None, :] * total[:, None]
            lost = np.zeros((len(keys), len(table.p)))
            for did, shapes in table.by_demand:
                lost[:, shapes] = self.losses(gpus, did)[:, None]
            terms = np.where(table.fail[cells], full, table.p[None, :] * lost)
            # Sequential, in shape order: the same additions as summing the terms in a loop.
            sums = np.cumsum(terms, axis=1)[:, -1]
            sums[total <= EPS] = 0.0
        for key, value in zip(keys, sums.tolist(), strict=True):
            table.values[key] = value

    def fragmentation(self, node: str, avail: Sequence[float], free: tuple[int, ...]) -> float:
        """Expected fragmentation of `node` with device availability `avail` and free
        resources `free` (per resource name), under the current table."""
        gpu = self.gpu_id(node, self.rooms.node(node), avail)
        return self._value(gpu, self.table.cell(free))

    def _value(self, gpu: int, cell: int) -> float:
        return float(self.values(np.array([gpu]), np.array([cell]))[0])

    # -- choosing -----------------------------------------------------------------------------

    def option_arrays(
        self, gpus: NDArray[np.int64], demand: Demand | None
    ) -> tuple[NDArray[np.int64], list[NDArray[np.int64]]]:
        """For each GPU state: how many ways there are to place `demand`, and per way number,
        the GPU state id after it (-1 past the count). A pod without devices has one way that
        changes nothing."""
        if demand is None:
            return np.ones(len(gpus), dtype=np.int64), [gpus]
        did = self.demand_id(demand)
        counts = self._option_count[did].at(len(self._gpu_states))
        missing = counts[gpus] < 0
        unknown = sorted(set(gpus[missing].tolist())) if missing.any() else []
        afters = self._option_after[did]
        for gpu in unknown:
            kind, avail = self._gpu_states[gpu]
            node = self._node_of[kind]
            units = self.rooms.node(node)
            picks = self._pick(node, avail, demand)
            after = [
                self.gpu_id(node, units, self._after(units, avail, p, demand, node)) for p in picks
            ]
            self._picked[(gpu, did)] = tuple(picks)
            while len(afters) < len(after):
                afters.append(PerGpu(np.int64, -1))
            for k, state in enumerate(after):
                afters[k].at(len(self._gpu_states))[gpu] = state
            self._option_count[did].at(len(self._gpu_states))[gpu] = len(after)
        counts = self._option_count[did].at(len(self._gpu_states))[gpus]
        most = int(counts.max()) if len(counts) else 0
        return counts, [afters[k].at(len(self._gpu_states))[gpus] for k in range(most)]

    def options(self, gpu: int, demand: Demand | None) -> tuple[Option, ...]:
        """The ways to place `demand` on a node in GPU state `gpu`: per way, the device indexes
        picked and the GPU state after."""
        counts, afters = self.option_arrays(np.array([gpu], dtype=np.int64), demand)
        return tuple(
            (self.picked(gpu, demand, k), int(afters[k][0])) for k in range(int(counts[0]))
        )

    def picked(self, gpu: int, demand: Demand | None, option: int) -> tuple[int, ...]:
        """The device indexes option number `option` picks (after `option_arrays` saw `gpu`)."""
        if demand is None:
            return ()
        return self._picked[(gpu, self.demand_id(demand))][option]

    def choose(
        self,
        node: str,
        free: Mapping[str, int],
        shape: PodShape,
        objective: Objective,
        fuller_first: bool = True,
    ) -> Choice | None:
        """The best way to put `shape` on `node` under `objective`, or None if it cannot fit.
        For fragmentation, the way with the most points, then (`fuller_first`) the least free
        room left, then the first. One node at a time; `ranking.NodeTable` ranks every node
        at once with the same pieces."""
        self.refresh()
        state, gpu = self.state_and_gpu(node, free)
        left = list(state[2])
        where = {n: i for i, n in enumerate(self.names)}
        for name, amount in shape.requests:
            i = where.get(name)
            if i is not None:
                if left[i] < amount:
                    return None
                left[i] -= amount
        options = self.options(gpu, shape.demand)
        if not options:
            return None
        units = self.rooms.node(node)
        if objective is Objective.FRAGMENTATION:
            before = self._value(gpu, self.table.cell(state[2]))
            afters = self.values(
                np.array([g for _, g in options], dtype=np.int64),
                np.full(len(options), self.table.cell(left), dtype=np.int64),
            )
            increases = afters - before
            points = fgd_points(increases).tolist()
            rooms = [self._room[g] if fuller_first else 0.0 for _, g in options]
            k = min(range(len(options)), key=lambda j: (-points[j], rooms[j], j))
            picked_ids = tuple(units.devices[i].id for i in options[k][0])
            return Choice(
                node,
                float(increases[k]),
                picked_ids,
                before,
                float(afters[k]),
                self._room[options[k][1]],
                int(points[k]),
            )
        best: tuple[float, tuple[int, ...]] | None = None
        for picked, after_gpu in options:
            room = self._room[after_gpu]
            if best is None or room < best[0] - EPS:
                best = (room, picked)
        assert best is not None
        room, picked = best
        return Choice(node, room, tuple(units.devices[i].id for i in picked), 0.0, room, room)

    def _pick(self, node: str, avail: Sequence[float], demand: Demand) -> list[tuple[int, ...]]:
        """Per unit, its smallest device that still fits; one option per distinct room left
        for a single device, the smallest `count` units for several."""
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
