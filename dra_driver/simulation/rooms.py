"""Free device room per node, in units of "one physical device", for any driver's slices.

A node's devices fall into units: devices tied together by shared counters (a GPU's whole device,
its MIG placements, its consumable-capacity share device) form one unit; a device without
counters is a unit of its own. A device's *weight* is what it takes of its unit, measured on the
unit's partition counters (`unit_shares`): 1 for a whole GPU, 1/8 for a 1g MIG slice of an H100
whose memory is cut in eight slices. Its *availability* is the
weight it could still offer now: 0 when held exclusively or when its counters are taken, the
free fraction of its capacity when it is shared (consumable capacity), its weight when free. A
unit's room is its best device's availability. These are the quantities the fragmentation score
and the best-fit baseline compare across nodes; the allocator itself remains the judge of fit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, repeat

from dra_driver.allocator import ClusterSnapshot, Usage
from dra_driver.allocator.devices import Device
from dra_driver.allocator.quantities import Number
from dra_driver.allocator.snapshot import Pool


@dataclass(frozen=True, slots=True)
class NodeUnits:
    """The node's devices that take part in allocation, grouped into units."""

    devices: tuple[Device, ...]
    units: tuple[tuple[int, ...], ...]
    """Per unit, indexes into `devices`."""
    signature: int
    """Equal for nodes whose devices are equal (the node's states are grouped by it)."""
    kind: int
    """Equal for nodes whose devices are equal but for the node and pool they are on, so the
    work of scoring one node's device state serves every node of the kind."""


