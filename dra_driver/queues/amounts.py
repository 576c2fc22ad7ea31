"""How much of a GPU an allocated device is, in the two units queues count.

`gpu` is GPU-equivalents: a whole GPU is 1; a MIG device is the share of its GPU's memory
slices it covers (a 3g.40gb device on an H100 is 4 of 8 slices: 0.5); a time-slice share is
the share of the memory-slice counters it consumes (1/R with R shares per GPU); a fractional
share is the compute it was given (`consumedCapacity.compute` over the device's compute).
These follow from the counters every device of this driver consumes (see the resource model),
so no table of shapes is kept here. `memory` is GPU memory in bytes: a device's own memory
counter when it consumes one (whole GPU, MIG), its consumed memory capacity (fractional share),
else its share of the GPU's memory (time-slice).

Devices of other drivers, and admin-access results (which take nothing from anyone), count
nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from api.device_type import DeviceType
from dra_driver.allocator.devices import Device
from dra_driver.allocator.quantities import quantity_value
from dra_driver.allocator.snapshot import ClusterSnapshot, Pool
from dra_driver.queues.spec import ZERO, Amounts

_SLICE_PREFIX = "memory-slice-"


def _counter_sets(pool: Pool, device: Device) -> set[str]:
    names = {index: key for key, index in pool.counter_index.items()}
    return {names[index][0] for index, _ in device.consumes if index in names}


def _set_total(pool: Pool, counter_set: str, match: str) -> float:
    total = 0.0
    for (set_name, counter), index in pool.counter_index.items():
        if set_name == counter_set and (
            counter.startswith(_SLICE_PREFIX) if match == _SLICE_PREFIX else counter == match
        ):
            total += float(pool.counter_totals[index])
    return total


def _consumed(pool: Pool, device: Device, match: str) -> float:
    names = {index: key for key, index in pool.counter_index.items()}
    used = 0.0
    for index, amount in device.consumes:
        counter = names.get(index, ("", ""))[1]
        if counter.startswith(_SLICE_PREFIX) if match == _SLICE_PREFIX else counter == match:
            used += float(amount)
    return used


def _capacity(device: Device, name: str) -> float | None:
    rule = device.capacity.get(f"{device.driver}/{name}")
    return None if rule is None else float(rule.value)


def device_amounts(snapshot: ClusterSnapshot, driver: str, result: Mapping[str, Any]) -> Amounts:
    """What one entry of `status.allocation.devices.results` takes from a queue's quota."""
    if result.get("driver") != driver or result.get("adminAccess"):
        return ZERO
    device = snapshot.device(driver, str(result.get("pool")), str(result.get("device")))
    if device is None:
        return ZERO  # gone from the slices: nothing left to count it against
    consumed = result.get("consumedCapacity")
    if device.allow_multiple and isinstance(consumed, Mapping):
        return _share_amounts(device, consumed)
    pool = snapshot.pool_of(device)
    sets = _counter_sets(pool, device)
    slices_total = sum(_set_total(pool, s, _SLICE_PREFIX) for s in sets)
    gpu = 1.0 if slices_total <= 0 else _consumed(pool, device, _SLICE_PREFIX) / slices_total
    memory_used = _consumed(pool, device, "memory")
    if memory_used > 0:
        return Amounts(gpu, memory_used)
    memory_total = sum(_set_total(pool, s, "memory") for s in sets)
    if memory_total > 0:
        return Amounts(gpu, gpu * memory_total)
    return Amounts(gpu, _capacity(device, "memory") or 0.0)


def _share_amounts(device: Device, consumed: Mapping[str, Any]) -> Amounts:
    where = f"{device.where}.consumedCapacity"
    compute_total = _capacity(device, "compute")
    compute = consumed.get("compute")
    gpu = 0.0
    if compute is not None and compute_total:
        gpu = float(quantity_value(compute, f"{where}.compute")) / compute_total
    memory = consumed.get("memory")
    memory_bytes = 0.0 if memory is None else float(quantity_value(memory, f"{where}.memory"))
    return Amounts(gpu, memory_bytes)


def allocation_amounts(
    snapshot: ClusterSnapshot,
    driver: str,
    allocation: Mapping[str, Any] | None,
    cache: dict[tuple[str, str], Amounts] | None = None,
) -> Amounts:
    """The sum over a claim's allocated devices. `cache` (one per snapshot) keeps what each
    whole device counts, which never changes while the snapshot lives; shares are computed each
    time, since what a share counts is in the result, not the device."""
    total = ZERO
    if not allocation:
        return total
    for result in (allocation.get("devices") or {}).get("results") or []:
        if cache is None or "consumedCapacity" in result or result.get("adminAccess"):
            total = total + device_amounts(snapshot, driver, result)
            continue
        key = (str(result.get("pool")), str(result.get("device")))
        amounts = cache.get(key)
        if amounts is None:
            amounts = cache[key] = device_amounts(snapshot, driver, result)
        total = total + amounts
    return total


def capacity(snapshot: ClusterSnapshot, driver: str, nodes: set[str] | None = None) -> Amounts:
    """Every GPU the driver publishes (its whole-GPU devices), on `nodes` when given: the
    denominator of dominant shares."""
    total = ZERO
    for pool in snapshot.pools:
        if pool.driver != driver or pool.problem is not None:
            continue
        for device in pool.devices:
            kind = device.attribute(f"{driver}/type")
            if kind is None or kind[1] != DeviceType.GPU:
                continue
            if nodes is not None and device.node_name not in nodes:
                continue
            memory = _capacity(device, "memory") or 0.0
            total = total + Amounts(1.0, memory)
    return total
