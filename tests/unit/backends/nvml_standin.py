"""A stand-in for the `pynvml` module, modelling a small machine in memory.

It behaves like the real binding where the backend could get it wrong:

- errors are raised as `NVMLError(code)`, which (like pynvml) turns itself into the per-code
  subclass `NVMLError_NotFound` etc. and carries `.value`;
- return values are the real pynvml ctypes structures, handles are real ctypes pointers, and the
  list calls fill caller-allocated ctypes arrays through `byref` counts;
- constants and structure types are taken from the installed pynvml, so they cannot drift;
- MIG profile info is looked up by *index* (NOT_SUPPORTED for indices the GPU lacks,
  INVALID_ARGUMENT past the last index the "driver" knows), while placements, creation and
  listing take the profile *id* and answer INVALID_ARGUMENT to anything else.

The H100 profile table comes from the packaged hardware facts (dra_driver/data/gpu_profiles.json).
Every call is recorded in `calls`; `fail(name, code)` makes the next call of `name` fail.
"""

# The stand-in must use pynvml's own names, which are camelCase.
# ruff: noqa: N802, N803, N815

from __future__ import annotations

import ctypes
import os
import string
import uuid as uuidlib
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pynvml as _real

from dra_driver.backends.nvml import NvmlBackend
from dra_driver.inventory.model import MigProfile
from dra_driver.inventory.products import product

# ---------------------------------------------------------------------------------------------
# The error hierarchy, built the way pynvml builds it.


class NVMLError(Exception):
    _valClassMapping: dict[int, type[NVMLError]] = {}
    value: int

    def __new__(cls, value: int) -> NVMLError:
        target = NVMLError._valClassMapping.get(value, cls) if cls is NVMLError else cls
        obj = Exception.__new__(target)
        obj.value = value
        return obj

    def __str__(self) -> str:
        value = self.value
        return str(_real.NVMLError._errcode_to_string.get(value, f"NVML Error with code {value}"))

    def __eq__(self, other: object) -> bool:
        return bool(self.value == getattr(other, "value", None))

    __hash__ = None  # type: ignore[assignment]  # like pynvml: __eq__ without __hash__


def _error_subclasses() -> dict[str, type[NVMLError]]:
    made: dict[str, type[NVMLError]] = {}
    for name in dir(_real):
        if not name.startswith("NVML_ERROR_"):
            continue
        value = getattr(_real, name)
        class_name = "NVMLError_" + string.capwords(name.replace("NVML_ERROR_", ""), "_").replace(
            "_", ""
        )

        def new(cls: type[NVMLError], *args: object, _value: int = value) -> NVMLError:
            return NVMLError.__new__(cls, _value)

        subclass = type(class_name, (NVMLError,), {"__new__": new})
        NVMLError._valClassMapping[value] = subclass
        made[class_name] = subclass
    return made


ERROR_CLASSES = _error_subclasses()

SUCCESS: int = _real.NVML_SUCCESS
NOT_SUPPORTED = _real.NVML_ERROR_NOT_SUPPORTED
INVALID_ARGUMENT = _real.NVML_ERROR_INVALID_ARGUMENT
NOT_FOUND = _real.NVML_ERROR_NOT_FOUND
IN_USE = _real.NVML_ERROR_IN_USE
INSUFFICIENT_RESOURCES = _real.NVML_ERROR_INSUFFICIENT_RESOURCES
INSUFFICIENT_SIZE = _real.NVML_ERROR_INSUFFICIENT_SIZE
FUNCTION_NOT_FOUND = _real.NVML_ERROR_FUNCTION_NOT_FOUND
GPU_IS_LOST = _real.NVML_ERROR_GPU_IS_LOST
TIMEOUT = _real.NVML_ERROR_TIMEOUT
XID_EVENT: int = _real.nvmlEventTypeXidCriticalError

# ---------------------------------------------------------------------------------------------
# The machine.

# CI profile index -> compute slices, for the indices an H100 supports.
_CI_SLICES = {0: 1, 1: 2, 2: 3, 3: 4, 4: 7}


@dataclass
class ComputeInstance:
    id: int
    profile_id: int
    slices: int
    busy: bool = False


@dataclass
class GpuInstance:
    id: int
    profile: MigProfile
    start: int
    size: int
    compute_instances: dict[int, ComputeInstance] = field(default_factory=dict)
    alive: bool = True


@dataclass
class Gpu:
    minor: int
    uuid: str
    name: str
    bus_id: str  # NVML spelling, 8-digit domain
    architecture: int
    compute_capability: tuple[int, int]
    memory_mib: int
    multiprocessors: int
    cores: int | None
    brand: int = _real.NVML_BRAND_NVIDIA
    attributes_on_full_gpu: bool = False
    numa_node: int | None = None
    mig_capable: bool = False
    mig_enabled: bool = False
    profiles: tuple[MigProfile, ...] = ()
    nvlink_count: int = 0
    nvlinks: dict[int, str] = field(default_factory=dict)
    # (cluster uuid, clique id, state, status) or None for NOT_SUPPORTED
    fabric: tuple[bytes, int, int, int] | None = None
    events_supported: bool = True
    lost: bool = False
    gpu_instances: dict[int, GpuInstance] = field(default_factory=dict)
    # Usage: whole-GPU SM percent, running processes, per-process utilisation samples
    # (pid, timestamp in microseconds, SM percent) and the SM percent GPM reports per GPU
    # instance between two samples.
    sm_percent: int = 0
    utilization_supported: bool = True
    processes: list[Process] = field(default_factory=list)
    process_samples: list[tuple[int, int, int]] = field(default_factory=list)
    # Processes that keep running kernels (pid -> SM percent): the driver keeps sampling them,
    # so every call finds a sample of each newer than the one before.
    busy_processes: dict[int, int] = field(default_factory=dict)
    process_utilization_supported: bool = True
    gpm_sm_percent: dict[int, float] = field(default_factory=dict)

    @property
    def gpm_capable(self) -> bool:
        return self.compute_capability[0] >= 9


@dataclass
class Process:
    """A compute process; `gi_id` None on a GPU without MIG, else the GPU instance it runs in."""

    pid: int
    memory_bytes: int
    gi_id: int | None = None


