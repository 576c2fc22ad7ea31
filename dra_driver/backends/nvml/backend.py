"""The GpuBackend that talks to real GPUs through NVML.

GPUs are addressed by minor number throughout the driver, while NVML addresses them by handle
(obtained by enumeration index, which can change between boots). This class owns that mapping,
names every failure after the GPU and the operation, and delegates the details to small modules:
adapter (pynvml calls), mig (profile walk and live MIG state), topology (PCI,
NUMA, NVLink), health (XID events), usage (utilisation and memory figures) and
`backends/timeslice.py` (nvidia-smi).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from dra_driver.backends.base import HealthEvent, TimeSliceInterval
from dra_driver.backends.errors import (
    NotFoundError,
    NotSupportedError,
    NvmlUnavailableError,
    UnknownBackendError,
)
from dra_driver.backends.nvml import mig as nvml_mig
from dra_driver.backends.nvml.adapter import DeviceHandle, FabricInfo, NvmlAdapter
from dra_driver.backends.nvml.health import XidWatcher
from dra_driver.backends.nvml.names import (
    architecture_name,
    brand_name,
    cuda_version,
    multiprocessors_from_cores,
)
from dra_driver.backends.nvml.topology import (
    fabric_domain,
    normalize_bus_id,
    nvlink_components,
    pcie_root,
    sysfs_numa_node,
)
from dra_driver.backends.nvml.usage import UsageReader, UsageTarget
from dra_driver.backends.return_codes import NvmlCallError, NvmlReturn, nvml_errors
from dra_driver.backends.timeslice import set_timeslice
from dra_driver.backends.usage import UsageSample
from dra_driver.inventory.model import (
    GpuInfo,
    GpuInstance,
    Inventory,
    MigDevice,
    MigPlacement,
    MigProfile,
)

T = TypeVar("T")

# Answers meaning "this GPU or driver cannot tell", for facts that have a fallback or a default.
_CANNOT_TELL = frozenset(
    {NvmlReturn.NOT_SUPPORTED, NvmlReturn.FUNCTION_NOT_FOUND, NvmlReturn.NO_DATA}
)
# Per-link NVLink answers for links a GPU does not have.
_NO_LINK = frozenset(
    {NvmlReturn.NOT_SUPPORTED, NvmlReturn.INVALID_ARGUMENT, NvmlReturn.FUNCTION_NOT_FOUND}
)
# SM-count probes: the attributes call is documented for MIG handles only, and a driver may
# call a full-GPU handle an invalid argument rather than unsupported.
_NO_SM_COUNT = _CANNOT_TELL | {NvmlReturn.INVALID_ARGUMENT}
# Fabric-info answers of GPUs without a fabric, including drivers that lack the struct version.
_NO_FABRIC = _CANNOT_TELL | {NvmlReturn.INVALID_ARGUMENT, NvmlReturn.ARGUMENT_VERSION_MISMATCH}
_NVLINK_MAX_LINKS = 36  # NVML_NVLINK_MAX_LINKS
_MIG_ENABLED = 1


@dataclass(frozen=True, slots=True)
class _Gpu:
    minor: int
    index: int
    uuid: str
    handle: DeviceHandle

    @property
    def label(self) -> str:
        return f"minor {self.minor} ({self.uuid})"


@dataclass(frozen=True, slots=True)
class _Topology:
    bus_id: str
    links: tuple[str, ...]
    fabric: str


class NvmlBackend:
    """GpuBackend over NVML. Construction initialises NVML; `close()` shuts it down."""

    def __init__(
        self,
        node_name: str,
        *,
        nvml: Any = None,
        nvidia_smi: str = "nvidia-smi",
        command_timeout: float = 30.0,
        sysfs_root: Path = Path("/sys"),
    ) -> None:
        self._node_name = node_name
        self._nvidia_smi = nvidia_smi
        self._command_timeout = command_timeout
        self._sysfs_root = sysfs_root
        self._nvml = NvmlAdapter(nvml if nvml is not None else _import_pynvml(self._node_label))
        with nvml_errors(self._node_label, "initialise NVML"):
            self._nvml.init()
        self._gpus: dict[int, _Gpu] = {}
        self._profiles: dict[str, tuple[MigProfile, ...]] = {}
        self._health = XidWatcher(self._nvml)
        self._usage = UsageReader(self._nvml)
        self._closed = False

    @property
    def node_name(self) -> str:
        return self._node_name

    @property
    def _node_label(self) -> str:
        return f"(node {self._node_name})"

    # Enumeration ---------------------------------------------------------------------------

    def inventory(self) -> Inventory:
        gpus = self._discover()
        # Listen for XIDs from the first inventory on, not only from the first health poll.
        self._health.ensure_registered(self._event_targets())
        with nvml_errors(self._node_label, "read driver versions"):
            driver = self._nvml.driver_version()
            cuda = cuda_version(self._nvml.cuda_driver_version())
        topologies = {gpu.minor: self._topology(gpu) for gpu in gpus}
        domains = nvlink_components(
            self._node_name,
            {t.bus_id: t.links for t in topologies.values() if not t.fabric},
        )
        infos: list[GpuInfo] = []
        mig_devices: list[MigDevice] = []
        for gpu in gpus:
            topology = topologies[gpu.minor]
            domain = topology.fabric or domains.get(topology.bus_id, "")
            info = self._gpu_info(gpu, topology.bus_id, domain, driver, cuda)
            infos.append(info)
            if info.mig_enabled:
                mig_devices.extend(self._read_mig_devices(gpu, info.mig_profiles))
        return Inventory(self._node_name, tuple(infos), tuple(mig_devices))

    def _discover(self) -> list[_Gpu]:
        """Re-read the index/minor/UUID map; sorted by minor so inventories are stable."""
        gpus: list[_Gpu] = []
        known = {gpu.index: gpu.label for gpu in self._gpus.values()}
        with nvml_errors(self._node_label, "enumerate GPUs"):
            count = self._nvml.device_count()
        for index in range(count):
            with nvml_errors(known.get(index, f"index {index}"), "identify GPU"):
                handle = self._nvml.device_handle(index)
                minor = self._nvml.minor_number(handle)
                uuid = self._nvml.uuid(handle)
            gpus.append(_Gpu(minor, index, uuid, handle))
        gpus.sort(key=lambda g: g.minor)
        self._gpus = {gpu.minor: gpu for gpu in gpus}
        return gpus

    def _gpu(self, minor: int, operation: str) -> _Gpu:
        if minor not in self._gpus:
            self._discover()
        try:
            return self._gpus[minor]
        except KeyError:
            raise NotFoundError(
                f"minor {minor}", operation, f"node {self._node_name} has no GPU with this minor"
            ) from None

    def _gpu_info(
        self, gpu: _Gpu, bus_id: str, nvlink_domain: str, driver: str, cuda: str
    ) -> GpuInfo:
        with nvml_errors(gpu.label, "read GPU properties"):
            handle = gpu.handle
            capability = self._nvml.compute_capability(handle)
            memory_bytes = self._nvml.memory_total_bytes(handle)
            mode = _optional(lambda: self._nvml.mig_mode(handle), None)
            architecture = _optional(lambda: self._nvml.architecture(handle), -1)
            product_name = self._nvml.name(handle)
            brand = brand_name(self._nvml.brand(handle))
            multiprocessors = self._multiprocessors(handle, capability)
            numa = _optional(lambda: self._nvml.numa_node(handle), -1)
        profiles = self._mig_profiles(gpu, memory_bytes) if mode is not None else ()
        return GpuInfo(
            minor=gpu.minor,
            index=gpu.index,
            uuid=gpu.uuid,
            product_name=product_name,
            brand=brand,
            architecture=architecture_name(architecture),
            cuda_compute_capability=f"{capability[0]}.{capability[1]}",
            driver_version=driver,
            cuda_driver_version=cuda,
            memory_bytes=memory_bytes,
            multiprocessors=multiprocessors,
            pci_bus_id=bus_id,
            pcie_root=pcie_root(self._sysfs_root, bus_id),
            numa_node=numa if numa >= 0 else sysfs_numa_node(self._sysfs_root, bus_id),
            nvlink_domain=nvlink_domain,
            mig_capable=mode is not None,
            mig_enabled=mode is not None and mode[0] == _MIG_ENABLED,
            memory_slices=nvml_mig.memory_slices(profiles),
            mig_profiles=profiles,
        )

    def _multiprocessors(self, handle: DeviceHandle, capability: tuple[int, int]) -> int:
        """SM count of the whole GPU.

        nvmlDeviceGetAttributes gives the exact count, but NVML documents it for MIG handles and
        some drivers refuse it on a full GPU; then the CUDA core count divided by the cores per
        SM of the architecture is used, and 0 when neither is available.
        """
        exact = _optional(lambda: self._nvml.attribute_multiprocessors(handle), 0, _NO_SM_COUNT)
        if exact > 0:
            return exact
        cores = _optional(lambda: self._nvml.gpu_cores(handle), 0, _NO_SM_COUNT)
        return multiprocessors_from_cores(cores, capability)

    def _topology(self, gpu: _Gpu) -> _Topology:
        operation = "read PCI and NVLink topology"
        with nvml_errors(gpu.label, operation):
            raw_bus_id = self._nvml.pci_bus_id(gpu.handle)
            try:
                bus_id = normalize_bus_id(raw_bus_id)
            except ValueError as exc:
                raise UnknownBackendError(gpu.label, operation, str(exc)) from exc
            fabric = self._fabric(gpu.handle)
            if fabric is not None and fabric.completed:
                domain = fabric_domain(fabric.cluster_uuid, fabric.clique_id)
                if domain:
                    return _Topology(bus_id, (), domain)
            links: list[str] = []
            for link in range(self._nvml.constant("NVML_NVLINK_MAX_LINKS", _NVLINK_MAX_LINKS)):
                try:
                    if self._nvml.nvlink_active(gpu.handle, link):
                        remote = self._nvml.nvlink_remote_bus_id(gpu.handle, link)
                        links.append(normalize_bus_id(remote))
                except NvmlCallError as failure:
                    if failure.code not in _NO_LINK:
                        raise
                except ValueError:
                    continue  # a far end without a PCI address cannot join GPUs together
        return _Topology(bus_id, tuple(links), "")

    def _fabric(self, handle: DeviceHandle) -> FabricInfo | None:
        """Fabric registration, or None where the GPU has no NVLink fabric to register with."""
        try:
            return self._nvml.fabric_info(handle)
        except NvmlCallError as failure:
            if failure.code in _NO_FABRIC:
                return None
            raise

    def _mig_profiles(self, gpu: _Gpu, memory_bytes: int) -> tuple[MigProfile, ...]:
        """Profiles are hardware facts, so one walk per GPU is kept for the process.

        An empty walk is not kept: a driver may only offer placements once MIG is enabled.
        """
        cached = self._profiles.get(gpu.uuid)
        if cached is not None:
            return cached
        count = self._nvml.constant("NVML_GPU_INSTANCE_PROFILE_COUNT", nvml_mig.GI_PROFILE_COUNT)
        with nvml_errors(gpu.label, "read MIG profiles"):
            profiles = nvml_mig.read_profiles(
                self._nvml, gpu.handle, memory_bytes // (1024 * 1024), count
            )
        if profiles:
            self._profiles[gpu.uuid] = profiles
        return profiles

    def _profiles_of(self, gpu: _Gpu) -> tuple[MigProfile, ...]:
        cached = self._profiles.get(gpu.uuid)
        if cached is not None:
            return cached
        with nvml_errors(gpu.label, "read memory size"):
            memory_bytes = self._nvml.memory_total_bytes(gpu.handle)
        return self._mig_profiles(gpu, memory_bytes)

    def _profile(self, gpu: _Gpu, name: str, operation: str) -> MigProfile:
        for profile in self._profiles_of(gpu):
            if profile.name == name:
                return profile
        raise NotSupportedError(gpu.label, operation, f"this GPU has no MIG profile {name!r}")

    def _mig_enabled(self, gpu: _Gpu) -> bool:
        with nvml_errors(gpu.label, "read MIG mode"):
            mode = _optional(lambda: self._nvml.mig_mode(gpu.handle), None)
        return mode is not None and mode[0] == _MIG_ENABLED

    def _read_mig_devices(
        self, gpu: _Gpu, profiles: tuple[MigProfile, ...]
    ) -> tuple[MigDevice, ...]:
        with nvml_errors(gpu.label, "list MIG devices"):
            return nvml_mig.read_mig_devices(self._nvml, gpu.handle, gpu.minor, gpu.uuid, profiles)

    # MIG -----------------------------------------------------------------------------------

    def possible_placements(self, minor: int, profile: str) -> tuple[MigPlacement, ...]:
        operation = f"list placements of {profile}"
        gpu = self._gpu(minor, operation)
        return self._profile(gpu, profile, operation).placements

    def create_gpu_instance(self, minor: int, profile: str, placement: MigPlacement) -> int:
        operation = f"create GPU instance {profile} at placement {placement.start}"
        gpu = self._gpu(minor, operation)
        chosen = self._profile(gpu, profile, operation)
        with nvml_errors(gpu.label, operation):
            handle = self._nvml.create_gpu_instance(
                gpu.handle, chosen.gi_profile_id, placement.start, placement.size
            )
            return self._nvml.gpu_instance_info(handle).id

    def create_compute_instance(self, minor: int, gi_id: int) -> int:
        operation = f"create compute instance in GPU instance {gi_id}"
        gpu = self._gpu(minor, operation)
        profiles = self._profiles_of(gpu)
        with nvml_errors(gpu.label, operation):
            gpu_instance = self._nvml.gpu_instance_by_id(gpu.handle, gi_id)
            info = self._nvml.gpu_instance_info(gpu_instance)
            profile = nvml_mig.profile_by_id(profiles, info.profile_id)
            if profile is None:
                raise NotSupportedError(
                    gpu.label, operation, f"unknown GPU-instance profile id {info.profile_id}"
                )
            ci_profile_id = nvml_mig.full_compute_profile_id(self._nvml, gpu_instance, profile)
            compute_instance = self._nvml.create_compute_instance(gpu_instance, ci_profile_id)
            return self._nvml.compute_instance_id(compute_instance)

    def destroy_compute_instance(self, minor: int, gi_id: int, ci_id: int) -> None:
        operation = f"destroy compute instance {ci_id} of GPU instance {gi_id}"
        gpu = self._gpu(minor, operation)
        with nvml_errors(gpu.label, operation):
            gpu_instance = self._nvml.gpu_instance_by_id(gpu.handle, gi_id)
            compute_instance = self._nvml.compute_instance_by_id(gpu_instance, ci_id)
            self._nvml.destroy_compute_instance(compute_instance)

    def destroy_gpu_instance(self, minor: int, gi_id: int) -> None:
        operation = f"destroy GPU instance {gi_id}"
        gpu = self._gpu(minor, operation)
        with nvml_errors(gpu.label, operation):
            self._nvml.destroy_gpu_instance(self._nvml.gpu_instance_by_id(gpu.handle, gi_id))

    def gpu_instances(self, minor: int) -> tuple[GpuInstance, ...]:
        operation = "list GPU instances"
        gpu = self._gpu(minor, operation)
        if not self._mig_enabled(gpu):
            return ()
        profiles = self._profiles_of(gpu)
        with nvml_errors(gpu.label, operation):
            return nvml_mig.read_gpu_instances(self._nvml, gpu.handle, gpu.minor, profiles)

    def mig_devices(self, minor: int) -> tuple[MigDevice, ...]:
        gpu = self._gpu(minor, "list MIG devices")
        if not self._mig_enabled(gpu):
            return ()
        return self._read_mig_devices(gpu, self._profiles_of(gpu))

    # Sharing and health --------------------------------------------------------------------

    def set_timeslice(self, minor: int, interval: TimeSliceInterval) -> None:
        gpu = self._gpu(minor, f"set time-slice {interval.name.lower()}")
        set_timeslice(self._nvidia_smi, gpu.label, gpu.uuid, interval, self._command_timeout)

    def health_events(self) -> tuple[HealthEvent, ...]:
        if not self._gpus:
            self._discover()
        return self._health.drain(self._event_targets())

    def stop_processes(self, pids: Sequence[int]) -> tuple[int, ...]:
        """None: NVML has no call that ends a process, and the pids it reports are the host's,
        which mean other processes in the plugin's own PID namespace; the borrowers' pods are
        evicted instead (docs/overcommit.md)."""
        return tuple(pids)

    def usage(self) -> UsageSample:
        """How each GPU is used now; a GPU whose calls fail is in `failures`, not an error."""
        if not self._gpus:
            self._discover()
        return self._usage.read(
            UsageTarget(gpu.minor, gpu.uuid, gpu.handle) for gpu in self._gpus.values()
        )

    def _event_targets(self) -> list[tuple[int, str, DeviceHandle]]:
        return [(gpu.minor, gpu.uuid, gpu.handle) for gpu in self._gpus.values()]

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._health.close()
        self._usage.close()
        with nvml_errors(self._node_label, "shut down NVML"):
            self._nvml.shutdown()

    def __enter__(self) -> NvmlBackend:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _optional(read: Callable[[], T], default: T, cannot_tell: frozenset[int] = _CANNOT_TELL) -> T:
    """A fact some GPUs or drivers cannot report: their "cannot tell" answers mean `default`."""
    try:
        return read()
    except NvmlCallError as failure:
        if failure.code in cannot_tell:
            return default
        raise


def _import_pynvml(gpu: str) -> Any:
    try:
        return importlib.import_module("pynvml")
    except ImportError as exc:
        raise NvmlUnavailableError(gpu, "import pynvml", str(exc)) from exc
