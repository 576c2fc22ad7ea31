"""In-memory stand-ins for the prepare logic and the health source."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence

from dra_driver.kubeletapi.types import (
    ClaimRef,
    DeviceHealthStatus,
    Health,
    PreparedDevice,
    PrepareOutcome,
)

DRIVER = "gpu.dra-driver.dev"


class FakeNodeDriver:
    """Dict-backed driver: each claim gets one device named after its uid."""

    def __init__(self) -> None:
        self.prepared: dict[str, tuple[PreparedDevice, ...]] = {}
        self.omit: set[str] = set()
        self.fail: Exception | None = None
        self.calls: list[tuple[str, list[str]]] = []

    async def prepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, PrepareOutcome]:
        self.calls.append(("prepare", [c.uid for c in claims]))
        if self.fail is not None:
            raise self.fail
        result: dict[str, PrepareOutcome] = {}
        for claim in claims:
            if claim.uid in self.omit:
                continue
            devices = (
                PreparedDevice(
                    request_names=("gpu",),
                    pool_name="node-a",
                    device_name=f"gpu-{claim.name}",
                    cdi_device_ids=(f"k8s.{DRIVER}/gpu={claim.uid}",),
                    share_id=f"share-{claim.uid}",
                ),
            )
            self.prepared[claim.uid] = devices
            result[claim.uid] = PrepareOutcome(devices=devices)
        return result

    async def unprepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, str]:
        self.calls.append(("unprepare", [c.uid for c in claims]))
        if self.fail is not None:
            raise self.fail
        # Answers only for claims it knows, leaving the rest to the servers' guarantees.
        return {c.uid: "" for c in claims if self.prepared.pop(c.uid, None) is not None}


class FakeHealthSource:
    """Pushes the full list to every watcher on each update."""

    def __init__(self, statuses: Sequence[DeviceHealthStatus]) -> None:
        self.statuses = list(statuses)
        self._watchers: list[asyncio.Queue[list[DeviceHealthStatus]]] = []

    def update(self, statuses: Sequence[DeviceHealthStatus]) -> None:
        self.statuses = list(statuses)
        for queue in self._watchers:
            queue.put_nowait(list(self.statuses))

    async def watch(self) -> AsyncIterator[Sequence[DeviceHealthStatus]]:
        queue: asyncio.Queue[list[DeviceHealthStatus]] = asyncio.Queue()
        self._watchers.append(queue)
        try:
            yield list(self.statuses)
            while True:
                yield await queue.get()
        finally:
            self._watchers.remove(queue)


def healthy(name: str, message: str = "ok") -> DeviceHealthStatus:
    return DeviceHealthStatus("node-a", name, Health.HEALTHY, 1_700_000_000, 30, message)
