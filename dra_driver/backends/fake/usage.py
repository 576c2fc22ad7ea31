"""The usage figures fake GPUs report: what their fake processes declare, shaped like NVML's.

The point of the fake is that code reading a `UsageSample` cannot tell it from NVML, so the
figures are None exactly where NVML has none:

- a GPU without MIG: SM percent = the sum of its processes' percents (at most 100), memory used
  = the sum of their memory;
- a GPU in MIG mode: no SM percent, memory used = the sum over all its processes;
- a MIG device: memory from its processes, SM percent from them only where the GPU has GPU
  performance monitoring (compute capability 9.0, Hopper, and later);
- a process: its memory, and its SM percent except on a MIG device;
- an unhealthy GPU: a failure, as NVML calls on a lost GPU fail, and none of its figures.

A process with a load curve is read at the moment of the sample: its percent is the curve's
at that time, and its memory that percent of its device's memory as the sample reports the
device's total.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Iterable, Sequence

from dra_driver.backends.fake.load_curve import LoadCurve
from dra_driver.backends.fake.state import GpuRecord, ProcessRecord
from dra_driver.backends.usage import (
    GpuUsage,
    MigUsage,
    ProcessUsage,
    UsageFailure,
    UsageSample,
)
from dra_driver.inventory.model import GpuInfo, MigDevice

MIB = 1024 * 1024
GPM_MIN_COMPUTE_MAJOR = 9

#: Where a sample reads the time when its caller gives none. The backend samples without a
#: time, so a test of the whole backend replaces this rather than waiting for a curve to move.
wall_clock: Callable[[], float] = time.time


def has_gpm(gpu: GpuInfo) -> bool:
    """Whether NVML could give this GPU's MIG devices an SM figure (GPM: Hopper and later)."""
    major, _, _ = gpu.cuda_compute_capability.partition(".")
    return major.isdigit() and int(major) >= GPM_MIN_COMPUTE_MAJOR


def mig_memory_bytes(gpu: GpuInfo, device: MigDevice) -> int | None:
    profile = gpu.profile(device.profile)
    return None if profile is None else profile.memory_mib * MIB


def fake_usage(
    gpus: Iterable[tuple[GpuInfo, GpuRecord, Sequence[MigDevice]]],
    processes: Sequence[ProcessRecord],
    *,
    now: float | None = None,
) -> UsageSample:
    """The sample at `now` (epoch seconds; `wall_clock()` when None)."""
    gpus = tuple(gpus)
    at = wall_clock() if now is None else now
    totals: dict[str, int | None] = {}
    for gpu, _, mig_devices in gpus:
        totals[gpu.uuid] = gpu.memory_bytes
        for device in mig_devices:
            totals[device.uuid] = mig_memory_bytes(gpu, device)
    by_device: dict[str, list[ProcessRecord]] = {}
    for process in processes:
        current = _at(process, at, totals.get(process.uuid))
        by_device.setdefault(process.uuid, []).append(current)
    gpu_figures: list[GpuUsage] = []
    mig_figures: list[MigUsage] = []
    process_figures: list[ProcessUsage] = []
    failures: list[UsageFailure] = []
    for gpu, record, mig_devices in gpus:
        if record.unhealthy is not None:
            failures.append(
                UsageFailure(
                    gpu.minor,
                    f"GPU minor {gpu.minor} ({gpu.uuid}): nvmlDeviceGetMemoryInfo: GPU is lost "
                    f"(XID {record.unhealthy.xid}: {record.unhealthy.reason})",
                )
            )
            continue
        on_gpu = by_device.get(gpu.uuid, [])
        on_migs = [p for device in mig_devices for p in by_device.get(device.uuid, [])]
        everything = on_gpu + on_migs
        gpu_figures.append(
            GpuUsage(
                minor=gpu.minor,
                uuid=gpu.uuid,
                sm_percent=None if gpu.mig_enabled else _busy(on_gpu),
                memory_used_bytes=sum(p.memory_bytes for p in everything),
                memory_total_bytes=gpu.memory_bytes,
            )
        )
        for process in on_gpu:
            process_figures.append(
                ProcessUsage(
                    pid=process.pid,
                    uuid=process.uuid,
                    sm_percent=None if gpu.mig_enabled else process.sm_percent,
                    memory_used_bytes=process.memory_bytes,
                )
            )
        gpm = has_gpm(gpu)
        for device in mig_devices:
            on_device = by_device.get(device.uuid, [])
            mig_figures.append(
                MigUsage(
                    minor=gpu.minor,
                    uuid=device.uuid,
                    gi_id=device.gi_id,
                    sm_percent=_busy(on_device) if gpm else None,
                    memory_used_bytes=sum(p.memory_bytes for p in on_device),
                    memory_total_bytes=mig_memory_bytes(gpu, device),
                )
            )
            process_figures.extend(
                ProcessUsage(p.pid, p.uuid, None, p.memory_bytes) for p in on_device
            )
    return UsageSample(
        gpus=tuple(gpu_figures),
        mig_devices=tuple(mig_figures),
        processes=tuple(process_figures),
        failures=tuple(failures),
    )


def _busy(processes: Sequence[ProcessRecord]) -> float:
    return min(100.0, sum(p.sm_percent for p in processes))


def _at(process: ProcessRecord, now: float, device_memory: int | None) -> ProcessRecord:
    """The process with its figures at `now`: a fixed share as recorded, a curve evaluated.

    A device whose memory the sample does not know keeps the memory recorded at the start
    rather than inventing one."""
    if process.curve is None:
        return process
    started = now if process.started_at is None else process.started_at
    percent = _curve(process.curve).percent_at(now, started)
    memory = process.memory_bytes if device_memory is None else int(device_memory * percent / 100)
    return dataclasses.replace(process, sm_percent=percent, memory_bytes=memory)


@functools.lru_cache(maxsize=256)
def _curve(wire: str) -> LoadCurve:
    # Every sample reads every process; the few curves in use parse once.
    return LoadCurve.from_wire(wire)
