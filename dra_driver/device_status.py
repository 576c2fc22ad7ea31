"""The `Idle` condition a kubelet plugin writes into a ResourceClaim's `status.devices`.

One vocabulary for the writer (the kubelet plugin, on transitions) and the readers (the
controller's reclaim, `dra-driver queues` and `dra-driver usage`), so that they cannot drift.

`status.devices` is a list keyed by (driver, pool, device) (KEP-4817, ResourceClaim device
status); each driver owns its own entries and must leave other drivers' entries, and the other
conditions of its own entries, as they are.

The condition's `lastTransitionTime` is when the device's utilisation last fell below the idle
threshold, not when the plugin noticed: the plugin reports `True` only once the device stayed
idle for its window, and every reader measures "idle for how long" as now minus that time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

IDLE: Final = "Idle"
# Reasons: CamelCase, as kube-apiserver requires of a condition's reason.
REASON_IDLE: Final = "NoActivity"
REASON_ACTIVE: Final = "Active"

DeviceKey = tuple[str, str, str]
"""(driver, pool, device): how `status.devices` entries are told apart."""


@dataclass(frozen=True, slots=True)
class DeviceIdleness:
    """What a claim's status says about one device's idleness."""

    key: DeviceKey
    idle: bool
    since: datetime  # the condition's lastTransitionTime (UTC)


def format_time(moment: datetime) -> str:
    """RFC 3339 in UTC with seconds, as metav1.Time serialises."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None


def idle_condition(idle: bool, since: datetime, message: str) -> dict[str, Any]:
    return {
        "type": IDLE,
        "status": "True" if idle else "False",
        "reason": REASON_IDLE if idle else REASON_ACTIVE,
        "message": message,
        "lastTransitionTime": format_time(since),
    }


def device_key(entry: Mapping[str, Any]) -> DeviceKey:
    return (str(entry.get("driver", "")), str(entry.get("pool", "")), str(entry.get("device", "")))


def idleness(claim: Mapping[str, Any]) -> dict[DeviceKey, DeviceIdleness]:
    """Every device of the claim that carries a readable `Idle` condition."""
    found: dict[DeviceKey, DeviceIdleness] = {}
    for entry in ((claim.get("status") or {}).get("devices")) or ():
        if not isinstance(entry, Mapping):
            continue
        for condition in entry.get("conditions") or ():
            if not isinstance(condition, Mapping) or condition.get("type") != IDLE:
                continue
            since = parse_time(condition.get("lastTransitionTime"))
            if since is None or condition.get("status") not in ("True", "False"):
                continue
            key = device_key(entry)
            found[key] = DeviceIdleness(key, condition["status"] == "True", since)
    return found


def allocated_devices(claim: Mapping[str, Any], driver: str) -> list[DeviceKey]:
    """The devices of `driver` in the claim's allocation."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or ()
    return [
        (driver, str(r.get("pool", "")), str(r.get("device", "")))
        for r in results
        if isinstance(r, Mapping) and r.get("driver") == driver
    ]


def idle_since(claims: Iterable[Mapping[str, Any]], driver: str) -> datetime | None:
    """When the last of these claims' devices of `driver` went idle, if every one of them is
    idle now; None when any is busy or unknown, or there are none."""
    latest: datetime | None = None
    count = 0
    for claim in claims:
        states = idleness(claim)
        for key in allocated_devices(claim, driver):
            state = states.get(key)
            if state is None or not state.idle:
                return None
            count += 1
            latest = state.since if latest is None else max(latest, state.since)
    return latest if count else None


def with_condition(
    entries: Sequence[Mapping[str, Any]], key: DeviceKey, condition: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """`status.devices` with `condition` set on the entry of `key` (added if missing); other
    entries and the entry's other conditions are kept as they are."""
    out: list[dict[str, Any]] = []
    placed = False
    for entry in entries:
        copy = dict(entry)
        if device_key(entry) == key:
            kept = [
                dict(c)
                for c in entry.get("conditions") or ()
                if not (isinstance(c, Mapping) and c.get("type") == condition["type"])
            ]
            copy["conditions"] = [*kept, dict(condition)]
            placed = True
        out.append(copy)
    if not placed:
        driver, pool, device = key
        out.append(
            {"driver": driver, "pool": pool, "device": device, "conditions": [dict(condition)]}
        )
    return out


__all__ = [
    "IDLE",
    "REASON_ACTIVE",
    "REASON_IDLE",
    "DeviceIdleness",
    "DeviceKey",
    "allocated_devices",
    "device_key",
    "format_time",
    "idle_condition",
    "idle_since",
    "idleness",
    "parse_time",
    "with_condition",
]
