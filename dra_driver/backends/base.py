"""The contract every GPU backend fulfils.

Prepare and the ResourceSlice builder are written against this protocol only, so the fake backend
can stand in for NVML everywhere a GPU is missing. The MIG primitives mirror NVML one to one
(GPU instance and compute instance are separate objects with separate lifetimes) because crash
recovery has to be able to find and destroy a half-created device.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Protocol, runtime_checkable

from api.v1alpha1.types import TimeSliceInterval
from dra_driver.backends.usage import UsageSample
from dra_driver.inventory.model import GpuInstance, Inventory, MigDevice, MigPlacement

# A backend sets the interval a claim's configuration names, so the protocol takes the config
# API's type; it is exported here so that a backend needs only this module.
__all__ = [
    "TIMESLICE_SETTINGS",
    "DeviceHealth",
    "GpuBackend",
    "HealthEvent",
    "TimeSliceInterval",
    "timeslice_from_setting",
]

TIMESLICE_SETTINGS: Mapping[TimeSliceInterval, int] = MappingProxyType(
    {
        TimeSliceInterval.DEFAULT: 0,
        TimeSliceInterval.SHORT: 1,
        TimeSliceInterval.MEDIUM: 2,
        TimeSliceInterval.LONG: 3,
    }
)
"""What `nvidia-smi compute-policy --set-timeslice` takes for each interval (0 restores the
default); the fake backend records the same numbers."""


def timeslice_from_setting(setting: int) -> TimeSliceInterval:
    """The interval whose `nvidia-smi` number is `setting`."""
    for interval, number in TIMESLICE_SETTINGS.items():
        if number == setting:
            return interval
    raise ValueError(f"{setting} is not a time-slice setting nvidia-smi knows")


class DeviceHealth(enum.Enum):
    HEALTHY = "Healthy"
    UNHEALTHY = "Unhealthy"


@dataclass(frozen=True, slots=True)
class HealthEvent:
    """A health change of one GPU, e.g. an XID error that makes it unusable."""

    minor: int
    health: DeviceHealth
    reason: str
    xid: int | None = None


@runtime_checkable
class GpuBackend(Protocol):
    """What the driver needs from a GPU library. Methods are synchronous and may block briefly;
    daemons call them from a worker thread."""

    @property
    def node_name(self) -> str: ...

    def inventory(self) -> Inventory:
        """Snapshot of every GPU and every live MIG device."""
        ...

    def possible_placements(self, minor: int, profile: str) -> tuple[MigPlacement, ...]:
        """Every placement the profile can ever take on this GPU (not only the free ones)."""
        ...

    def create_gpu_instance(self, minor: int, profile: str, placement: MigPlacement) -> int:
        """Create a GPU instance at exactly `placement`; return its GI id."""
        ...

    def create_compute_instance(self, minor: int, gi_id: int) -> int:
        """Create the full-size compute instance inside a GPU instance; return its CI id."""
        ...

    def destroy_compute_instance(self, minor: int, gi_id: int, ci_id: int) -> None: ...

    def destroy_gpu_instance(self, minor: int, gi_id: int) -> None:
        """Fails with InUseError while the GPU instance still has compute instances."""
        ...

    def gpu_instances(self, minor: int) -> tuple[GpuInstance, ...]:
        """Every live GPU instance of one GPU, including ones without a compute instance."""
        ...

    def mig_devices(self, minor: int) -> tuple[MigDevice, ...]:
        """Live MIG devices of one GPU (GPU instances that have a compute instance)."""
        ...

    def set_timeslice(self, minor: int, interval: TimeSliceInterval) -> None: ...

    def health_events(self) -> tuple[HealthEvent, ...]:
        """Health changes since the last call (drained on read)."""
        ...

    def usage(self) -> UsageSample:
        """How the GPUs, MIG devices and compute processes are used right now (see
        docs/telemetry.md); one GPU that cannot be read goes to `failures`, the rest stand."""
        ...

    def stop_processes(self, pids: Sequence[int]) -> tuple[int, ...]:
        """End these compute processes now (a lent GPU taken back); the pids it could not end,
        which are then left to their pods' eviction."""
        ...

    def close(self) -> None: ...
