"""What is already taken in the cluster: in-use devices, counter consumption, consumed capacity.

Built from the allocations of every claim; updated as the allocator records new allocations (and
releases, for simulations with departures). Admin-access results take nothing. A device in use
consumes its counters once, however many shares of it exist.

Caches kept here for others, each invalidated by the change that makes it stale:
- `node_versions` and the change log `changes`: bumped and appended on every change of a node's
  usage, so the placer's "does not fit" answers and cursors (placement.py) expire;
- `derived`: what scoring works out from one counter group under this usage alone, dropped
  when a counter of that group changes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from dra_driver.allocator.devices import Device
from dra_driver.allocator.quantities import Number, quantity_value
from dra_driver.allocator.snapshot import ClusterSnapshot


class Usage:
    def __init__(self) -> None:
        self.exclusive: dict[int, int] = {}
        """Device → how many claims hold it exclusively: more than one only when two allocators
        raced, and releasing one of them must not free the device for the other."""
        self.shares: dict[int, int] = {}
        self.consumed_capacity: dict[int, dict[str, Number]] = {}
        self.counters: dict[int, list[Number]] = {}
        self.over_committed: set[int] = set()
        """Pools in which some counter is used beyond its total (slices shrank, or allocators
        raced): kept as counters change, because the search asks on every candidate device."""
        self.node_versions: defaultdict[str, int] = defaultdict(int)
        """Bumped whenever usage on a node changes, so cached "does not fit" answers expire."""
        self.unknown: int = 0
        self.changes: list[str] = []
        """The names whose version was bumped, in order ("*" for devices of no single node), so
        a placer can tell which nodes changed since it last looked. Cleared when long, which
        `changes_epoch` records."""
        self.changes_epoch = 0
        self.device_touches: dict[int, int] = {}
        """Device → how many times an allocation of it was recorded or released: a GPU's
        devices whose counts did not move are as available as they were (the replay's room
        per GPU is read again only for GPUs that changed, `Rooms.availability`)."""
        self.derived: dict[int, dict[tuple[int, ...], dict[object, Any]]] = {}
        """Pool → counter group → what scoring derived from those counters under this usage
        alone (the group's free room, the loss of each device whose neighbourhood it is).
        Dropped whenever a counter of the group changes (`_consume_counters`, the only place
        counters change), so it is never stale; a placement on one GPU of a node leaves the
        figures of its other GPUs for the next searches there."""
        self._derived_of: dict[int, dict[int, set[tuple[int, ...]]]] = {}
        """Pool → counter → the groups in `derived` that contain it."""

    @classmethod
    def from_claims(cls, snapshot: ClusterSnapshot, claims: Iterable[Mapping[str, Any]]) -> Usage:
        usage = cls()
        for claim in claims:
            allocation = (claim.get("status") or {}).get("allocation")
            if allocation:
                usage.record(snapshot, allocation)
        return usage

    def copy(self) -> Usage:
        other = Usage()
        other.exclusive = dict(self.exclusive)
        other.shares = dict(self.shares)
        other.consumed_capacity = {k: dict(v) for k, v in self.consumed_capacity.items()}
        other.counters = {k: list(v) for k, v in self.counters.items()}
        other.over_committed = set(self.over_committed)
        other.node_versions = defaultdict(int, self.node_versions)
        other.unknown = self.unknown
        other.device_touches = dict(self.device_touches)
        return other

    def in_use(self, device: Device) -> bool:
        return device.id in self.exclusive or device.id in self.shares

    def counter_used(self, pool_index: int, counter: int) -> Number:
        used = self.counters.get(pool_index)
        return 0 if used is None else used[counter]

    def record(self, snapshot: ClusterSnapshot, allocation: Mapping[str, Any]) -> None:
        self._apply(snapshot, allocation, +1)

    def release(self, snapshot: ClusterSnapshot, allocation: Mapping[str, Any]) -> None:
        self._apply(snapshot, allocation, -1)

    def _apply(self, snapshot: ClusterSnapshot, allocation: Mapping[str, Any], sign: int) -> None:
        results = (allocation.get("devices") or {}).get("results") or []
        for i, result in enumerate(results):
            if result.get("adminAccess"):
                continue
            device = snapshot.device(
                str(result.get("driver")), str(result.get("pool")), str(result.get("device"))
            )
            if device is None:
                # Allocated from a device that is no longer published: nothing left to take.
                self.unknown += sign
                continue
            was_in_use = self.in_use(device)
            if result.get("shareID"):
                self.shares[device.id] = self.shares.get(device.id, 0) + sign
                if self.shares[device.id] <= 0:
                    del self.shares[device.id]
                consumed = self.consumed_capacity.setdefault(device.id, {})
                for name, amount in (result.get("consumedCapacity") or {}).items():
                    qualified = name if "/" in name else f"{device.driver}/{name}"
                    value = quantity_value(
                        amount, f"allocation result {i}: consumedCapacity[{name}]"
                    )
                    consumed[qualified] = consumed.get(qualified, 0) + sign * value
            else:
                held = self.exclusive.get(device.id, 0) + sign
                if held > 0:
                    self.exclusive[device.id] = held
                else:
                    self.exclusive.pop(device.id, None)
            if was_in_use != self.in_use(device):
                self._consume_counters(snapshot, device, 1 if not was_in_use else -1)
            self.device_touches[device.id] = self.device_touches.get(device.id, 0) + 1
            self._touch(snapshot, device)

    def _consume_counters(self, snapshot: ClusterSnapshot, device: Device, sign: int) -> None:
        if not device.consumes:
            return
        pool = snapshot.pool_of(device)
        used = self.counters.get(pool.index)
        if used is None:
            used = self.counters[pool.index] = [0] * len(pool.counter_totals)
        for counter, amount in device.consumes:
            used[counter] += sign * amount
        groups = self.derived.get(pool.index)
        if groups:
            containing = self._derived_of[pool.index]
            for counter, _ in device.consumes:
                for group in containing.pop(counter, ()):
                    groups.pop(group, None)
        totals = pool.counter_totals
        if sign > 0 and pool.index not in self.over_committed:
            # No counter was over and only these grew: only they can be over now. (Amounts are
            # not negative; a negative one falls back to comparing every counter.)
            if any(amount < 0 for _, amount in device.consumes):
                self._recheck(pool.index, used, totals)
            elif any(used[counter] > totals[counter] for counter, _ in device.consumes):
                self.over_committed.add(pool.index)
        else:
            self._recheck(pool.index, used, totals)

    def _recheck(self, pool: int, used: list[Number], totals: list[Number]) -> None:
        """Whether any counter of the pool is used beyond its total, comparing them all."""
        if any(u > total for u, total in zip(used, totals, strict=True)):
            self.over_committed.add(pool)
        else:
            self.over_committed.discard(pool)

    def _touch(self, snapshot: ClusterSnapshot, device: Device) -> None:
        self._bump(device.node_name if device.node_name is not None else "*")
        if device.consumes:
            # Counters belong to the pool: when its devices span nodes, taking one changes what
            # fits on the others too, and answers cached for them must expire.
            nodes = snapshot.pool_nodes(device.pool_index)
            if nodes is None:
                self._bump("*")
            elif len(nodes) > 1:
                for name in nodes:
                    if name != device.node_name:
                        self._bump(name)

    def _bump(self, name: str) -> None:
        self.node_versions[name] += 1
        if len(self.changes) >= 4096:
            self.changes.clear()
            self.changes_epoch += 1
        self.changes.append(name)

    def conflict(self, snapshot: ClusterSnapshot, allocation: Mapping[str, Any]) -> str | None:
        """Why `allocation` cannot be added to what is taken now, or None when it can.

        This is the check an allocator makes immediately before writing a decision it took
        against older state: a device someone else took since, a counter that another device of
        the same GPU now consumes, or consumed capacity that no longer fits. The allocation must
        not be recorded in this usage itself.
        """
        results = (allocation.get("devices") or {}).get("results") or []
        extra_counters: dict[int, list[Number]] = {}
        extra_capacity: dict[int, dict[str, Number]] = {}
        newly_used: set[int] = set()
        for i, result in enumerate(results):
            if result.get("adminAccess"):
                continue
            name = f"{result.get('driver')}/{result.get('pool')}/{result.get('device')}"
            device = snapshot.device(
                str(result.get("driver")), str(result.get("pool")), str(result.get("device"))
            )
            if device is None:
                return f"device {name} is no longer published"
            if device.id in self.exclusive or (
                not result.get("shareID") and device.id in self.shares
            ):
                return f"device {name} is already allocated to another claim"
            if result.get("shareID"):
                consumed = extra_capacity.setdefault(device.id, {})
                for cap, amount in (result.get("consumedCapacity") or {}).items():
                    qualified = cap if "/" in cap else f"{device.driver}/{cap}"
                    value = quantity_value(
                        amount, f"allocation result {i}: consumedCapacity[{cap}]"
                    )
                    consumed[qualified] = consumed.get(qualified, 0) + value
                    taken = self.consumed_capacity.get(device.id, {}).get(qualified, 0)
                    rule = device.capacity.get(qualified)
                    if rule is not None and taken + consumed[qualified] > rule.value:
                        return f"capacity {cap} of device {name} is no longer free"
            if device.id in newly_used:
                continue
            if self.in_use(device):
                # Shared with other claims, which hold its counters; but if the pool's counters
                # are over-committed (another allocator took a device they exclude meanwhile),
                # the sharing itself is the collision.
                if self._over_committed(snapshot, device):
                    return (
                        f"device {name} shares shared counters that another allocation now "
                        "over-commits"
                    )
                continue
            newly_used.add(device.id)
            if not device.consumes:
                continue
            pool = snapshot.pool_of(device)
            extra = extra_counters.setdefault(pool.index, [0] * len(pool.counter_totals))
            for counter, amount in device.consumes:
                extra[counter] += amount
                if (
                    self.counter_used(pool.index, counter) + extra[counter]
                    > (pool.counter_totals[counter])
                ):
                    return (
                        f"device {name} needs shared counters that other devices of its "
                        "pool now consume"
                    )
        return None

    def _over_committed(self, snapshot: ClusterSnapshot, device: Device) -> bool:
        pool = snapshot.pool_of(device)
        used = self.counters.get(pool.index)
        if used is None:
            return False
        return any(used[c] > pool.counter_totals[c] for c, _ in device.consumes)

    def forget_derived(self) -> None:
        """Drop every derived figure (tests compare answers with and without them)."""
        self.derived.clear()
        self._derived_of.clear()

    def derived_for(self, pool: int, group: tuple[int, ...]) -> dict[object, Any]:
        """The figures kept for counters `group` of `pool` (see `derived`), empty at first."""
        groups = self.derived.get(pool)
        if groups is None:
            groups = self.derived[pool] = {}
        found = groups.get(group)
        if found is None:
            found = groups[group] = {}
            containing = self._derived_of.setdefault(pool, {})
            for counter in group:
                containing.setdefault(counter, set()).add(group)
        return found

    def node_version(self, node: str) -> tuple[int, int]:
        return self.node_versions[node], self.node_versions["*"]
