"""Typed, immutable description of a node's GPUs.

Backends (NVML or fake) produce these objects and everything downstream (ResourceSlice building,
prepare, allocation tests) consumes them, so no other module needs to know where the facts came
from. Objects are frozen: an inventory is a snapshot, and a changed GPU is a new snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True, order=True)
class MigPlacement:
    """Where a GPU instance sits, in memory-slice units (as NVML reports placements)."""

    start: int
    size: int

    @property
    def end(self) -> int:
        """One past the last memory slice covered."""
        return self.start + self.size

    def slices(self) -> range:
        return range(self.start, self.end)

    def overlaps(self, other: MigPlacement) -> bool:
        return self.start < other.end and other.start < self.end


@dataclass(frozen=True, slots=True)
class MigProfile:
    """A GPU-instance profile as the hardware defines it, with its full-size compute instance.

    `profile_index` is the NVML_GPU_INSTANCE_PROFILE_* enum value passed to
    nvmlDeviceGetGpuInstanceProfileInfo; `gi_profile_id` is the id that call returns, which is what
    every placement and create call takes. Mixing the two up is the classic MIG bug, so both are
    kept and named apart.
    """

    name: str
    profile_index: int
    gi_profile_id: int
    ci_profile_index: int
    ci_profile_id: int
    slice_count: int
    instance_count: int
    memory_mib: int
    multiprocessors: int
    copy_engines: int
    decoders: int
    encoders: int
    jpeg_engines: int
    ofa_engines: int
    placements: tuple[MigPlacement, ...]
    # Names of the fields above whose values are estimates rather than observed hardware facts.
    unconfirmed: tuple[str, ...] = ()

    @property
    def memory_bytes(self) -> int:
        return self.memory_mib * 1024 * 1024

    @property
    def placement_size(self) -> int:
        """Memory slices one instance covers (the same for every placement of a profile)."""
        return self.placements[0].size if self.placements else 0

    @property
    def dns_name(self) -> str:
        """The profile as it appears in device names: dots dropped, `+me` becomes `me`.

        `-me` (a profile without media engines) becomes `nome` so it cannot collide with `+me`.
        """
        return self.name.replace("-me", "nome").replace("+", "").replace(".", "")


@dataclass(frozen=True, slots=True)
class GpuInfo:
    """One physical GPU.

    `minor` (the /dev/nvidia<minor> number) is the stable identity used in device names; NVML's
    enumeration `index` can change between boots and is kept only to get a handle.
    """

    minor: int
    index: int
    uuid: str
    product_name: str
    brand: str
    architecture: str
    cuda_compute_capability: str
    driver_version: str
    cuda_driver_version: str
    memory_bytes: int
    multiprocessors: int
    pci_bus_id: str
    pcie_root: str
    numa_node: int | None
    nvlink_domain: str
    mig_capable: bool
    mig_enabled: bool
    # Width of the MIG placement axis (8 on A100/H100, 4 on A30); 0 when not MIG-capable.
    memory_slices: int = 0
    mig_profiles: tuple[MigProfile, ...] = ()

    def profile(self, name: str) -> MigProfile | None:
        for profile in self.mig_profiles:
            if profile.name == name:
                return profile
        return None

    @property
    def full_profile(self) -> MigProfile | None:
        """The profile that spans every memory slice (7g on A100/H100), if the GPU has MIG."""
        return max(self.mig_profiles, key=lambda p: (p.placement_size, p.slice_count), default=None)


@dataclass(frozen=True, slots=True)
class GpuInstance:
    """A live GPU instance, with or without compute instances.

    Kept apart from MigDevice because a crash between the two create calls leaves a GPU instance
    with no compute instance: it holds memory slices, yet no MIG device exists, and recovery must
    still find and destroy it.
    """

    parent_minor: int
    profile: str
    gi_profile_id: int
    gi_id: int
    placement: MigPlacement
    ci_ids: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class MigDevice:
    """A live MIG device: a GPU instance with its one full-size compute instance."""

    parent_minor: int
    parent_uuid: str
    profile: str
    gi_profile_id: int
    gi_id: int
    ci_id: int
    uuid: str
    placement: MigPlacement


@dataclass(frozen=True, slots=True)
class Inventory:
    """Everything a node has at one moment."""

    node_name: str
    gpus: tuple[GpuInfo, ...]
    mig_devices: tuple[MigDevice, ...] = field(default=())

    def gpu(self, minor: int) -> GpuInfo:
        for gpu in self.gpus:
            if gpu.minor == minor:
                return gpu
        raise KeyError(f"node {self.node_name} has no GPU with minor {minor}")

    def mig_devices_of(self, minor: int) -> tuple[MigDevice, ...]:
        return tuple(d for d in self.mig_devices if d.parent_minor == minor)