@dataclass(frozen=True)
class MigRef:
    gpu: Gpu
    gi_id: int
    ci_id: int


def h100(minor: int, uuid: str, bus_id: str, *, mig_enabled: bool) -> Gpu:
    facts = product("H100-SXM5-80GB")
    return Gpu(
        minor=minor,
        uuid=uuid,
        name=facts.product_name,
        bus_id=bus_id,
        architecture=_real.NVML_DEVICE_ARCH_HOPPER,
        compute_capability=(9, 0),
        memory_mib=facts.memory_mib,
        multiprocessors=facts.multiprocessors,
        cores=facts.multiprocessors * 128,
        mig_capable=True,
        mig_enabled=mig_enabled,
        profiles=facts.mig_profiles,
        nvlink_count=18,
    )


def a100(minor: int, uuid: str, bus_id: str, *, mig_enabled: bool) -> Gpu:
    facts = product("A100-SXM4-40GB")
    return Gpu(
        minor=minor,
        uuid=uuid,
        name=facts.product_name,
        bus_id=bus_id,
        architecture=_real.NVML_DEVICE_ARCH_AMPERE,
        compute_capability=(8, 0),
        memory_mib=facts.memory_mib,
        multiprocessors=facts.multiprocessors,
        cores=facts.multiprocessors * 64,
        mig_capable=True,
        mig_enabled=mig_enabled,
        profiles=facts.mig_profiles,
        nvlink_count=12,
    )


def l40s(minor: int, uuid: str, bus_id: str) -> Gpu:
    return Gpu(
        minor=minor,
        uuid=uuid,
        name="NVIDIA L40S",
        bus_id=bus_id,
        architecture=_real.NVML_DEVICE_ARCH_ADA,
        compute_capability=(8, 9),
        memory_mib=46068,
        multiprocessors=142,
        cores=142 * 128,
        events_supported=False,
    )


H100_A = "GPU-aaaaaaaa-0000-4000-8000-000000000001"
H100_B = "GPU-bbbbbbbb-0000-4000-8000-000000000002"
L40S = "GPU-cccccccc-0000-4000-8000-000000000003"
NVSWITCH_BUS = "00000000:C1:00.0"


def small_machine() -> list[Gpu]:
    """Enumeration order differs from minor order on purpose: index 0 is minor 2.

    - minor 0: H100, MIG enabled, NUMA 0 from NVML, NVLink to minor 2 and to an NVSwitch;
    - minor 1: L40S without MIG, NVLink or events, NUMA only in sysfs;
    - minor 2: H100, MIG capable but disabled, NVLink to minor 0 and the same NVSwitch.
    """
    a = h100(0, H100_A, "00000000:18:00.0", mig_enabled=True)
    a.numa_node = 0
    a.nvlinks = {0: "00000000:2A:00.0", 1: NVSWITCH_BUS}
    b = h100(2, H100_B, "00000000:2A:00.0", mig_enabled=False)
    b.nvlinks = {0: "00000000:18:00.0", 3: NVSWITCH_BUS}
    c = l40s(1, L40S, "00000000:3B:00.0")
    return [b, a, c]


class _Handles:
    """Real ctypes pointers standing for NVML objects, resolvable back to the Python object."""

    def __init__(self, pointer_type: Any) -> None:
        self._type = pointer_type
        self._keep: list[Any] = []
        self._targets: dict[int, object] = {}
        self._by_key: dict[object, Any] = {}

    def handle(self, target: object, key: object) -> Any:
        if key not in self._by_key:
            struct = self._type._type_()
            self._keep.append(struct)
            self._targets[ctypes.addressof(struct)] = target
            self._by_key[key] = struct
        return ctypes.pointer(self._by_key[key])

    def resolve(self, handle: Any) -> object:
        if not isinstance(handle, self._type) or not handle:
            raise NVMLError(INVALID_ARGUMENT)
        target = self._targets.get(ctypes.addressof(handle.contents))
        if target is None:
            raise NVMLError(INVALID_ARGUMENT)
        return target


class _EventSet:
    def __init__(self) -> None:
        self.devices: set[int] = set()
        self.queue: deque[tuple[int, int, int]] = deque()
        self.freed = False


def _deref(ref: Any) -> Any:
    """What a `byref()` or `pointer()` argument points at; anything else is a caller bug."""
    if hasattr(ref, "_obj"):
        return ref._obj
    if isinstance(ref, ctypes._Pointer):
        return ref.contents
    raise TypeError(f"expected a pointer argument, got {type(ref).__name__}")


