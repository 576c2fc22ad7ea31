"""What the servers need from the code that actually prepares devices.

Kept as protocols so the servers can be built and tested without GPUs, the API server or the
checkpoint, and so the prepare logic does not depend on gRPC.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Protocol

from dra_driver.kubeletapi.types import ClaimRef, DeviceHealthStatus, PrepareOutcome


class NodeDriver(Protocol):
    """Prepares and releases claims. Both calls must be idempotent: kubelet repeats them."""

    async def prepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, PrepareOutcome]:
        """Outcome per claim UID; every claim's UID should be a key.

        The servers turn a missing key into an error entry and an exception into an error for
        every claim, so a bug here cannot make kubelet drop a whole response.
        """
        ...

    async def unprepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, str]:
        """Error per claim UID, ``""`` when the claim's devices are released."""
        ...


class HealthSource(Protocol):
    """Device health for kubelet's health stream."""

    def watch(self) -> AsyncIterator[Sequence[DeviceHealthStatus]]:
        """Yield the full current list at once, then again after every change."""
        ...


__all__ = ["HealthSource", "NodeDriver"]
