"""GPU health: from backend events to slice taints and kubelet's health stream.

A GPU that reports a fatal fault (an XID such as 79, "fallen off the bus") must stop receiving
new claims at once, but claims already running on it are the workload's business: so every
device of the GPU gets a `NoSchedule` taint in the published slices (the scheduler skips it,
nothing is evicted), and kubelet is told through `NodeWatchResources` so the pod status shows the
device as unhealthy. Recovery removes the taint. Events are polled because both backends expose
them as a drain-on-read queue; the poll interval bounds how late a fault is noticed.

A GPU's MPS control daemon that keeps failing makes only its fractional-share device unhealthy
(`<driver>/mps-unhealthy`): whole GPUs and MIG devices of that GPU do not depend on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from dra_driver.backends.base import DeviceHealth, GpuBackend
from dra_driver.kubeletapi.types import DeviceHealthStatus, Health

log = structlog.get_logger(__name__)

SHARED_SUFFIX = "-shared"


@dataclass(frozen=True, slots=True)
class GpuHealth:
    healthy: bool
    reason: str
    xid: int | None
    since: int


class HealthMonitor:
    def __init__(
        self,
        backend: GpuBackend,
        driver_name: str,
        pool_name: str,
        devices_of: Callable[[], Mapping[str, int]],
        *,
        check_timeout_s: int = 60,
        clock: Callable[[], float] = time.time,
        mps_unhealthy: Callable[[], Mapping[int, str]] | None = None,
    ) -> None:
        """`devices_of` returns the published device names with their GPU's minor;
        `mps_unhealthy` the GPUs whose MPS shares cannot be served, with the reason."""
        self._mps_unhealthy = mps_unhealthy or dict
        self._backend = backend
        self._driver = driver_name
        self._pool = pool_name
        self._devices_of = devices_of
        self._timeout = check_timeout_s
        self._clock = clock
        self._gpus: dict[int, GpuHealth] = {}
        self._version = 0
        self._changed = asyncio.Condition()

    @property
    def taint_key(self) -> str:
        return f"{self._driver}/unhealthy"

    def poll(self) -> bool:
        """Drain the backend's events; True when some GPU's health changed."""
        changed = False
        now = int(self._clock())
        for event in self._backend.health_events():
            healthy = event.health is DeviceHealth.HEALTHY
            before = self._gpus.get(event.minor)
            if before is not None and before.healthy == healthy and before.xid == event.xid:
                continue
            if before is None and healthy:
                continue
            self._gpus[event.minor] = GpuHealth(healthy, event.reason, event.xid, now)
            log.warning(
                "GPU health changed",
                minor=event.minor,
                healthy=healthy,
                reason=event.reason,
                xid=event.xid,
            )
            changed = True
        return changed

    def unhealthy(self) -> dict[int, GpuHealth]:
        return {minor: h for minor, h in self._gpus.items() if not h.healthy}

    def taints(self) -> dict[int, list[dict[str, Any]]]:
        """Taints for the slice builder, keyed by GPU minor."""
        taints: dict[int, list[dict[str, Any]]] = {}
        for minor, health in self.unhealthy().items():
            taint: dict[str, Any] = {"key": self.taint_key, "effect": "NoSchedule"}
            if health.xid is not None:
                taint["value"] = f"xid-{health.xid}"
            taints[minor] = [taint]
        return taints

    @property
    def mps_taint_key(self) -> str:
        return f"{self._driver}/mps-unhealthy"

    def _mps_failing(self, device: str, minor: int) -> str | None:
        if not device.endswith(SHARED_SUFFIX):
            return None
        return self._mps_unhealthy().get(minor)

    def device_taints(self) -> dict[str, list[dict[str, Any]]]:
        """Taints of single devices, keyed by device name: shares whose MPS daemon fails."""
        failing = self._mps_unhealthy()
        return {
            device: [{"key": self.mps_taint_key, "value": "daemon-failing", "effect": "NoSchedule"}]
            for device, minor in self._devices_of().items()
            if device.endswith(SHARED_SUFFIX) and minor in failing
        }

    def statuses(self) -> list[DeviceHealthStatus]:
        """Every published device with its GPU's health: the full list kubelet expects."""
        result: list[DeviceHealthStatus] = []
        now = int(self._clock())
        for device, minor in sorted(self._devices_of().items()):
            health = self._gpus.get(minor)
            mps = self._mps_failing(device, minor)
            if mps is not None and (health is None or health.healthy):
                result.append(
                    DeviceHealthStatus(
                        self._pool, device, Health.UNHEALTHY, now, self._timeout, mps
                    )
                )
            elif health is None or health.healthy:
                result.append(
                    DeviceHealthStatus(
                        self._pool,
                        device,
                        Health.HEALTHY,
                        health.since if health else now,
                        self._timeout,
                        "",
                    )
                )
            else:
                xid = f" (XID {health.xid})" if health.xid is not None else ""
                result.append(
                    DeviceHealthStatus(
                        self._pool,
                        device,
                        Health.UNHEALTHY,
                        health.since,
                        self._timeout,
                        f"GPU {minor}: {health.reason}{xid}",
                    )
                )
        return result

    async def notify(self) -> None:
        """Wake every health stream (also after a republish changed the device list)."""
        async with self._changed:
            self._version += 1
            self._changed.notify_all()

    async def watch(self) -> AsyncIterator[list[DeviceHealthStatus]]:
        seen = -1
        while True:
            async with self._changed:
                while self._version == seen:
                    await self._changed.wait()
                seen = self._version
            yield self.statuses()

    async def run(
        self, interval_s: float, on_change: Callable[[], Any], stop: asyncio.Event
    ) -> None:
        """Poll until `stop` is set; on a change call `on_change` (the republish) then wake the
        streams, so kubelet and the scheduler learn about a fault in the same round."""
        while not stop.is_set():
            try:
                changed = await asyncio.to_thread(self.poll)
            except Exception as err:
                log.warning("reading GPU health events failed", error=str(err))
                changed = False
            if changed:
                result = on_change()
                if asyncio.iscoroutine(result):
                    await result
                await self.notify()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=interval_s)