class StandInNvml:
    """The module object handed to NvmlBackend(nvml=...)."""

    NVMLError = NVMLError
    # Structures the caller allocates, straight from pynvml.
    c_nvmlGpuInstancePlacement_t = _real.c_nvmlGpuInstancePlacement_t
    c_nvmlGpuInstance_t = _real.c_nvmlGpuInstance_t
    c_nvmlComputeInstance_t = _real.c_nvmlComputeInstance_t
    c_nvmlGpuFabricInfoV_t = _real.c_nvmlGpuFabricInfoV_t
    c_nvmlGpuFabricInfo_t = _real.c_nvmlGpuFabricInfo_t
    c_nvmlGpmMetricsGet_t = _real.c_nvmlGpmMetricsGet_t

    def __init__(self, gpus: Iterable[Gpu] | None = None) -> None:
        self.gpus = list(gpus) if gpus is not None else small_machine()
        self.driver_version = "580.65.06"
        self.cuda_version = 12080
        self.has_cuda_v2 = True
        self.has_profile_info_v2 = True
        # Profile indices the "driver" knows; beyond them profile info is INVALID_ARGUMENT.
        self.driver_profile_count = 12
        # Older drivers: placements answer NOT_SUPPORTED until MIG is enabled.
        self.placements_need_mig = False
        self.ci_profile_ids: dict[int, int] = {}  # CI index -> id override (real: id == index)
        self.event_sets_supported = True
        self.init_error: int | None = None
        self.initialised = 0
        self.shutdowns = 0
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.raised: list[tuple[str, int]] = []
        self._failures: dict[str, deque[int]] = {}
        self._devices = _Handles(_real.c_nvmlDevice_t)
        self._gis = _Handles(_real.c_nvmlGpuInstance_t)
        self._cis = _Handles(_real.c_nvmlComputeInstance_t)
        self._event_sets: list[_EventSet] = []
        # GPM samples: address -> (GPU, GI id, sequence number) once filled, None while empty.
        self._gpm_samples: dict[int, tuple[Gpu, int, int] | None] = {}
        self._gpm_keep: list[Any] = []
        self._gpm_sequence = 0
        self.wait_timeouts: list[int] = []
        # Where the "kernel driver" publishes MIG capabilities, as the real one does when an
        # instance is created: /proc/driver/nvidia/capabilities/gpuN/mig/giX[/ciY]/access
        # ("DeviceFileMinor: M") and the matching /dev/nvidia-caps/nvidia-capM node. None: not
        # modelled (most tests only look at NVML).
        self.proc_root: Path | None = None
        self.dev_root: Path | None = None

    # Test controls -------------------------------------------------------------------------

    def gpu(self, minor: int) -> Gpu:
        return next(g for g in self.gpus if g.minor == minor)

    def fail(self, function: str, code: int, times: int = 1) -> None:
        self._failures.setdefault(function, deque()).extend([code] * times)

    def device_of(self, handle: object) -> Gpu | MigRef | None:
        """The GPU or MIG device a device handle stands for; None for anything else."""
        try:
            target = self._devices.resolve(handle)
        except NVMLError:
            return None
        return target if isinstance(target, Gpu | MigRef) else None

    def called(self, function: str) -> list[tuple[Any, ...]]:
        return [args for name, args in self.calls if name == function]

    def emit(self, minor: int, xid: int, event_type: int = XID_EVENT) -> None:
        gpu = self.gpu(minor)
        for event_set in self._event_sets:
            if id(gpu) in event_set.devices and not event_set.freed:
                event_set.queue.append((id(gpu), event_type, xid))

    # Plumbing ------------------------------------------------------------------------------

    def _enter(self, function: str, *args: Any) -> None:
        self.calls.append((function, args))
        pending = self._failures.get(function)
        if pending:
            self._raise(function, pending.popleft())

    def _raise(self, function: str, code: int) -> None:
        self.raised.append((function, code))
        raise NVMLError(code)

    def _check(self, function: str, condition: bool, code: int) -> None:
        if not condition:
            self._raise(function, code)

    def _full(self, function: str, handle: Any) -> Gpu:
        target = self._devices.resolve(handle)
        if not isinstance(target, Gpu):
            self._raise(function, INVALID_ARGUMENT)
        assert isinstance(target, Gpu)
        self._check(function, not target.lost, GPU_IS_LOST)
        return target

    def _any_device(self, function: str, handle: Any) -> Gpu | MigRef:
        target = self._devices.resolve(handle)
        assert isinstance(target, Gpu | MigRef)
        gpu = target if isinstance(target, Gpu) else target.gpu
        self._check(function, not gpu.lost, GPU_IS_LOST)
        return target

    def _mig(self, function: str, handle: Any) -> tuple[MigRef, GpuInstance, ComputeInstance]:
        target = self._any_device(function, handle)
        if not isinstance(target, MigRef):
            self._raise(function, INVALID_ARGUMENT)
        assert isinstance(target, MigRef)
        gi = target.gpu.gpu_instances.get(target.gi_id)
        ci = gi.compute_instances.get(target.ci_id) if gi else None
        if gi is None or ci is None:
            self._raise(function, NOT_FOUND)
        assert gi is not None and ci is not None
        return target, gi, ci

    def _gi(self, function: str, handle: Any) -> tuple[Gpu, GpuInstance]:
        target = self._gis.resolve(handle)
        assert isinstance(target, tuple)
        gpu, gi = target
        self._check(function, not gpu.lost, GPU_IS_LOST)
        self._check(function, gi.alive, NOT_FOUND)
        return gpu, gi

    def _mig_on(self, function: str, gpu: Gpu) -> None:
        self._check(function, gpu.mig_capable and gpu.mig_enabled, NOT_SUPPORTED)

    def _gi_profile(self, function: str, gpu: Gpu, profile_id: int) -> MigProfile:
        for profile in gpu.profiles:
            if profile.gi_profile_id == profile_id:
                return profile
        self._raise(function, INVALID_ARGUMENT)
        raise AssertionError  # unreachable

    def _ci_profiles(self, gi: GpuInstance) -> dict[int, tuple[int, int]]:
        """CI index -> (id, slices) for the CI profiles this GPU instance supports."""
        return {
            index: (self.ci_profile_ids.get(index, index), slices)
            for index, slices in _CI_SLICES.items()
            if slices <= gi.profile.slice_count
        }

    @staticmethod
    def _pci(bus_id: str) -> Any:
        info = _real.nvmlPciInfo_t()
        info.busId = bus_id
        info.busIdLegacy = bus_id
        domain, bus, rest = bus_id.split(":")
        info.domain = int(domain, 16)
        info.bus = int(bus, 16)
        info.device = int(rest.split(".")[0], 16)
        return info

    # Library -------------------------------------------------------------------------------

    def nvmlInit(self) -> None:
        self._enter("nvmlInit")
        if self.init_error is not None:
            self._raise("nvmlInit", self.init_error)
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self._check("nvmlShutdown", self.initialised > 0, _real.NVML_ERROR_UNINITIALIZED)
        self.initialised -= 1
        self.shutdowns += 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter("nvmlSystemGetDriverVersion")
        return self.driver_version

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._enter("nvmlSystemGetCudaDriverVersion")
        return self.cuda_version

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        self._enter("nvmlSystemGetCudaDriverVersion_v2")
        self._check("nvmlSystemGetCudaDriverVersion_v2", self.has_cuda_v2, FUNCTION_NOT_FOUND)
        return self.cuda_version

    # Devices -------------------------------------------------------------------------------

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        self._enter("nvmlDeviceGetHandleByIndex", index)
        self._check("nvmlDeviceGetHandleByIndex", 0 <= index < len(self.gpus), INVALID_ARGUMENT)
        gpu = self.gpus[index]
        return self._devices.handle(gpu, ("gpu", gpu.uuid))

    def nvmlDeviceGetMinorNumber(self, handle: Any) -> int:
        self._enter("nvmlDeviceGetMinorNumber", handle)
        return self._full("nvmlDeviceGetMinorNumber", handle).minor

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        self._enter("nvmlDeviceGetUUID", handle)
        target = self._any_device("nvmlDeviceGetUUID", handle)
        if isinstance(target, Gpu):
            return target.uuid
        self._mig("nvmlDeviceGetUUID", handle)
        key = f"{target.gpu.uuid}/{target.gi_id}/{target.ci_id}"
        return f"MIG-{uuidlib.uuid5(uuidlib.NAMESPACE_URL, key)}"

    def nvmlDeviceGetName(self, handle: Any) -> str:
        self._enter("nvmlDeviceGetName", handle)
        target = self._any_device("nvmlDeviceGetName", handle)
        if isinstance(target, Gpu):
            return target.name
        _, gi, _ = self._mig("nvmlDeviceGetName", handle)
        return f"{target.gpu.name} MIG {gi.profile.name}"

    def nvmlDeviceGetBrand(self, handle: Any) -> int:
        self._enter("nvmlDeviceGetBrand", handle)
        return self._full("nvmlDeviceGetBrand", handle).brand

    def nvmlDeviceGetArchitecture(self, handle: Any) -> int:
        self._enter("nvmlDeviceGetArchitecture", handle)
        return self._full("nvmlDeviceGetArchitecture", handle).architecture

    def nvmlDeviceGetCudaComputeCapability(self, handle: Any) -> tuple[int, int]:
        self._enter("nvmlDeviceGetCudaComputeCapability", handle)
        return self._full("nvmlDeviceGetCudaComputeCapability", handle).compute_capability

    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: Any = None) -> Any:
        name = "nvmlDeviceGetMemoryInfo"
        self._enter(name, handle)
        target = self._any_device(name, handle)
        memory = _real.c_nvmlMemory_t()
        if isinstance(target, Gpu):
            memory.total = target.memory_mib * 1024 * 1024
            memory.used = sum(p.memory_bytes for p in target.processes)
        else:
            _, gi, _ = self._mig(name, handle)
            memory.total = gi.profile.memory_mib * 1024 * 1024
            memory.used = sum(p.memory_bytes for p in self._processes_of(target))
        memory.free = memory.total - memory.used
        return memory

    def nvmlDeviceGetAttributes(self, handle: Any) -> Any:
        self._enter("nvmlDeviceGetAttributes", handle)
        target = self._any_device("nvmlDeviceGetAttributes", handle)
        attributes = _real.c_nvmlDeviceAttributes()
        if isinstance(target, Gpu):
            self._check("nvmlDeviceGetAttributes", target.attributes_on_full_gpu, NOT_SUPPORTED)
            attributes.multiprocessorCount = target.multiprocessors
            attributes.memorySizeMB = target.memory_mib
            return attributes
        _, gi, _ = self._mig("nvmlDeviceGetAttributes", handle)
        attributes.multiprocessorCount = gi.profile.multiprocessors
        attributes.memorySizeMB = gi.profile.memory_mib
        attributes.gpuInstanceSliceCount = gi.profile.slice_count
        return attributes

    def nvmlDeviceGetNumGpuCores(self, handle: Any) -> int:
        self._enter("nvmlDeviceGetNumGpuCores", handle)
        gpu = self._full("nvmlDeviceGetNumGpuCores", handle)
        self._check("nvmlDeviceGetNumGpuCores", gpu.cores is not None, NOT_SUPPORTED)
        assert gpu.cores is not None
        return gpu.cores

    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any:
        self._enter("nvmlDeviceGetPciInfo", handle)
        return self._pci(self._full("nvmlDeviceGetPciInfo", handle).bus_id)

    def nvmlDeviceGetNumaNodeId(self, handle: Any) -> int:
        self._enter("nvmlDeviceGetNumaNodeId", handle)
        gpu = self._full("nvmlDeviceGetNumaNodeId", handle)
        self._check("nvmlDeviceGetNumaNodeId", gpu.numa_node is not None, NOT_SUPPORTED)
        assert gpu.numa_node is not None
        return gpu.numa_node

    def nvmlDeviceGetMigMode(self, handle: Any) -> list[int]:
        self._enter("nvmlDeviceGetMigMode", handle)
        gpu = self._full("nvmlDeviceGetMigMode", handle)
        self._check("nvmlDeviceGetMigMode", gpu.mig_capable, NOT_SUPPORTED)
        mode = int(gpu.mig_enabled)
        return [mode, mode]

    # Interconnect --------------------------------------------------------------------------

    def nvmlDeviceGetGpuFabricInfoV(self, handle: Any, info_ref: Any) -> int:
        self._enter("nvmlDeviceGetGpuFabricInfoV", handle)
        gpu = self._full("nvmlDeviceGetGpuFabricInfoV", handle)
        info = _deref(info_ref)
        self._check(
            "nvmlDeviceGetGpuFabricInfoV",
            isinstance(info, _real.c_nvmlGpuFabricInfo_v2_t)
            and info.version == _real.nvmlGpuFabricInfo_v2,
            _real.NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
        )
        self._check("nvmlDeviceGetGpuFabricInfoV", gpu.fabric is not None, NOT_SUPPORTED)
        assert gpu.fabric is not None
        cluster, clique, state, status = gpu.fabric
        info.clusterUuid = (ctypes.c_uint8 * 16)(*cluster)
        info.cliqueId = clique
        info.state = state
        info.status = status
        return SUCCESS

    def nvmlDeviceGetNvLinkState(self, handle: Any, link: int) -> int:
        self._enter("nvmlDeviceGetNvLinkState", handle, link)
        gpu = self._full("nvmlDeviceGetNvLinkState", handle)
        self._check("nvmlDeviceGetNvLinkState", gpu.nvlink_count > 0, NOT_SUPPORTED)
        self._check("nvmlDeviceGetNvLinkState", link < gpu.nvlink_count, INVALID_ARGUMENT)
        return int(link in gpu.nvlinks)  # NVML_FEATURE_ENABLED / NVML_FEATURE_DISABLED

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: Any, link: int) -> Any:
        self._enter("nvmlDeviceGetNvLinkRemotePciInfo", handle, link)
        gpu = self._full("nvmlDeviceGetNvLinkRemotePciInfo", handle)
        self._check("nvmlDeviceGetNvLinkRemotePciInfo", link in gpu.nvlinks, NOT_SUPPORTED)
        return self._pci(gpu.nvlinks[link])

    # MIG profiles --------------------------------------------------------------------------

    def nvmlDeviceGetGpuInstanceProfileInfo(
        self, handle: Any, profile: int, version: int = 2
    ) -> Any:
        name = "nvmlDeviceGetGpuInstanceProfileInfo"
        self._enter(name, handle, profile, version)
        gpu = self._full(name, handle)
        if version == 2:
            self._check(name, self.has_profile_info_v2, FUNCTION_NOT_FOUND)
        self._check(name, gpu.mig_capable, NOT_SUPPORTED)
        self._check(name, 0 <= profile < self.driver_profile_count, INVALID_ARGUMENT)
        found = [p for p in gpu.profiles if p.profile_index == profile]
        self._check(name, bool(found), NOT_SUPPORTED)
        facts = found[0]
        if version == 2:
            info = _real.c_nvmlGpuInstanceProfileInfo_v2_t()
            info.name = f"MIG {facts.name}"
        else:
            info = _real.c_nvmlGpuInstanceProfileInfo_t()
        info.id = facts.gi_profile_id
        info.isP2pSupported = 0
        info.sliceCount = facts.slice_count
        info.instanceCount = facts.instance_count
        info.multiprocessorCount = facts.multiprocessors
        info.copyEngineCount = facts.copy_engines
        info.decoderCount = facts.decoders
        info.encoderCount = facts.encoders
        info.jpegCount = facts.jpeg_engines
        info.ofaCount = facts.ofa_engines
        info.memorySizeMB = facts.memory_mib
        return info

    def nvmlDeviceGetGpuInstancePossiblePlacements(
        self, handle: Any, profile_id: int, placements: Any, count_ref: Any
    ) -> int:
        name = "nvmlDeviceGetGpuInstancePossiblePlacements"
        self._enter(name, handle, profile_id)
        gpu = self._full(name, handle)
        self._check(name, gpu.mig_capable, NOT_SUPPORTED)
        self._check(name, gpu.mig_enabled or not self.placements_need_mig, NOT_SUPPORTED)
        facts = self._gi_profile(name, gpu, profile_id)
        count = _deref(count_ref)
        count.value = len(facts.placements)
        if placements is None:
            return SUCCESS
        self._check(name, len(placements) >= len(facts.placements), INSUFFICIENT_SIZE)
        for slot, placement in enumerate(facts.placements):
            placements[slot].start = placement.start
            placements[slot].size = placement.size
        return SUCCESS

    # GPU instances -------------------------------------------------------------------------

    def nvmlDeviceCreateGpuInstanceWithPlacement(
        self, handle: Any, profile_id: int, placement_ref: Any
    ) -> Any:
        name = "nvmlDeviceCreateGpuInstanceWithPlacement"
        placement = _deref(placement_ref)
        self._enter(name, handle, profile_id, (placement.start, placement.size))
        gpu = self._full(name, handle)
        self._mig_on(name, gpu)
        facts = self._gi_profile(name, gpu, profile_id)
        wanted = (placement.start, placement.size)
        self._check(name, wanted in [(p.start, p.size) for p in facts.placements], INVALID_ARGUMENT)
        live = [gi for gi in gpu.gpu_instances.values() if gi.alive]
        for gi in live:
            if gi.start < placement.start + placement.size and placement.start < gi.start + gi.size:
                self._raise(name, INSUFFICIENT_RESOURCES)
        same = [gi for gi in live if gi.profile.gi_profile_id == profile_id]
        self._check(name, len(same) < facts.instance_count, INSUFFICIENT_RESOURCES)
        gi_id = min(set(range(32)) - {gi.id for gi in live})
        gi = GpuInstance(gi_id, facts, placement.start, placement.size)
        gpu.gpu_instances[gi_id] = gi
        self._publish_capability(gpu.minor, gi_id, None)
        return self._gis.handle((gpu, gi), (gpu.uuid, "gi", gi_id, id(gi)))

    def nvmlDeviceGetGpuInstances(
        self, handle: Any, profile_id: int, handles: Any, count_ref: Any
    ) -> int:
        name = "nvmlDeviceGetGpuInstances"
        self._enter(name, handle, profile_id)
        gpu = self._full(name, handle)
        self._mig_on(name, gpu)
        self._gi_profile(name, gpu, profile_id)
        found = sorted(
            (
                gi
                for gi in gpu.gpu_instances.values()
                if gi.alive and gi.profile.gi_profile_id == profile_id
            ),
            key=lambda gi: gi.id,
        )
        count = _deref(count_ref)
        self._check(name, len(handles) >= len(found), INSUFFICIENT_SIZE)
        for slot, gi in enumerate(found):
            handles[slot] = self._gis.handle((gpu, gi), (gpu.uuid, "gi", gi.id, id(gi)))
        count.value = len(found)
        return SUCCESS

    def nvmlDeviceGetGpuInstanceById(self, handle: Any, gi_id: int) -> Any:
        name = "nvmlDeviceGetGpuInstanceById"
        self._enter(name, handle, gi_id)
        gpu = self._full(name, handle)
        self._mig_on(name, gpu)
        gi = gpu.gpu_instances.get(gi_id)
        self._check(name, gi is not None and gi.alive, NOT_FOUND)
        assert gi is not None
        return self._gis.handle((gpu, gi), (gpu.uuid, "gi", gi.id, id(gi)))

    def nvmlGpuInstanceGetInfo(self, gi_handle: Any) -> Any:
        self._enter("nvmlGpuInstanceGetInfo", gi_handle)
        _, gi = self._gi("nvmlGpuInstanceGetInfo", gi_handle)
        info = _real.c_nvmlGpuInstanceInfo_t()
        info.id = gi.id
        info.profileId = gi.profile.gi_profile_id
        info.placement.start = gi.start
        info.placement.size = gi.size
        return info

    def nvmlGpuInstanceDestroy(self, gi_handle: Any) -> int:
        self._enter("nvmlGpuInstanceDestroy", gi_handle)
        gpu, gi = self._gi("nvmlGpuInstanceDestroy", gi_handle)
        self._check("nvmlGpuInstanceDestroy", not gi.compute_instances, IN_USE)
        gi.alive = False
        del gpu.gpu_instances[gi.id]
        self._withdraw_capability(gpu.minor, gi.id, None)
        return SUCCESS

    # Compute instances ---------------------------------------------------------------------

    def nvmlGpuInstanceGetComputeInstanceProfileInfo(
        self, gi_handle: Any, profile: int, eng_profile: int, version: int = 2
    ) -> Any:
        name = "nvmlGpuInstanceGetComputeInstanceProfileInfo"
        self._enter(name, gi_handle, profile, eng_profile)
        _, gi = self._gi(name, gi_handle)
        self._check(
            name, eng_profile == _real.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, INVALID_ARGUMENT
        )
        self._check(
            name, 0 <= profile < _real.NVML_COMPUTE_INSTANCE_PROFILE_COUNT, INVALID_ARGUMENT
        )
        supported = self._ci_profiles(gi)
        self._check(name, profile in supported, NOT_SUPPORTED)
        ci_id, slices = supported[profile]
        info = (
            _real.c_nvmlComputeInstanceProfileInfo_v2_t()
            if version == 2
            else _real.c_nvmlComputeInstanceProfileInfo_t()
        )
        info.id = ci_id
        info.sliceCount = slices
        info.instanceCount = gi.profile.slice_count // slices
        info.multiprocessorCount = gi.profile.multiprocessors * slices // gi.profile.slice_count
        if version == 2:
            info.name = f"MIG {gi.profile.name}" if slices == gi.profile.slice_count else "MIG"
        return info

    def nvmlGpuInstanceCreateComputeInstance(self, gi_handle: Any, profile_id: int) -> Any:
        name = "nvmlGpuInstanceCreateComputeInstance"
        self._enter(name, gi_handle, profile_id)
        gpu, gi = self._gi(name, gi_handle)
        by_id = {ci_id: slices for ci_id, slices in self._ci_profiles(gi).values()}
        self._check(name, profile_id in by_id, INVALID_ARGUMENT)
        used = sum(ci.slices for ci in gi.compute_instances.values())
        self._check(
            name, used + by_id[profile_id] <= gi.profile.slice_count, INSUFFICIENT_RESOURCES
        )
        ci_id = min(set(range(16)) - set(gi.compute_instances))
        ci = ComputeInstance(ci_id, profile_id, by_id[profile_id])
        gi.compute_instances[ci_id] = ci
        self._publish_capability(gpu.minor, gi.id, ci_id)
        return self._cis.handle((gpu, gi, ci), (gpu.uuid, gi.id, id(gi), ci_id, id(ci)))

    def nvmlGpuInstanceGetComputeInstances(
        self, gi_handle: Any, profile_id: int, handles: Any, count_ref: Any
    ) -> int:
        name = "nvmlGpuInstanceGetComputeInstances"
        self._enter(name, gi_handle, profile_id)
        gpu, gi = self._gi(name, gi_handle)
        found = [ci for ci in gi.compute_instances.values() if ci.profile_id == profile_id]
        count = _deref(count_ref)
        self._check(name, len(handles) >= len(found), INSUFFICIENT_SIZE)
        for slot, ci in enumerate(found):
            handles[slot] = self._cis.handle(
                (gpu, gi, ci), (gpu.uuid, gi.id, id(gi), ci.id, id(ci))
            )
        count.value = len(found)
        return SUCCESS

    def nvmlGpuInstanceGetComputeInstanceById(self, gi_handle: Any, ci_id: int) -> Any:
        name = "nvmlGpuInstanceGetComputeInstanceById"
        self._enter(name, gi_handle, ci_id)
        gpu, gi = self._gi(name, gi_handle)
        ci = gi.compute_instances.get(ci_id)
        self._check(name, ci is not None, NOT_FOUND)
        assert ci is not None
        return self._cis.handle((gpu, gi, ci), (gpu.uuid, gi.id, id(gi), ci.id, id(ci)))

    def _ci(self, function: str, ci_handle: Any) -> tuple[Gpu, GpuInstance, ComputeInstance]:
        target = self._cis.resolve(ci_handle)
        assert isinstance(target, tuple)
        gpu, gi, ci = target
        self._check(function, not gpu.lost, GPU_IS_LOST)
        self._check(function, gi.compute_instances.get(ci.id) is ci, NOT_FOUND)
        return gpu, gi, ci

    def nvmlComputeInstanceGetInfo(self, ci_handle: Any) -> Any:
        self._enter("nvmlComputeInstanceGetInfo", ci_handle)
        _, _, ci = self._ci("nvmlComputeInstanceGetInfo", ci_handle)
        info = _real.c_nvmlComputeInstanceInfo_t()
        info.id = ci.id
        info.profileId = ci.profile_id
        info.placement.start = 0
        info.placement.size = ci.slices
        return info

    def nvmlComputeInstanceDestroy(self, ci_handle: Any) -> int:
        self._enter("nvmlComputeInstanceDestroy", ci_handle)
        gpu, gi, ci = self._ci("nvmlComputeInstanceDestroy", ci_handle)
        self._check("nvmlComputeInstanceDestroy", not ci.busy, IN_USE)
        del gi.compute_instances[ci.id]
        self._withdraw_capability(gpu.minor, gi.id, ci.id)
        return SUCCESS

    def _capability_dir(self, minor: int, gi_id: int, ci_id: int | None) -> Path | None:
        if self.proc_root is None:
            return None
        path = self.proc_root / "driver/nvidia/capabilities" / f"gpu{minor}" / "mig" / f"gi{gi_id}"
        return path if ci_id is None else path / f"ci{ci_id}"

    @staticmethod
    def _capability_minor(minor: int, gi_id: int, ci_id: int | None) -> int:
        # Unique per (GPU, GI, CI); the real driver's numbering is its own business.
        return 1 + minor * 1000 + gi_id * 20 + (0 if ci_id is None else ci_id + 1)

    def _publish_capability(self, minor: int, gi_id: int, ci_id: int | None) -> None:
        path = self._capability_dir(minor, gi_id, ci_id)
        if path is None:
            return
        cap = self._capability_minor(minor, gi_id, ci_id)
        path.mkdir(parents=True, exist_ok=True)
        (path / "access").write_text(f"DeviceFileMinor: {cap}\nDeviceFileMode: 292\n")
        if self.dev_root is not None:
            (self.dev_root / "nvidia-caps").mkdir(parents=True, exist_ok=True)
            (self.dev_root / "nvidia-caps" / f"nvidia-cap{cap}").write_bytes(b"")

    def _withdraw_capability(self, minor: int, gi_id: int, ci_id: int | None) -> None:
        path = self._capability_dir(minor, gi_id, ci_id)
        if path is None:
            return
        (path / "access").unlink(missing_ok=True)
        if self.dev_root is not None:
            cap = self._capability_minor(minor, gi_id, ci_id)
            (self.dev_root / "nvidia-caps" / f"nvidia-cap{cap}").unlink(missing_ok=True)

    # MIG device handles --------------------------------------------------------------------

    def _mig_refs(self, gpu: Gpu) -> list[MigRef]:
        return [
            MigRef(gpu, gi.id, ci.id)
            for gi in sorted(gpu.gpu_instances.values(), key=lambda g: g.id)
            for ci in sorted(gi.compute_instances.values(), key=lambda c: c.id)
        ]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Any) -> int:
        self._enter("nvmlDeviceGetMaxMigDeviceCount", handle)
        gpu = self._full("nvmlDeviceGetMaxMigDeviceCount", handle)
        self._check("nvmlDeviceGetMaxMigDeviceCount", gpu.mig_capable, NOT_SUPPORTED)
        return 7 if gpu.mig_enabled else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, index: int) -> Any:
        name = "nvmlDeviceGetMigDeviceHandleByIndex"
        self._enter(name, handle, index)
        gpu = self._full(name, handle)
        self._mig_on(name, gpu)
        self._check(name, 0 <= index < 7, INVALID_ARGUMENT)
        refs = self._mig_refs(gpu)
        self._check(name, index < len(refs), NOT_FOUND)
        ref = refs[index]
        return self._devices.handle(ref, ("mig", gpu.uuid, ref.gi_id, ref.ci_id))

    def nvmlDeviceGetGpuInstanceId(self, handle: Any) -> int:
        self._enter("nvmlDeviceGetGpuInstanceId", handle)
        ref, _, _ = self._mig("nvmlDeviceGetGpuInstanceId", handle)
        return ref.gi_id

    def nvmlDeviceGetComputeInstanceId(self, handle: Any) -> int:
        self._enter("nvmlDeviceGetComputeInstanceId", handle)
        ref, _, _ = self._mig("nvmlDeviceGetComputeInstanceId", handle)
        return ref.ci_id

    # Usage -------------------------------------------------------------------------------

    def _processes_of(self, target: Gpu | MigRef) -> list[Process]:
        if isinstance(target, Gpu):
            return list(target.processes)
        return [p for p in target.gpu.processes if p.gi_id == target.gi_id]

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:
        name = "nvmlDeviceGetUtilizationRates"
        self._enter(name, handle)
        target = self._any_device(name, handle)
        # Neither a GPU in MIG mode nor a MIG device has whole-device utilisation.
        self._check(name, isinstance(target, Gpu), NOT_SUPPORTED)
        assert isinstance(target, Gpu)
        self._check(name, target.utilization_supported and not target.mig_enabled, NOT_SUPPORTED)
        rates = _real.c_nvmlUtilization_t()
        rates.gpu = target.sm_percent
        rates.memory = 0
        return rates

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]:
        name = "nvmlDeviceGetComputeRunningProcesses"
        self._enter(name, handle)
        target = self._any_device(name, handle)
        if isinstance(target, MigRef):
            self._mig(name, handle)
        found = []
        for process in self._processes_of(target):
            info = _real.c_nvmlProcessInfo_t()
            info.pid = process.pid
            info.usedGpuMemory = process.memory_bytes
            info.gpuInstanceId = 0xFFFFFFFF if process.gi_id is None else process.gi_id
            info.computeInstanceId = 0xFFFFFFFF if process.gi_id is None else 0
            found.append(_real.nvmlStructToFriendlyObject(info))
        return found

    def nvmlDeviceGetProcessUtilization(self, handle: Any, timeStamp: int) -> list[Any]:
        name = "nvmlDeviceGetProcessUtilization"
        self._enter(name, handle, timeStamp)
        target = self._any_device(name, handle)
        self._check(name, isinstance(target, Gpu), NOT_SUPPORTED)
        assert isinstance(target, Gpu)
        self._check(
            name, target.process_utilization_supported and not target.mig_enabled, NOT_SUPPORTED
        )
        for pid, sm in target.busy_processes.items():
            latest = max((s[1] for s in target.process_samples), default=timeStamp)
            target.process_samples.append((pid, max(latest, timeStamp) + 1, sm))
        newer = [s for s in target.process_samples if s[1] > timeStamp]
        # What the real library answers when nothing was sampled since `timeStamp`.
        self._check(name, bool(newer), NOT_FOUND)
        samples = []
        for pid, stamp, sm in newer:
            sample = _real.c_nvmlProcessUtilizationSample_t()
            sample.pid = pid
            sample.timeStamp = stamp
            sample.smUtil = sm
            samples.append(sample)
        return samples

    def nvmlGpmQueryDeviceSupport(self, handle: Any) -> Any:
        name = "nvmlGpmQueryDeviceSupport"
        self._enter(name, handle)
        gpu = self._full(name, handle)
        support = _real.c_nvmlGpmSupport_t()
        support.version = _real.NVML_GPM_SUPPORT_VERSION
        support.isSupportedDevice = int(gpu.gpm_capable)
        return support

    def nvmlGpmSampleAlloc(self) -> Any:
        self._enter("nvmlGpmSampleAlloc")
        struct = _real.struct_c_nvmlGpmSample_t()
        self._gpm_keep.append(struct)
        self._gpm_samples[ctypes.addressof(struct)] = None
        return ctypes.pointer(struct)

    def _gpm_address(self, function: str, sample: Any) -> int:
        address = ctypes.addressof(sample.contents) if sample else 0
        self._check(function, address in self._gpm_samples, INVALID_ARGUMENT)
        return address

    def nvmlGpmSampleFree(self, gpmSample: Any) -> None:
        self._enter("nvmlGpmSampleFree", gpmSample)
        del self._gpm_samples[self._gpm_address("nvmlGpmSampleFree", gpmSample)]

    def nvmlGpmMigSampleGet(self, device: Any, gpuInstanceId: int, gpmSample: Any) -> Any:
        name = "nvmlGpmMigSampleGet"
        self._enter(name, device, gpuInstanceId)
        gpu = self._full(name, device)
        self._check(name, gpu.gpm_capable and gpu.mig_enabled, NOT_SUPPORTED)
        self._check(name, gpuInstanceId in gpu.gpu_instances, NOT_FOUND)
        address = self._gpm_address(name, gpmSample)
        self._gpm_sequence += 1
        self._gpm_samples[address] = (gpu, gpuInstanceId, self._gpm_sequence)
        return gpmSample

    def nvmlGpmMetricsGet(self, metricsGet: Any) -> Any:
        name = "nvmlGpmMetricsGet"
        self._enter(name, metricsGet)
        self._check(
            name, metricsGet.version == _real.NVML_GPM_METRICS_GET_VERSION, INVALID_ARGUMENT
        )
        first = self._gpm_samples.get(self._gpm_address(name, metricsGet.sample1))
        second = self._gpm_samples.get(self._gpm_address(name, metricsGet.sample2))
        self._check(name, first is not None and second is not None, INVALID_ARGUMENT)
        assert first is not None and second is not None
        same_instance = first[0] is second[0] and first[1] == second[1]
        self._check(name, same_instance and first[2] < second[2], INVALID_ARGUMENT)
        gpu, gi_id, _ = second
        for index in range(metricsGet.numMetrics):
            metric = metricsGet.metrics[index]
            if metric.metricId == _real.NVML_GPM_METRIC_SM_UTIL:
                metric.nvmlReturn = SUCCESS
                metric.value = gpu.gpm_sm_percent.get(gi_id, 0.0)
            else:
                metric.nvmlReturn = NOT_SUPPORTED
        return metricsGet

    @property
    def gpm_samples_held(self) -> int:
        """Samples allocated and not yet freed."""
        return len(self._gpm_samples)

    # Events --------------------------------------------------------------------------------

    def nvmlEventSetCreate(self) -> Any:
        self._enter("nvmlEventSetCreate")
        self._check("nvmlEventSetCreate", self.event_sets_supported, NOT_SUPPORTED)
        event_set = _EventSet()
        self._event_sets.append(event_set)
        return event_set

    def nvmlEventSetFree(self, event_set: _EventSet) -> None:
        self._enter("nvmlEventSetFree", event_set)
        event_set.freed = True

    def nvmlDeviceGetSupportedEventTypes(self, handle: Any) -> int:
        self._enter("nvmlDeviceGetSupportedEventTypes", handle)
        gpu = self._full("nvmlDeviceGetSupportedEventTypes", handle)
        self._check("nvmlDeviceGetSupportedEventTypes", gpu.events_supported, NOT_SUPPORTED)
        return XID_EVENT | int(_real.nvmlEventTypeDoubleBitEccError)

    def nvmlDeviceRegisterEvents(self, handle: Any, event_types: int, event_set: _EventSet) -> None:
        self._enter("nvmlDeviceRegisterEvents", handle, event_types)
        gpu = self._full("nvmlDeviceRegisterEvents", handle)
        self._check("nvmlDeviceRegisterEvents", gpu.events_supported, NOT_SUPPORTED)
        event_set.devices.add(id(gpu))

    def nvmlEventSetWait(self, event_set: _EventSet, timeout_ms: int) -> Any:
        self._enter("nvmlEventSetWait", event_set, timeout_ms)
        self.wait_timeouts.append(timeout_ms)
        self._check("nvmlEventSetWait", not event_set.freed, _real.NVML_ERROR_INVALID_ARGUMENT)
        if not event_set.queue:
            self._raise("nvmlEventSetWait", TIMEOUT)
        gpu_id, event_type, xid = event_set.queue.popleft()
        gpu = next(g for g in self.gpus if id(g) == gpu_id)
        data = _real.c_nvmlEventData_t()
        data.device = self._devices.handle(gpu, ("gpu", gpu.uuid))
        data.eventType = event_type
        data.eventData = xid
        data.gpuInstanceId = 0xFFFFFFFF
        data.computeInstanceId = 0xFFFFFFFF
        return data


