"""GPU backends: the one place that talks to NVML (or pretends to)."""

from dra_driver.backends.base import DeviceHealth, GpuBackend, HealthEvent, TimeSliceInterval
from dra_driver.backends.errors import (
    BackendError,
    GpuLostError,
    InsufficientResourcesError,
    InUseError,
    InvalidArgumentError,
    NotFoundError,
    NotSupportedError,
    NvmlUnavailableError,
    PermissionDeniedError,
    TimeSliceCommandError,
    UnknownBackendError,
)

__all__ = [
    "BackendError",
    "DeviceHealth",
    "GpuBackend",
    "GpuLostError",
    "HealthEvent",
    "InUseError",
    "InsufficientResourcesError",
    "InvalidArgumentError",
    "NotFoundError",
    "NotSupportedError",
    "NvmlUnavailableError",
    "PermissionDeniedError",
    "TimeSliceCommandError",
    "TimeSliceInterval",
    "UnknownBackendError",
]
