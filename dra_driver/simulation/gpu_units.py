"""How many GPUs an input publishes, and how much of them is held or asked for, in whole GPUs.

The report of `simulate --report` must read the same whichever way a GPU is published: as one
device, as a whole device and a shared (consumable-capacity) device that exclude each other
through a counter, or as a whole device beside its MIG placements and time-slice shares. So a
GPU is a *unit* as rooms.py groups them (devices tied together by shared counters; a device
without counters is a unit of its own), and the capacity is the number of units in the pools
that can be used (a pool with a problem offers nothing). Every device counts: an input that
also publishes other kinds of device (NICs) counts those as GPUs too.

What a device takes of its GPU is measured on the unit's *partition counters*: counters whose
names differ only in a trailing number are parts of one resource (this driver's
`memory-slice-<i>`), and the resource with the most parts is the partition (several with as
many parts: the largest fraction among them). A MIG device takes the slices it covers (a
3g.40gb of an H100: 4 of 8, so 0.5), a time-slice share one of R shares of every slice (1/R),
a whole GPU all of them; a device taking none of them counts its largest fraction of any
counter. Measuring one resource, not the largest share of any counter as rooms.py's weight
does (what a device *blocks*, for fragmentation), is what keeps a GPU's devices in use from
adding up to more than the GPU: the counters never let them take more than the partition. A
shared device holds its share times the largest fraction of any capacity its allocations
consume together; what one unit holds is capped at one GPU all the same.

A claim asks, per request, what its preferred (`firstAvailable`: first) alternative would take:
`count` times the smallest share that a device the request accepts would take (for a shared
device, the share its capacity request consumes); an `All` request, the devices it accepts on
the node where they weigh least. Admin access asks nothing, and so does a request no device in
the input accepts, or a claim that cannot be planned (its DeviceClass is missing).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dra_driver.allocator import AllocationError, ClusterSnapshot, Usage
from dra_driver.allocator.capacity import large_enough, share_demand
from dra_driver.allocator.claims import ALL, Alternative, plan_claim
from dra_driver.allocator.devices import Device
from dra_driver.allocator.search import CandidateIndex
from dra_driver.simulation.rooms import consumed_fraction, counter_units, unit_shares


class GpuUnits:
    def __init__(self, snapshot: ClusterSnapshot) -> None:
        self.snapshot = snapshot
        usable = [d for pool in snapshot.pools if pool.problem is None for d in pool.devices]
        units = counter_units(usable)
        names: dict[int, dict[int, tuple[str, str]]] = {}
        self.capacity = float(len(units))
        """The number of GPUs (units) in the input."""
        self._unit: dict[int, int] = {}
        self._share: dict[int, float] = {}
        self._devices: dict[int, Device] = {}
        for number, members in enumerate(units):
            devices = [usable[i] for i in members]
            for device, share in zip(devices, unit_shares(snapshot, devices, names), strict=True):
                self._unit[device.id] = number
                self._share[device.id] = share
                self._devices[device.id] = device
        self._asks: dict[tuple[object, ...], float] = {}

    def share(self, device: Device) -> float:
        """What the device takes of its GPU when held (0 for a device in an unusable pool)."""
        return self._share.get(device.id, 0.0)

    def held(self, usage: Usage) -> float:
        """GPUs that allocations hold now: per unit, the shares of its devices in use."""
        per_unit: dict[int, float] = {}
        for device_id in usage.exclusive:
            unit = self._unit.get(device_id)
            if unit is not None:
                per_unit[unit] = per_unit.get(unit, 0.0) + self._share[device_id]
        for device_id in usage.shares:
            unit = self._unit.get(device_id)
            if unit is None:
                continue
            device = self._devices[device_id]
            fraction = consumed_fraction(device, usage.consumed_capacity.get(device_id) or {})
            per_unit[unit] = per_unit.get(unit, 0.0) + self._share[device_id] * fraction
        return sum(min(held, 1.0) for held in per_unit.values())

    def asked(self, claims: Sequence[Mapping[str, Any]]) -> float:
        """GPUs the claims ask for (see the module docstring)."""
        total = 0.0
        for claim in claims:
            try:
                plan = plan_claim(self.snapshot, claim)
            except AllocationError:
                continue
            for request in plan.requests:
                total += self._alternative(request.alternatives[0])
        return total

    def _alternative(self, alt: Alternative) -> float:
        if alt.admin_access:
            return 0.0
        key = (
            alt.device_class.name,
            alt.selector_key,
            tuple(sorted((k, str(v)) for k, v in alt.capacity.items())),
            alt.mode,
            alt.count,
        )
        found = self._asks.get(key)
        if found is None:
            found = self._asks[key] = self._measure(alt)
        return found

    def _measure(self, alt: Alternative) -> float:
        index = CandidateIndex(self.snapshot)
        smallest: float | None = None
        per_node: list[float] = []
        for node in self.snapshot.node_names():
            shares = [
                share
                for device, verdict in index.candidates(self.snapshot.view(node), alt)
                if verdict is True and (share := self._ask_of(device, alt)) is not None
            ]
            if shares:
                per_node.append(sum(shares))
                smallest = min(shares) if smallest is None else min(smallest, *shares)
        if alt.mode == ALL:
            return min(per_node, default=0.0)
        return alt.count * (smallest or 0.0)

    def _ask_of(self, device: Device, alt: Alternative) -> float | None:
        """What one pick of `device` by `alt` would take of its GPU; None when it cannot serve."""
        if device.id not in self._share:
            return None
        if device.allow_multiple:
            demand = share_demand(device, alt.capacity)
            if demand is None:
                return None
            fraction = consumed_fraction(device, demand)
            return None if fraction > 1.0 else self._share[device.id] * fraction
        if alt.capacity and not large_enough(device, alt.capacity):
            return None
        return self._share[device.id]