# Copy the real module's constants onto the stand-in, so values cannot drift.
for _name in dir(_real):
    if _name.startswith(("NVML_", "nvmlEventType")) and isinstance(getattr(_real, _name), int):
        setattr(StandInNvml, _name, getattr(_real, _name))
for _name, _cls in ERROR_CLASSES.items():
    setattr(StandInNvml, _name, _cls)


def make_sysfs(root: Path, machine: StandInNvml, numa: dict[str, int] | None = None) -> Path:
    """A /sys tree with each GPU linked under a root complex named after its bus number - 1.

    `numa` maps a kernel bus id to the numa_node file's content (default -1, as on one socket).
    """
    numa = numa or {}
    for gpu in machine.gpus:
        domain, bus, rest = gpu.bus_id.lower().split(":")
        kernel_id = f"{domain[-4:]}:{bus}:{rest}"
        root_bus = f"{int(bus, 16) - 1:02x}"
        bridge = f"{domain[-4:]}:{root_bus}:01.0"
        device_dir = root / "devices" / f"pci{domain[-4:]}:{root_bus}" / bridge / kernel_id
        device_dir.mkdir(parents=True)
        (device_dir / "numa_node").write_text(f"{numa.get(kernel_id, -1)}\n")
        links = root / "bus" / "pci" / "devices"
        links.mkdir(parents=True, exist_ok=True)
        (links / kernel_id).symlink_to(os.path.relpath(device_dir, links))
    return root


def build_backend(
    tmp_path: Path,
    machine: StandInNvml | None = None,
    *,
    node_name: str = "node-a",
    **kwargs: Any,
) -> tuple[StandInNvml, NvmlBackend]:
    """A stand-in machine, its /sys tree (NUMA 1 for the L40S only) and a backend over both."""
    machine = machine or StandInNvml()
    sysfs = make_sysfs(tmp_path / "sys", machine, {"0000:3b:00.0": 1})
    return machine, NvmlBackend(node_name, nvml=machine, sysfs_root=sysfs, **kwargs)
