"""Free device room per node, in units of "one physical device", for any driver's slices.

A node's devices fall into units: devices tied together by shared counters (a GPU's whole device,
its MIG placements, its consumable-capacity share device) form one unit; a device without
counters is a unit of its own. A device's *weight* is the largest share of its unit's counters
it consumes (1 for a whole GPU, 1/7 for a 1g MIG slice of seven). Its *availability* is the
weight it could still offer now: 0 when held exclusively or when its counters are taken, the
free fraction of its capacity when it is shared (consumable capacity), its weight when free. A
unit's room is its best device's availability. These are the quantities the fragmentation score
and the best-fit baseline compare across nodes; the allocator itself remains the judge of fit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dra_driver.allocator import ClusterSnapshot, Usage
from dra_driver.allocator.snapshot import Device


@dataclass(frozen=True, slots=True)
class NodeUnits:
    """The node's devices that take part in allocation, grouped into units."""

    devices: tuple[Device, ...]
    units: tuple[tuple[int, ...], ...]
    """Per unit, indexes into `devices`."""
    signature: int
    """Equal for nodes whose devices are equal up to names, so their scores can be shared."""


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


class Rooms:
    def __init__(self, snapshot: ClusterSnapshot) -> None:
        self.snapshot = snapshot
        self._nodes: dict[str, NodeUnits] = {}
        self._weights: dict[int, float] = {}
        self._signatures: dict[object, int] = {}

    def node(self, name: str) -> NodeUnits:
        found = self._nodes.get(name)
        if found is None:
            found = self._nodes[name] = self._build(name)
        return found

    def _build(self, name: str) -> NodeUnits:
        devices = tuple(self.snapshot.view(name).devices)
        units = counter_units(devices)
        shape = (
            tuple(
                (
                    repr(sorted((k, repr(v)) for k, v in d.raw.items())),
                    d.driver,
                    tuple(d.consumes),
                )
                for d in devices
            ),
            units,
        )
        signature = self._signatures.setdefault(shape, len(self._signatures))
        return NodeUnits(devices, units, signature)

    def weight(self, device: Device) -> float:
        found = self._weights.get(device.id)
        if found is None:
            totals = self.snapshot.pools[device.pool_index].counter_totals
            found = max(
                (float(a / totals[c]) for c, a in device.consumes if totals[c]), default=1.0
            )
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
        return tuple(self.available(usage, d) for d in self.node(name).devices)


def _free_fraction(usage: Usage, device: Device) -> float:
    consumed = usage.consumed_capacity.get(device.id) or {}
    fractions = [
        1.0 - float(consumed.get(name, 0) / rule.value)
        for name, rule in device.capacity.items()
        if rule.value
    ]
    return max(min(fractions, default=0.0), 0.0)


def unit_rooms(units: NodeUnits, avail: Sequence[float]) -> list[float]:
    return [max(avail[i] for i in unit) for unit in units.units]
