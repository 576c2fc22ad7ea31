"""What the claims' `status.devices` say about each allocated device of the driver, for
`dra-driver queues` (idle devices per queue) and `dra-driver usage` (every device, with its
state).

Only the claims are read: the kubelet plugins write the `Idle` condition there
(`dra_driver.device_status`), so these commands need no access to the nodes. A device without
a readable condition is "unknown", never idle.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from dra_driver.allocator.result import allocation_node
from dra_driver.device_status import allocated_devices, idleness

IDLE = "idle"
BUSY = "busy"
UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class HeldDevice:
    """One allocated device of the driver, as its claim's status tells it."""

    node: str | None
    namespace: str
    claim: str
    pods: tuple[str, ...]
    """The pods the claim is reserved for, by name (its namespace's)."""
    pool: str
    device: str
    state: str
    """IDLE, BUSY or UNKNOWN."""
    since: datetime | None
    """When the device went idle (IDLE) or was last used (BUSY): the condition's
    lastTransitionTime."""


def held_devices(claims: Iterable[Mapping[str, Any]], driver: str) -> list[HeldDevice]:
    """Every allocated device of `driver` in `claims`, ordered by node, namespace, claim."""
    found: list[HeldDevice] = []
    for claim in claims:
        meta = claim.get("metadata") or {}
        status = claim.get("status") or {}
        allocation = status.get("allocation") or {}
        if not allocation:
            continue
        states = idleness(claim)
        pods = tuple(
            str(ref.get("name"))
            for ref in status.get("reservedFor") or ()
            if isinstance(ref, Mapping) and ref.get("resource") == "pods"
        )
        for key in allocated_devices(claim, driver):
            state = states.get(key)
            found.append(
                HeldDevice(
                    node=allocation_node(allocation),
                    namespace=str(meta.get("namespace") or ""),
                    claim=str(meta.get("name") or ""),
                    pods=pods,
                    pool=key[1],
                    device=key[2],
                    state=UNKNOWN if state is None else IDLE if state.idle else BUSY,
                    since=None if state is None else state.since,
                )
            )
    found.sort(key=lambda d: (d.node or "", d.namespace, d.claim, d.pool, d.device))
    return found


def idle_by_namespace(devices: Iterable[HeldDevice]) -> dict[str, int]:
    """How many idle devices each namespace's claims hold."""
    counts: dict[str, int] = {}
    for device in devices:
        if device.state == IDLE:
            counts[device.namespace] = counts.get(device.namespace, 0) + 1
    return counts
