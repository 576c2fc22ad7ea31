"""Reading MIG facts and live MIG state through the adapter.

Profiles are looked up by enum *index* but everything after that (placements, creation, listing
instances) takes the profile *id* the lookup returned. Keeping the walk here, with the id carried
in MigProfile.gi_profile_id, is what keeps the two from being mixed up anywhere else.

Functions raise NvmlCallError; the backend decides which GPU and operation to blame.
"""

from __future__ import annotations

from collections.abc import Iterable

from dra_driver.backends.nvml.adapter import DeviceHandle, GpuInstanceHandle, NvmlAdapter
from dra_driver.backends.nvml.names import derive_profile_name, profile_name_from_nvml
from dra_driver.backends.return_codes import NvmlCallError, NvmlReturn
from dra_driver.inventory.model import GpuInstance, MigDevice, MigPlacement, MigProfile

# Answers that mean "this index does not exist here" during a profile walk: NOT_SUPPORTED for
# indices the GPU lacks, INVALID_ARGUMENT past the last index the driver knows.
_ABSENT = frozenset({NvmlReturn.NOT_SUPPORTED, NvmlReturn.INVALID_ARGUMENT})

# Slots of nvmlDeviceGetMigDeviceHandleByIndex that hold no device.
_NO_DEVICE = frozenset({NvmlReturn.NOT_FOUND, NvmlReturn.INVALID_ARGUMENT})

# NVML_COMPUTE_INSTANCE_PROFILE_* index with as many slices as the GPU instance: the C==G
# (full-size) compute instance. REV1 (7) and 7_SLICE_NVL (8) are deliberately absent.
FULL_CI_PROFILE_INDEX: dict[int, int] = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}

GI_PROFILE_COUNT = 18  # NVML_GPU_INSTANCE_PROFILE_COUNT in current headers
CI_PROFILE_COUNT = 9  # NVML_COMPUTE_INSTANCE_PROFILE_COUNT


def read_profiles(
    nvml: NvmlAdapter, device: DeviceHandle, total_memory_mib: int, profile_count: int
) -> tuple[MigProfile, ...]:
    """Walk profile indices 0..profile_count-1 and describe each profile the GPU offers.

    The CI profile id is set equal to its index: that held on every real GPU observed, and the
    real id can only be read from a live GPU instance (create_compute_instance does read it).
    Profiles that can take no placement are left out, since nothing could ever be created.
    """
    profiles: list[MigProfile] = []
    for index in range(profile_count):
        try:
            info = nvml.gpu_instance_profile(device, index)
        except NvmlCallError as failure:
            if failure.code in _ABSENT:
                continue
            raise
        if info.instance_count == 0:
            continue
        try:
            found = nvml.possible_placements(device, info.id)
        except NvmlCallError as failure:
            # Older drivers may refuse placements while MIG is disabled: nothing to offer yet.
            if failure.code != NvmlReturn.NOT_SUPPORTED:
                raise
            found = []
        placements = tuple(sorted(MigPlacement(start, size) for start, size in found))
        if not placements:
            continue
        if info.name:
            name = profile_name_from_nvml(info.name)
        else:
            name = derive_profile_name(index, info.slice_count, info.memory_mib, total_memory_mib)
        ci_index = FULL_CI_PROFILE_INDEX.get(info.slice_count, 0)
        profiles.append(
            MigProfile(
                name=name,
                profile_index=index,
                gi_profile_id=info.id,
                ci_profile_index=ci_index,
                ci_profile_id=ci_index,
                slice_count=info.slice_count,
                instance_count=info.instance_count,
                memory_mib=info.memory_mib,
                multiprocessors=info.multiprocessors,
                copy_engines=info.copy_engines,
                decoders=info.decoders,
                encoders=info.encoders,
                jpeg_engines=info.jpeg_engines,
                ofa_engines=info.ofa_engines,
                placements=placements,
            )
        )
    return tuple(profiles)


