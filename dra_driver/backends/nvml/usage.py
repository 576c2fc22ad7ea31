"""GPU usage from NVML: whole-GPU, MIG-device and per-process figures for one sampling cycle.

Three things shape this module:

- A figure NVML cannot give is None, never 0, so an unknown device is never taken for an idle
  one. A feature a GPU answers NOT_SUPPORTED for is remembered per GPU and not asked again: the
  answer is a property of the hardware or driver and asking every cycle would only cost calls.
- One GPU failing must not hide the others: its error becomes a `UsageFailure` and the next GPU
  is read.
- SM activity of a MIG device exists only through GPU performance monitoring (Hopper and later).
  GPM computes a metric between two samples; instead of taking two samples a short sleep apart,
  each MIG device keeps the sample of the previous cycle, so a cycle costs no sleep and the figure
  covers the whole interval between cycles. The first cycle after a MIG device appears has no
  previous sample and reports None.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

from dra_driver.backends.nvml.adapter import DeviceHandle, GpmSampleHandle, NvmlAdapter
from dra_driver.backends.return_codes import NvmlCallError, NvmlReturn
from dra_driver.backends.usage import (
    GpuUsage,
    MigUsage,
    ProcessUsage,
    UsageFailure,
    UsageSample,
)

T = TypeVar("T")

# GPM (and so per-MIG-device SM activity) starts with Hopper, compute capability 9.0.
GPM_MIN_COMPUTE_MAJOR = 9
_MIG_ENABLED = 1
# Answers meaning "this GPU or driver has no such feature".
_UNSUPPORTED = frozenset({NvmlReturn.NOT_SUPPORTED, NvmlReturn.FUNCTION_NOT_FOUND})
# MIG device slots that hold no device.
_NO_DEVICE = frozenset({NvmlReturn.NOT_FOUND, NvmlReturn.INVALID_ARGUMENT})

# Features remembered as unsupported, per GPU UUID.
UTILIZATION = "utilization"
MEMORY = "memory"
MIG_MEMORY = "MIG device memory"
PROCESSES = "processes"
MIG_PROCESSES = "MIG device processes"
PROCESS_UTILIZATION = "process utilization"
GPM = "gpm"


@dataclass(frozen=True, slots=True)
class UsageTarget:
    """A GPU to sample, as the backend knows it."""

    minor: int
    uuid: str
    handle: DeviceHandle


@dataclass(slots=True)
class _Figures:
    gpus: list[GpuUsage]
    migs: list[MigUsage]
    processes: list[ProcessUsage]


@dataclass(slots=True)
class _GpmSample:
    gpu_uuid: str
    sample: GpmSampleHandle


class UsageReader:
    """Keeps what one cycle needs from the last: unsupported features, the last process
    utilisation timestamp per GPU and the previous GPM sample per MIG device."""

    def __init__(self, nvml: NvmlAdapter) -> None:
        self._nvml = nvml
        self._lock = threading.Lock()
        self._unsupported: set[tuple[str, str]] = set()
        self._capability: dict[str, tuple[int, int]] = {}
        self._last_seen_us: dict[str, int] = {}
        self._gpm_samples: dict[str, _GpmSample] = {}  # MIG device UUID -> previous sample

    def read(self, gpus: Iterable[UsageTarget]) -> UsageSample:
        with self._lock:
            figures = _Figures([], [], [])
            failures: list[UsageFailure] = []
            for gpu in gpus:
                found = _Figures([], [], [])
                try:
                    self._read_gpu(gpu, found)
                except NvmlCallError as failure:
                    failures.append(
                        UsageFailure(gpu.minor, f"GPU minor {gpu.minor} ({gpu.uuid}): {failure}")
                    )
                    continue
                figures.gpus.extend(found.gpus)
                figures.migs.extend(found.migs)
                figures.processes.extend(found.processes)
            return UsageSample(
                gpus=tuple(figures.gpus),
                mig_devices=tuple(figures.migs),
                processes=tuple(figures.processes),
                failures=tuple(failures),
            )

    def close(self) -> None:
        """Free every kept GPM sample (NVML owns their memory)."""
        with self._lock:
            samples, self._gpm_samples = self._gpm_samples, {}
            for kept in samples.values():
                self._free(kept.sample)

    # One GPU -------------------------------------------------------------------------------

    def _read_gpu(self, gpu: UsageTarget, found: _Figures) -> None:
        handle = gpu.handle
        mig_mode = self._optional(gpu.uuid, "mig mode", lambda: self._nvml.mig_mode(handle))
        in_mig = mig_mode is not None and mig_mode[0] == _MIG_ENABLED
        memory = self._optional(gpu.uuid, MEMORY, lambda: self._nvml.memory_info(handle))
        sm: float | None = None
        if not in_mig:  # NVML has no whole-GPU utilisation in MIG mode (NOT_SUPPORTED)
            busy = self._optional(
                gpu.uuid, UTILIZATION, lambda: self._nvml.utilization_gpu_percent(handle)
            )
            sm = None if busy is None else float(busy)
        found.gpus.append(
            GpuUsage(
                minor=gpu.minor,
                uuid=gpu.uuid,
                sm_percent=sm,
                memory_used_bytes=None if memory is None else memory.used_bytes,
                memory_total_bytes=None if memory is None else memory.total_bytes,
            )
        )
        if in_mig:
            self._read_mig_devices(gpu, found)
        else:
            self._read_processes(gpu, found)

    def _read_processes(self, gpu: UsageTarget, found: _Figures) -> None:
        processes = self._optional(
            gpu.uuid, PROCESSES, lambda: self._nvml.compute_processes(gpu.handle)
        )
        if not processes:
            return
        busy = self._process_busy(gpu)
        for process in processes:
            sm: float | None = None
            if busy is not None:
                # Samples name only processes that used the SMs in the period: absent is idle.
                sm = float(busy.get(process.pid, 0))
            found.processes.append(
                ProcessUsage(process.pid, gpu.uuid, sm, process.used_memory_bytes)
            )

    def _process_busy(self, gpu: UsageTarget) -> dict[int, int] | None:
        """Highest SM percent per pid since the last cycle; None when NVML has no samples."""
        if (gpu.uuid, PROCESS_UTILIZATION) in self._unsupported:
            return None
        last_seen = self._last_seen_us.get(gpu.uuid, 0)
        try:
            samples = self._nvml.process_utilization(gpu.handle, last_seen)
        except NvmlCallError as failure:
            if failure.code == NvmlReturn.NOT_FOUND:  # no samples since `last_seen`
                return None
            if failure.code in _UNSUPPORTED:
                self._unsupported.add((gpu.uuid, PROCESS_UTILIZATION))
                return None
            raise
        if not samples:
            return None
        busy: dict[int, int] = {}
        for sample in samples:
            busy[sample.pid] = max(busy.get(sample.pid, 0), sample.sm_percent)
        self._last_seen_us[gpu.uuid] = max(last_seen, *(s.timestamp_us for s in samples))
        return busy

    def _read_mig_devices(self, gpu: UsageTarget, found: _Figures) -> None:
        gpm = self._gpm_usable(gpu)
        live: set[str] = set()
        for slot in range(self._nvml.max_mig_devices(gpu.handle)):
            try:
                mig = self._nvml.mig_device_handle(gpu.handle, slot)
            except NvmlCallError as failure:
                if failure.code in _NO_DEVICE:
                    continue
                raise
            uuid = self._nvml.uuid(mig)
            gi_id = self._nvml.mig_gpu_instance_id(mig)
            live.add(uuid)
            memory = self._optional(gpu.uuid, MIG_MEMORY, partial(self._nvml.memory_info, mig))
            sm = self._gpm_sm_percent(gpu, uuid, gi_id) if gpm else None
            found.migs.append(
                MigUsage(
                    minor=gpu.minor,
                    uuid=uuid,
                    gi_id=gi_id,
                    sm_percent=sm,
                    memory_used_bytes=None if memory is None else memory.used_bytes,
                    memory_total_bytes=None if memory is None else memory.total_bytes,
                )
            )
            processes = self._optional(
                gpu.uuid, MIG_PROCESSES, partial(self._nvml.compute_processes, mig)
            )
            for process in processes or ():
                # NVML has no per-process utilisation inside a MIG device.
                found.processes.append(
                    ProcessUsage(process.pid, uuid, None, process.used_memory_bytes)
                )
        self._forget_gpm(gpu, live)

    # GPU performance monitoring -------------------------------------------------------------

    def _gpm_usable(self, gpu: UsageTarget) -> bool:
        if (gpu.uuid, GPM) in self._unsupported:
            return False
        if gpu.uuid not in self._capability:
            self._capability[gpu.uuid] = self._nvml.compute_capability(gpu.handle)
        if self._capability[gpu.uuid][0] < GPM_MIN_COMPUTE_MAJOR:
            self._unsupported.add((gpu.uuid, GPM))
            return False
        supported = self._optional(gpu.uuid, GPM, lambda: self._nvml.gpm_supported(gpu.handle))
        if not supported:
            self._unsupported.add((gpu.uuid, GPM))
            return False
        return True

    def _gpm_sm_percent(self, gpu: UsageTarget, uuid: str, gi_id: int) -> float | None:
        """SM activity since the previous cycle's sample of this MIG device."""
        sample = self._nvml.gpm_sample_alloc()
        try:
            self._nvml.gpm_mig_sample(gpu.handle, gi_id, sample)
        except NvmlCallError as failure:
            self._free(sample)
            if failure.code in _UNSUPPORTED:
                self._unsupported.add((gpu.uuid, GPM))
                return None
            raise
        previous = self._gpm_samples.get(uuid)
        self._gpm_samples[uuid] = _GpmSample(gpu.uuid, sample)
        if previous is None:
            return None
        try:
            return self._nvml.gpm_sm_util(previous.sample, sample)
        except NvmlCallError as failure:
            if failure.code in _UNSUPPORTED:
                self._unsupported.add((gpu.uuid, GPM))
                return None
            raise
        finally:
            self._free(previous.sample)

    def _forget_gpm(self, gpu: UsageTarget, live: set[str]) -> None:
        """Free the kept samples of this GPU's MIG devices that are gone (or no longer sampled)."""
        gone = [
            uuid
            for uuid, kept in self._gpm_samples.items()
            if kept.gpu_uuid == gpu.uuid and uuid not in live
        ]
        for uuid in gone:
            kept = self._gpm_samples.pop(uuid)
            self._free(kept.sample)

    def _free(self, sample: GpmSampleHandle) -> None:
        # Nothing more can be done with memory NVML refuses to take back.
        with contextlib.suppress(NvmlCallError):
            self._nvml.gpm_sample_free(sample)

    # Helpers ---------------------------------------------------------------------------------

    def _optional(self, uuid: str, feature: str, read: Callable[[], T]) -> T | None:
        """A figure the GPU may not have: None (and remembered) when NVML says unsupported."""
        if (uuid, feature) in self._unsupported:
            return None
        try:
            return read()
        except NvmlCallError as failure:
            if failure.code in _UNSUPPORTED:
                self._unsupported.add((uuid, feature))
                return None
            raise
