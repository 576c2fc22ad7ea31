"""A typed skin over the untyped pynvml module.

pynvml returns ctypes structures, raises its own exception hierarchy and needs caller-allocated
ctypes arrays for the list-returning MIG calls. All of that stays in this module: the rest of the
backend sees plain ints, strings and small frozen records, and NvmlCallError instead of NVMLError.
The module is injected, so unit tests can hand in a stand-in with the same names.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any, NewType

from dra_driver.backends.return_codes import NvmlCallError, NvmlReturn

# Opaque NVML handles. They are only ever passed back into NVML.
DeviceHandle = NewType("DeviceHandle", object)
GpuInstanceHandle = NewType("GpuInstanceHandle", object)
ComputeInstanceHandle = NewType("ComputeInstanceHandle", object)
EventSetHandle = NewType("EventSetHandle", object)
GpmSampleHandle = NewType("GpmSampleHandle", object)

# nvmlComputeInstanceEngineProfile: the only engine profile NVML defines (engines shared).
ENGINE_PROFILE_SHARED = 0
FABRIC_STATE_COMPLETED = 3
FEATURE_ENABLED = 1


@dataclass(frozen=True, slots=True)
class GiProfileInfo:
    """nvmlGpuInstanceProfileInfo_t. `name` is None when only the v1 struct (no name) exists."""

    id: int
    slice_count: int
    instance_count: int
    multiprocessors: int
    copy_engines: int
    decoders: int
    encoders: int
    jpeg_engines: int
    ofa_engines: int
    memory_mib: int
    name: str | None


@dataclass(frozen=True, slots=True)
class CiProfileInfo:
    id: int
    slice_count: int
    instance_count: int


@dataclass(frozen=True, slots=True)
class GpuInstanceInfo:
    id: int
    profile_id: int
    start: int
    size: int


@dataclass(frozen=True, slots=True)
class FabricInfo:
    cluster_uuid: bytes
    clique_id: int
    completed: bool


@dataclass(frozen=True, slots=True)
class MemoryInfo:
    used_bytes: int
    total_bytes: int


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    """One entry of nvmlDeviceGetComputeRunningProcesses; memory None where the driver cannot
    tell (pynvml maps NVML_VALUE_NOT_AVAILABLE to None)."""

    pid: int
    used_memory_bytes: int | None


@dataclass(frozen=True, slots=True)
class ProcessUtilization:
    """One entry of nvmlDeviceGetProcessUtilization."""

    pid: int
    timestamp_us: int
    sm_percent: int


@dataclass(frozen=True, slots=True)
class EventRecord:
    device: DeviceHandle
    event_type: int
    data: int


class NvmlAdapter:
    """One method per NVML call the backend makes; each raises NvmlCallError on an NVML error."""

    def __init__(self, module: Any) -> None:
        self._m = module
        self._error: type[BaseException] = module.NVMLError
        self._profile_info_v2 = True

    def _call(self, function: str, *args: Any, **kwargs: Any) -> Any:
        fn = getattr(self._m, function, None)
        if fn is None:
            # An older binding without this entry point behaves like an older library.
            raise NvmlCallError(NvmlReturn.FUNCTION_NOT_FOUND, function, "not in this pynvml")
        try:
            return fn(*args, **kwargs)
        except self._error as exc:
            code = int(getattr(exc, "value", NvmlReturn.UNKNOWN))
            raise NvmlCallError(code, function, str(exc)) from exc

    def constant(self, name: str, default: int) -> int:
        return int(getattr(self._m, name, default))

    # Library -------------------------------------------------------------------------------

    def init(self) -> None:
        self._call("nvmlInit")

    def shutdown(self) -> None:
        self._call("nvmlShutdown")

    def driver_version(self) -> str:
        return _text(self._call("nvmlSystemGetDriverVersion"))

    def cuda_driver_version(self) -> int:
        try:
            return int(self._call("nvmlSystemGetCudaDriverVersion_v2"))
        except NvmlCallError as failure:
            if failure.code != NvmlReturn.FUNCTION_NOT_FOUND:
                raise
            return int(self._call("nvmlSystemGetCudaDriverVersion"))

    # Devices -------------------------------------------------------------------------------

    def device_count(self) -> int:
        return int(self._call("nvmlDeviceGetCount"))

    def device_handle(self, index: int) -> DeviceHandle:
        return DeviceHandle(self._call("nvmlDeviceGetHandleByIndex", index))

    def minor_number(self, device: DeviceHandle) -> int:
        return int(self._call("nvmlDeviceGetMinorNumber", device))

    def uuid(self, device: DeviceHandle) -> str:
        return _text(self._call("nvmlDeviceGetUUID", device))

    def name(self, device: DeviceHandle) -> str:
        return _text(self._call("nvmlDeviceGetName", device))

    def brand(self, device: DeviceHandle) -> int:
        return int(self._call("nvmlDeviceGetBrand", device))

    def architecture(self, device: DeviceHandle) -> int:
        return int(self._call("nvmlDeviceGetArchitecture", device))

    def compute_capability(self, device: DeviceHandle) -> tuple[int, int]:
        major, minor = self._call("nvmlDeviceGetCudaComputeCapability", device)
        return int(major), int(minor)

    def memory_total_bytes(self, device: DeviceHandle) -> int:
        return int(self._call("nvmlDeviceGetMemoryInfo", device).total)

    def attribute_multiprocessors(self, device: DeviceHandle) -> int:
        return int(self._call("nvmlDeviceGetAttributes", device).multiprocessorCount)

    def gpu_cores(self, device: DeviceHandle) -> int:
        return int(self._call("nvmlDeviceGetNumGpuCores", device))

    def pci_bus_id(self, device: DeviceHandle) -> str:
        return _text(self._call("nvmlDeviceGetPciInfo", device).busId)

    def numa_node(self, device: DeviceHandle) -> int:
        return int(self._call("nvmlDeviceGetNumaNodeId", device))

    def mig_mode(self, device: DeviceHandle) -> tuple[int, int]:
        current, pending = self._call("nvmlDeviceGetMigMode", device)
        return int(current), int(pending)

    # Interconnect --------------------------------------------------------------------------

    def fabric_info(self, device: DeviceHandle) -> FabricInfo:
        try:
            info = self._m.c_nvmlGpuFabricInfoV_t()
            self._call("nvmlDeviceGetGpuFabricInfoV", device, ctypes.byref(info))
        except NvmlCallError as failure:
            if failure.code != NvmlReturn.FUNCTION_NOT_FOUND:
                raise
            info = self._m.c_nvmlGpuFabricInfo_t()
            self._call("nvmlDeviceGetGpuFabricInfo", device, ctypes.byref(info))
        completed = (
            int(info.state) == FABRIC_STATE_COMPLETED and int(info.status) == NvmlReturn.SUCCESS
        )
        return FabricInfo(bytes(info.clusterUuid), int(info.cliqueId), completed)

    def nvlink_active(self, device: DeviceHandle, link: int) -> bool:
        return int(self._call("nvmlDeviceGetNvLinkState", device, link)) == FEATURE_ENABLED

    def nvlink_remote_bus_id(self, device: DeviceHandle, link: int) -> str:
        return _text(self._call("nvmlDeviceGetNvLinkRemotePciInfo", device, link).busId)

    # MIG profiles and placements -----------------------------------------------------------

    def gpu_instance_profile(self, device: DeviceHandle, profile_index: int) -> GiProfileInfo:
        """Profile info by enum index; prefers the named (v2) struct, falls back to v1 once."""
        if self._profile_info_v2:
            try:
                info = self._call(
                    "nvmlDeviceGetGpuInstanceProfileInfo", device, profile_index, version=2
                )
                return _gi_profile(info, _text(info.name))
            except NvmlCallError as failure:
                if failure.code != NvmlReturn.FUNCTION_NOT_FOUND:
                    raise
                self._profile_info_v2 = False
        info = self._call("nvmlDeviceGetGpuInstanceProfileInfo", device, profile_index, version=1)
        return _gi_profile(info, None)

    def possible_placements(self, device: DeviceHandle, profile_id: int) -> list[tuple[int, int]]:
        """Placements for a profile *id*; asks for the count first, as NVML's API intends."""
        function = "nvmlDeviceGetGpuInstancePossiblePlacements"
        count = ctypes.c_uint(0)
        self._call(function, device, profile_id, None, ctypes.byref(count))
        if count.value == 0:
            return []
        placements = (self._m.c_nvmlGpuInstancePlacement_t * count.value)()
        self._call(function, device, profile_id, placements, ctypes.byref(count))
        return [(int(p.start), int(p.size)) for p in placements[: count.value]]

    # GPU instances -------------------------------------------------------------------------

    def create_gpu_instance(
        self, device: DeviceHandle, profile_id: int, start: int, size: int
    ) -> GpuInstanceHandle:
        placement = self._m.c_nvmlGpuInstancePlacement_t()
        placement.start = start
        placement.size = size
        return GpuInstanceHandle(
            self._call(
                "nvmlDeviceCreateGpuInstanceWithPlacement",
                device,
                profile_id,
                ctypes.byref(placement),
            )
        )

    def gpu_instances(
        self, device: DeviceHandle, profile_id: int, max_count: int
    ) -> list[GpuInstanceHandle]:
        if max_count <= 0:
            return []
        handles = (self._m.c_nvmlGpuInstance_t * max_count)()
        count = ctypes.c_uint(max_count)
        self._call("nvmlDeviceGetGpuInstances", device, profile_id, handles, ctypes.byref(count))
        return [GpuInstanceHandle(h) for h in handles[: count.value]]

    def gpu_instance_by_id(self, device: DeviceHandle, gi_id: int) -> GpuInstanceHandle:
        return GpuInstanceHandle(self._call("nvmlDeviceGetGpuInstanceById", device, gi_id))

    def gpu_instance_info(self, gpu_instance: GpuInstanceHandle) -> GpuInstanceInfo:
        info = self._call("nvmlGpuInstanceGetInfo", gpu_instance)
        return GpuInstanceInfo(
            id=int(info.id),
            profile_id=int(info.profileId),
            start=int(info.placement.start),
            size=int(info.placement.size),
        )

    def destroy_gpu_instance(self, gpu_instance: GpuInstanceHandle) -> None:
        self._call("nvmlGpuInstanceDestroy", gpu_instance)

    # Compute instances ---------------------------------------------------------------------

    def compute_instance_profile(
        self, gpu_instance: GpuInstanceHandle, profile_index: int
    ) -> CiProfileInfo:
        function = "nvmlGpuInstanceGetComputeInstanceProfileInfo"
        try:
            info = self._call(function, gpu_instance, profile_index, ENGINE_PROFILE_SHARED)
        except NvmlCallError as failure:
            # Drivers without the versioned (V) entry point still have the v1 struct.
            if failure.code != NvmlReturn.FUNCTION_NOT_FOUND:
                raise
            info = self._call(
                function, gpu_instance, profile_index, ENGINE_PROFILE_SHARED, version=1
            )
        return CiProfileInfo(int(info.id), int(info.sliceCount), int(info.instanceCount))

    def create_compute_instance(
        self, gpu_instance: GpuInstanceHandle, profile_id: int
    ) -> ComputeInstanceHandle:
        return ComputeInstanceHandle(
            self._call("nvmlGpuInstanceCreateComputeInstance", gpu_instance, profile_id)
        )

    def compute_instances(
        self, gpu_instance: GpuInstanceHandle, profile_id: int, max_count: int
    ) -> list[ComputeInstanceHandle]:
        if max_count <= 0:
            return []
        handles = (self._m.c_nvmlComputeInstance_t * max_count)()
        count = ctypes.c_uint(max_count)
        self._call(
            "nvmlGpuInstanceGetComputeInstances",
            gpu_instance,
            profile_id,
            handles,
            ctypes.byref(count),
        )
        return [ComputeInstanceHandle(h) for h in handles[: count.value]]

    def compute_instance_by_id(
        self, gpu_instance: GpuInstanceHandle, ci_id: int
    ) -> ComputeInstanceHandle:
        return ComputeInstanceHandle(
            self._call("nvmlGpuInstanceGetComputeInstanceById", gpu_instance, ci_id)
        )

    def compute_instance_id(self, compute_instance: ComputeInstanceHandle) -> int:
        return int(self._call("nvmlComputeInstanceGetInfo", compute_instance).id)

    def destroy_compute_instance(self, compute_instance: ComputeInstanceHandle) -> None:
        self._call("nvmlComputeInstanceDestroy", compute_instance)

    # MIG device handles --------------------------------------------------------------------

    def max_mig_devices(self, device: DeviceHandle) -> int:
        return int(self._call("nvmlDeviceGetMaxMigDeviceCount", device))

    def mig_device_handle(self, device: DeviceHandle, index: int) -> DeviceHandle:
        return DeviceHandle(self._call("nvmlDeviceGetMigDeviceHandleByIndex", device, index))

    def mig_gpu_instance_id(self, mig: DeviceHandle) -> int:
        return int(self._call("nvmlDeviceGetGpuInstanceId", mig))

    def mig_compute_instance_id(self, mig: DeviceHandle) -> int:
        return int(self._call("nvmlDeviceGetComputeInstanceId", mig))

    # Usage -------------------------------------------------------------------------------

    def utilization_gpu_percent(self, device: DeviceHandle) -> int:
        """SM busy percent over the driver's last sample period (NOT_SUPPORTED in MIG mode)."""
        return int(self._call("nvmlDeviceGetUtilizationRates", device).gpu)

    def memory_info(self, device: DeviceHandle) -> MemoryInfo:
        """Works on a GPU handle and on a MIG device handle (then: that device's memory)."""
        info = self._call("nvmlDeviceGetMemoryInfo", device)
        return MemoryInfo(used_bytes=int(info.used), total_bytes=int(info.total))

    def compute_processes(self, device: DeviceHandle) -> list[ProcessInfo]:
        return [
            ProcessInfo(
                pid=int(p.pid),
                used_memory_bytes=None if p.usedGpuMemory is None else int(p.usedGpuMemory),
            )
            for p in self._call("nvmlDeviceGetComputeRunningProcesses", device)
        ]

    def process_utilization(
        self, device: DeviceHandle, last_seen_us: int
    ) -> list[ProcessUtilization]:
        """Samples newer than `last_seen_us`; NOT_FOUND when there is none since then.

        pynvml raises even when the size probe answers SUCCESS (nothing to return); that case is
        an empty list here.
        """
        try:
            samples = self._call("nvmlDeviceGetProcessUtilization", device, last_seen_us)
        except NvmlCallError as failure:
            if failure.code != NvmlReturn.SUCCESS:
                raise
            return []
        return [ProcessUtilization(int(s.pid), int(s.timeStamp), int(s.smUtil)) for s in samples]

    def gpm_supported(self, device: DeviceHandle) -> bool:
        return bool(self._call("nvmlGpmQueryDeviceSupport", device).isSupportedDevice)

    def gpm_sample_alloc(self) -> GpmSampleHandle:
        return GpmSampleHandle(self._call("nvmlGpmSampleAlloc"))

    def gpm_sample_free(self, sample: GpmSampleHandle) -> None:
        self._call("nvmlGpmSampleFree", sample)

    def gpm_mig_sample(self, device: DeviceHandle, gi_id: int, sample: GpmSampleHandle) -> None:
        """Fill `sample` with the counters of GPU instance `gi_id` of the (parent) GPU."""
        self._call("nvmlGpmMigSampleGet", device, gi_id, sample)

    def gpm_sm_util(self, earlier: GpmSampleHandle, later: GpmSampleHandle) -> float:
        """Percent of SMs busy between two samples of the same GPU instance."""
        request = self._m.c_nvmlGpmMetricsGet_t()
        request.version = self.constant("NVML_GPM_METRICS_GET_VERSION", 1)
        request.numMetrics = 1
        request.sample1 = earlier
        request.sample2 = later
        request.metrics[0].metricId = self.constant("NVML_GPM_METRIC_SM_UTIL", 2)
        self._call("nvmlGpmMetricsGet", request)
        metric = request.metrics[0]
        code = int(metric.nvmlReturn)
        if code != NvmlReturn.SUCCESS:
            raise NvmlCallError(code, "nvmlGpmMetricsGet", "SM utilisation metric not returned")
        return float(metric.value)

    # Events --------------------------------------------------------------------------------

    def event_set_create(self) -> EventSetHandle:
        return EventSetHandle(self._call("nvmlEventSetCreate"))

    def event_set_free(self, event_set: EventSetHandle) -> None:
        self._call("nvmlEventSetFree", event_set)

    def supported_event_types(self, device: DeviceHandle) -> int:
        return int(self._call("nvmlDeviceGetSupportedEventTypes", device))

    def register_events(self, device: DeviceHandle, mask: int, event_set: EventSetHandle) -> None:
        self._call("nvmlDeviceRegisterEvents", device, mask, event_set)

    def wait_event(self, event_set: EventSetHandle, timeout_ms: int) -> EventRecord:
        """Raises NvmlCallError with code TIMEOUT when nothing arrived within `timeout_ms`."""
        data = self._call("nvmlEventSetWait", event_set, timeout_ms)
        return EventRecord(DeviceHandle(data.device), int(data.eventType), int(data.eventData))


def _text(value: Any) -> str:
    """pynvml hands back str on Python 3 but bytes from some raw struct fields."""
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return str(value)


def _gi_profile(info: Any, name: str | None) -> GiProfileInfo:
    return GiProfileInfo(
        id=int(info.id),
        slice_count=int(info.sliceCount),
        instance_count=int(info.instanceCount),
        multiprocessors=int(info.multiprocessorCount),
        copy_engines=int(info.copyEngineCount),
        decoders=int(info.decoderCount),
        encoders=int(info.encoderCount),
        jpeg_engines=int(info.jpegCount),
        ofa_engines=int(info.ofaCount),
        memory_mib=int(info.memorySizeMB),
        name=name,
    )