def memory_slices(profiles: Iterable[MigProfile]) -> int:
    """Width of the placement axis: the largest placement any profile takes (8 on H100)."""
    return max((p.placement_size for p in profiles), default=0)


def profile_by_id(profiles: Iterable[MigProfile], gi_profile_id: int) -> MigProfile | None:
    for profile in profiles:
        if profile.gi_profile_id == gi_profile_id:
            return profile
    return None


def full_compute_profile_id(
    nvml: NvmlAdapter, gpu_instance: GpuInstanceHandle, profile: MigProfile
) -> int:
    """The id to create the full-size compute instance with, as this GPU instance reports it."""
    return nvml.compute_instance_profile(gpu_instance, profile.ci_profile_index).id


def compute_instance_ids(nvml: NvmlAdapter, gpu_instance: GpuInstanceHandle) -> tuple[int, ...]:
    """Every compute instance of a GPU instance, whatever its CI profile."""
    ids: list[int] = []
    for index in range(CI_PROFILE_COUNT):
        try:
            ci_profile = nvml.compute_instance_profile(gpu_instance, index)
        except NvmlCallError as failure:
            if failure.code in _ABSENT:
                continue
            raise
        for handle in nvml.compute_instances(
            gpu_instance, ci_profile.id, ci_profile.instance_count
        ):
            ids.append(nvml.compute_instance_id(handle))
    return tuple(sorted(set(ids)))


def read_gpu_instances(
    nvml: NvmlAdapter, device: DeviceHandle, minor: int, profiles: Iterable[MigProfile]
) -> tuple[GpuInstance, ...]:
    """Every GPU instance, found per profile id so ones without compute instances show up too."""
    found: list[GpuInstance] = []
    for profile in profiles:
        for handle in nvml.gpu_instances(device, profile.gi_profile_id, profile.instance_count):
            info = nvml.gpu_instance_info(handle)
            found.append(
                GpuInstance(
                    parent_minor=minor,
                    profile=profile.name,
                    gi_profile_id=info.profile_id,
                    gi_id=info.id,
                    placement=MigPlacement(info.start, info.size),
                    ci_ids=compute_instance_ids(nvml, handle),
                )
            )
    return tuple(sorted(found, key=lambda gi: (gi.placement, gi.gi_id)))


def read_mig_devices(
    nvml: NvmlAdapter,
    device: DeviceHandle,
    minor: int,
    parent_uuid: str,
    profiles: Iterable[MigProfile],
) -> tuple[MigDevice, ...]:
    """Live MIG devices from their device handles (a GPU instance plus a compute instance)."""
    known = tuple(profiles)
    devices: list[MigDevice] = []
    for slot in range(nvml.max_mig_devices(device)):
        try:
            mig = nvml.mig_device_handle(device, slot)
        except NvmlCallError as failure:
            if failure.code in _NO_DEVICE:
                continue
            raise
        gi_id = nvml.mig_gpu_instance_id(mig)
        info = nvml.gpu_instance_info(nvml.gpu_instance_by_id(device, gi_id))
        profile = profile_by_id(known, info.profile_id)
        devices.append(
            MigDevice(
                parent_minor=minor,
                parent_uuid=parent_uuid,
                profile=profile.name if profile else _profile_from_device_name(nvml.name(mig)),
                gi_profile_id=info.profile_id,
                gi_id=gi_id,
                ci_id=nvml.mig_compute_instance_id(mig),
                uuid=nvml.uuid(mig),
                placement=MigPlacement(info.start, info.size),
            )
        )
    return tuple(sorted(devices, key=lambda d: (d.placement, d.gi_id, d.ci_id)))


def _profile_from_device_name(name: str) -> str:
    """`NVIDIA H100 80GB HBM3 MIG 1g.10gb` names its profile after the last ` MIG `."""
    _, separator, profile = name.rpartition(" MIG ")
    return profile.strip() if separator else "unknown"
