"""What a backend reports about how its GPUs are used right now.

Allocation decides who holds a GPU; these samples say whether the holder uses it. The figures
are the ones NVML can give, with None wherever the hardware or the mode cannot tell, because a
missing figure must never read as an idle device: NVML has no SM utilisation for a GPU in MIG
mode, per-MIG-device activity only through GPU performance monitoring (Hopper and later), and no
per-process utilisation inside MIG devices.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GpuUsage:
    """One physical GPU (nvmlDeviceGetUtilizationRates, nvmlDeviceGetMemoryInfo)."""

    minor: int
    uuid: str
    # Percent of time a kernel ran over NVML's last sample period; None in MIG mode or when
    # the GPU does not report it.
    sm_percent: float | None
    memory_used_bytes: int | None
    memory_total_bytes: int | None


@dataclass(frozen=True, slots=True)
class MigUsage:
    """One live MIG device: memory always, SM activity only with GPU performance monitoring."""

    minor: int  # of the parent GPU
    uuid: str  # of the MIG device
    gi_id: int
    sm_percent: float | None
    memory_used_bytes: int | None
    memory_total_bytes: int | None


@dataclass(frozen=True, slots=True)
class ProcessUsage:
    """One compute process on a GPU or MIG device (nvmlDeviceGetComputeRunningProcesses, and
    nvmlDeviceGetProcessUtilization where the device supports it)."""

    pid: int  # in the host's PID namespace, as NVML reports it
    uuid: str  # of the GPU or MIG device the process runs on
    sm_percent: float | None
    memory_used_bytes: int | None


@dataclass(frozen=True, slots=True)
class UsageFailure:
    """A GPU whose figures could not be read this time; the rest of the sample stands."""

    minor: int
    message: str


@dataclass(frozen=True, slots=True)
class UsageSample:
    gpus: tuple[GpuUsage, ...] = ()
    mig_devices: tuple[MigUsage, ...] = ()
    processes: tuple[ProcessUsage, ...] = ()
    failures: tuple[UsageFailure, ...] = ()


__all__ = ["GpuUsage", "MigUsage", "ProcessUsage", "UsageFailure", "UsageSample"]