def counter_units(devices: Sequence[Device]) -> tuple[tuple[int, ...], ...]:
    """Indexes into `devices`, grouped into units: devices that consume a common counter of
    their pool, directly or through other devices, are one unit (one physical GPU)."""
    parent = list(range(len(devices)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[tuple[int, int], int] = {}
    for i, device in enumerate(devices):
        for counter, _ in device.consumes:
            j = owner.setdefault((device.pool_index, counter), i)
            parent[root(i)] = root(j)
    groups: dict[int, list[int]] = {}
    for i in range(len(devices)):
        groups.setdefault(root(i), []).append(i)
    return tuple(tuple(g) for g in groups.values())


_Part = tuple[tuple[int, ...], tuple[int, ...], bool]
"""A unit's device indexes on its node, their device ids, and whether its pools are bound to
that node alone."""


class Rooms:
    def __init__(self, snapshot: ClusterSnapshot) -> None:
        self.snapshot = snapshot
        self._nodes: dict[str, NodeUnits] = {}
        self._weights: dict[int, float] = {}
        self._names: dict[int, dict[int, tuple[str, str]]] = {}
        self._signatures: dict[object, int] = {}
        self._kinds: dict[object, int] = {}
        self._parts: dict[str, tuple[list[_Part], bool]] = {}
        """Node → its units' parts (`_unit_parts`), and whether the units, one after another,
        list its devices in order."""
        self._availability: dict[str, tuple[Usage, list[int], list[tuple[float, ...]]]] = {}
        """Node → the usage it was read from, each unit's touch count then, and its values."""
        self._unique: frozenset[object] | None = None

    def node(self, name: str) -> NodeUnits:
        found = self._nodes.get(name)
        if found is None:
            found = self._nodes[name] = self._build(name)
        return found

    def _build(self, name: str) -> NodeUnits:
        devices = tuple(self.snapshot.view(name).devices)
        units = counter_units(devices)
        for unit in units:
            members = [devices[i] for i in unit]
            for device, share in zip(
                members, unit_shares(self.snapshot, members, self._names), strict=True
            ):
                self._weights[device.id] = share
        shape = (
            tuple((d.content(), d.driver, tuple(d.consumes)) for d in devices),
            units,
        )
        signature = self._signatures.setdefault(shape, len(self._signatures))
        pools: dict[int, int] = {}
        for device in devices:
            pools.setdefault(device.pool_index, len(pools))
        unique = self._node_unique()
        layout = (
            tuple(
                (
                    _without(d.layout(), unique),
                    tuple(d.consumes),
                    pools[d.pool_index],
                    self._weights[d.id],
                )
                for d in devices
            ),
            tuple(
                (
                    tuple(sorted(self.snapshot.pools[p].counter_index.items())),
                    tuple(self.snapshot.pools[p].counter_totals),
                )
                for p in pools
            ),
            units,
        )
        kind = self._kinds.setdefault(layout, len(self._kinds))
        return NodeUnits(devices, units, signature, kind)

    def _node_unique(self) -> frozenset[object]:
        """Attributes whose every value is published on one node only, and which appear on
        several nodes: a GPU's UUID, the NVLink domain a node's GPUs share. They name a
        particular device or node, not a kind of hardware, so a node's kind leaves them out:
        else no two nodes were ever of one kind, and the placement's per-kind work (which
        devices a demand matches, its options, the value of each state) was done again for
        every node (a second per pod on a controller's first pass over 100 nodes). A selector
        that reads one of them is then scored as if on the kind's first node; the allocator
        still checks the node's own devices exactly."""
        if self._unique is None:
            nodes_of: dict[tuple[object, object], set[str]] = {}
            for device in self.snapshot.devices:
                if device.node_name is None:
                    continue
                attributes = device.layout()[2]
                if not isinstance(attributes, tuple):
                    continue
                for item in attributes:
                    nodes_of.setdefault((item[0], item[-1]), set()).add(device.node_name)
            spread: dict[object, set[str]] = {}
            shared: set[object] = set()
            for (name, _), where in nodes_of.items():
                spread.setdefault(name, set()).update(where)
                if len(where) > 1:
                    shared.add(name)
            self._unique = frozenset(
                name for name, where in spread.items() if len(where) > 1 and name not in shared
            )
        return self._unique

    def weight(self, device: Device) -> float:
        """What the device takes of its unit (its GPU), on the unit's partition counters (see
        unit_shares): a MIG 1g slice of eight weighs 1/8, not the 1 its own slice counter
        says. A device of a node is weighed with the rest of its node; one bound to no single
        node (network-attached) on its own."""
        found = self._weights.get(device.id)
        if found is None:
            if device.node_name is not None:
                self.node(device.node_name)
                found = self._weights.get(device.id)
            if found is None:
                found = unit_shares(self.snapshot, [device], self._names)[0]
                self._weights[device.id] = found
        return found

    def available(self, usage: Usage, device: Device) -> float:
        if device.id in usage.exclusive:
            return 0.0
        if device.id in usage.shares:
            return self.weight(device) * _free_fraction(usage, device)
        used = usage.counters.get(device.pool_index)
        if used is not None:
            totals = self.snapshot.pools[device.pool_index].counter_totals
            for counter, amount in device.consumes:
                if used[counter] + amount > totals[counter]:
                    return 0.0
        return self.weight(device)

    def availability(self, usage: Usage, name: str) -> tuple[float, ...]:
        """`available` of each of the node's devices. Only the units (GPUs) some device of
        which was recorded or released since the last call are read again: what a device has
        free depends only on its own unit's devices, whose counters it shares (a unit whose
        pool spans nodes is always read, since devices elsewhere share its counters). The
        controller reads a node of 248 MIG-published devices after every placement on it."""
        units = self.node(name)
        found = self._parts.get(name)
        if found is None:
            parts = self._unit_parts(units)
            order = [i for indexes, _, _ in parts for i in indexes]
            found = self._parts[name] = (parts, order == list(range(len(units.devices))))
        parts, in_order = found
        cached = self._availability.get(name)
        if cached is not None and cached[0] is not usage:
            cached = None
        touched = usage.device_touches.get
        stamps: list[int] = []
        values: list[tuple[float, ...]] = []
        for k, (indexes, ids, local) in enumerate(parts):
            stamp = sum(map(touched, ids, repeat(0, len(ids)))) if local else -1
            if cached is not None and stamp >= 0 and cached[1][k] == stamp:
                values.append(cached[2][k])
            else:
                values.append(tuple(self.available(usage, units.devices[i]) for i in indexes))
            stamps.append(stamp)
        self._availability[name] = (usage, stamps, values)
        if in_order:  # the units list the devices in order: no reshuffle
            return tuple(chain.from_iterable(values))
        out = [0.0] * len(units.devices)
        for (indexes, _, _), unit_values in zip(parts, values, strict=True):
            for i, value in zip(indexes, unit_values, strict=True):
                out[i] = value
        return tuple(out)

    def _unit_parts(self, units: NodeUnits) -> list[_Part]:
        """Per unit: its device indexes, their device ids, and whether its pools are bound to
        this node alone."""
        parts = []
        for unit in units.units:
            members = [units.devices[i] for i in unit]
            local = all(
                (nodes := self.snapshot.pool_nodes(d.pool_index)) is not None and len(nodes) == 1
                for d in members
            )
            parts.append((tuple(unit), tuple(d.id for d in members), local))
        return parts


def _free_fraction(usage: Usage, device: Device) -> float:
    consumed = usage.consumed_capacity.get(device.id) or {}
    return max(1.0 - consumed_fraction(device, consumed), 0.0)


def consumed_fraction(device: Device, consumed: Mapping[str, Number]) -> float:
    """The largest fraction of any of the device's capacities that `consumed` takes (1 for a
    device without capacities: sharing it leaves nothing measurable to others)."""
    fractions = [
        float(consumed.get(name, 0) / rule.value)
        for name, rule in device.capacity.items()
        if rule.value
    ]
    return max(fractions, default=1.0)


def unit_rooms(units: NodeUnits, avail: Sequence[float]) -> list[float]:
    return [max(avail[i] for i in unit) for unit in units.units]


def unit_shares(
    snapshot: ClusterSnapshot,
    devices: Sequence[Device],
    names: dict[int, dict[int, tuple[str, str]]],
) -> list[float]:
    """Each device's share of the unit, measured on the unit's partition counters; `names`
    caches each pool's counter index → (counter set, counter)."""
    groups: dict[tuple[int, str, str], set[int]] = {}
    for device in devices:
        pool_names = names.get(device.pool_index)
        if pool_names is None:
            pool = snapshot.pools[device.pool_index]
            pool_names = names[device.pool_index] = counter_names(pool)
        for counter, _ in device.consumes:
            counter_set, name = pool_names[counter]
            base = name.rstrip("0123456789")
            groups.setdefault((device.pool_index, counter_set, base), set()).add(counter)
    if not groups:
        return [1.0 for _ in devices]
    most = max(len(counters) for counters in groups.values())
    partition = [(key[0], counters) for key, counters in groups.items() if len(counters) == most]
    shares: list[float] = []
    for device in devices:
        totals = snapshot.pools[device.pool_index].counter_totals
        taken = dict(device.consumes)
        fractions = [
            sum(float(taken.get(c, 0)) for c in counters) / whole
            for pool_index, counters in partition
            if pool_index == device.pool_index
            and (whole := sum(float(totals[c]) for c in counters)) > 0
        ]
        share = max(fractions, default=0.0)
        if share <= 0:
            share = max(
                (float(amount / totals[c]) for c, amount in device.consumes if totals[c]),
                default=1.0,
            )
        shares.append(share)
    return shares


def counter_names(pool: Pool) -> dict[int, tuple[str, str]]:
    return {index: key for key, index in pool.counter_index.items()}


def _without(layout: tuple[object, ...], names: frozenset[object]) -> tuple[object, ...]:
    """A device's layout without the attributes named in `names`."""
    attributes = layout[2]
    if not names or not isinstance(attributes, tuple):
        return layout
    kept = tuple(item for item in attributes if item[0] not in names)
    return (*layout[:2], kept, *layout[3:])
