"""Critical XID events from NVML, turned into per-GPU health changes.

NVML reports XIDs caused by a misbehaving application through the same "critical error" event as
XIDs caused by a failing GPU. Marking a GPU unhealthy for the former would let one buggy pod take
a GPU away from everyone, so those XIDs are dropped (the same list NVIDIA's device plugin skips):

- 13  graphics engine exception (illegal instruction, out-of-range access in a kernel)
- 31  GPU memory page fault (an application touched memory it does not own)
- 43  GPU stopped processing (the driver killed a faulting application's context)
- 45  preemptive cleanup of channels after an earlier error (follows an application's fault)
- 68  video processor exception (bad input to NVDEC/NVENC from the application)
- 109 context switch timeout (an application's kernel would not yield)

Draining never blocks: each poll waits 0 ms and stops at NVML_ERROR_TIMEOUT ("nothing pending").
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable

from dra_driver.backends.base import DeviceHealth, HealthEvent
from dra_driver.backends.nvml.adapter import DeviceHandle, EventSetHandle, NvmlAdapter
from dra_driver.backends.return_codes import NvmlCallError, NvmlReturn

XID_CRITICAL_ERROR = 0x8  # nvmlEventTypeXidCriticalError
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})
# A bound on one drain, so a GPU spewing events cannot keep the caller in the loop forever.
MAX_EVENTS_PER_DRAIN = 1024


class XidWatcher:
    """Registers every GPU once for critical XIDs and hands out what arrived since last time."""

    def __init__(self, nvml: NvmlAdapter, ignored_xids: Iterable[int] = APPLICATION_XIDS) -> None:
        self._nvml = nvml
        self._ignored = frozenset(ignored_xids)
        self._lock = threading.Lock()
        self._event_set: EventSetHandle | None = None
        self._registered = False
        self._minor_by_uuid: dict[str, int] = {}

    def ensure_registered(self, gpus: Iterable[tuple[int, str, DeviceHandle]]) -> None:
        """Register (minor, UUID, handle) of every GPU, once: XIDs from before are not kept."""
        with self._lock:
            if not self._registered:
                self._register(gpus)
                self._registered = True

    def drain(self, gpus: Iterable[tuple[int, str, DeviceHandle]]) -> tuple[HealthEvent, ...]:
        """Events since the last drain; registers first if that has not happened yet."""
        self.ensure_registered(gpus)
        with self._lock:
            if self._event_set is None:
                return ()
            return self._drain(self._event_set)

    def close(self) -> None:
        with self._lock:
            if self._event_set is not None:
                # Freeing during shutdown is best effort.
                with contextlib.suppress(NvmlCallError):
                    self._nvml.event_set_free(self._event_set)
                self._event_set = None

    def _register(self, gpus: Iterable[tuple[int, str, DeviceHandle]]) -> None:
        try:
            event_set = self._nvml.event_set_create()
        except NvmlCallError:
            return  # no events at all on this system; health stays as enumerated
        for minor, uuid, handle in gpus:
            try:
                if not self._nvml.supported_event_types(handle) & XID_CRITICAL_ERROR:
                    continue
                self._nvml.register_events(handle, XID_CRITICAL_ERROR, event_set)
            except NvmlCallError:
                continue  # e.g. NOT_SUPPORTED on GPUs or drivers without event support
            self._minor_by_uuid[uuid] = minor
        if self._minor_by_uuid:
            self._event_set = event_set
        else:
            with contextlib.suppress(NvmlCallError):
                self._nvml.event_set_free(event_set)

    def _drain(self, event_set: EventSetHandle) -> tuple[HealthEvent, ...]:
        events: list[HealthEvent] = []
        for _ in range(MAX_EVENTS_PER_DRAIN):
            try:
                record = self._nvml.wait_event(event_set, 0)
            except NvmlCallError as failure:
                if failure.code == NvmlReturn.TIMEOUT:
                    break
                # The event channel itself failed: nothing can be said about any GPU any more,
                # so every watched GPU is reported, as NVIDIA's device plugin does.
                reason = f"waiting for NVML events failed: {failure}"
                events.extend(
                    HealthEvent(minor, DeviceHealth.UNHEALTHY, reason)
                    for minor in sorted(self._minor_by_uuid.values())
                )
                break
            event = self._to_health_event(record.device, record.event_type, record.data)
            if event is not None:
                events.append(event)
        return tuple(events)

    def _to_health_event(
        self, device: DeviceHandle, event_type: int, xid: int
    ) -> HealthEvent | None:
        if not event_type & XID_CRITICAL_ERROR or xid in self._ignored:
            return None
        try:
            minor = self._minor_by_uuid.get(self._nvml.uuid(device))
        except NvmlCallError:
            minor = None
        if minor is None:
            return None
        return HealthEvent(minor, DeviceHealth.UNHEALTHY, f"critical XID {xid}", xid=xid)
