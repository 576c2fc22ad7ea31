"""Build the ResourceSlices a node publishes.

Layout (partitionable mode): one slice holds the counter sets (up to 8 per slice), then each GPU
gets slices of its own holding its devices, all in one pool named after the node. Within a GPU
devices go small to large — time-slice shares, the fractional share, MIG placements by size,
the whole GPU — because the upstream allocator takes the first fit in publication order, and
listing small devices first makes it pack instead of fragment.

Fallback mode (API servers without partitionable devices): no counters, so only shapes that can
never collide are published: whole GPUs, and on GPUs that already hold MIG instances, those
instances alone.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from api.device_type import DeviceType
from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.inventory.model import GpuInfo, Inventory, MigDevice, MigPlacement, MigProfile
from dra_driver.slices import attributes, names
from dra_driver.slices.counters import GpuCounters, gpu_counters
from dra_driver.slices.quantity import format_quantity

API_VERSION = "resource.k8s.io/v1"
MAX_DEVICES = 128
MAX_DEVICES_WITH_COUNTERS_OR_TAINTS = 64
MAX_COUNTER_SETS = 8

MIB = 1 << 20
GIB = 1 << 30


@dataclass(frozen=True, slots=True)
class FractionalPolicy:
    """Request policy of the fractional-share device.

    The defaults are what a claim that asks for nothing gets: a tenth of the SMs and 2 GiB of
    pinned memory, enough for a notebook or a small inference server, small enough that ten
    such claims fit on one GPU.
    """

    compute_default: int = 10
    memory_default: int = 2 * GIB
    memory_step: int = 256 * MIB


@dataclass(frozen=True)
class SliceSettings:
    driver_name: str = DEFAULT_DRIVER_NAME
    shapes: frozenset[DeviceType] = frozenset(DeviceType)
    # How many time-slice share devices each GPU offers (with DeviceType.TIMESLICE).
    timeslice_shares: int = 4
    # False for API servers without partitionable devices: no counters, no shares, no on-demand MIG.
    partitionable: bool = True
    generation: int = 1
    node_uid: str | None = None
    fractional: FractionalPolicy = field(default_factory=FractionalPolicy)
    # (minor, GI id) of MIG instances that prepare created for claims. They are represented by
    # the allocated placement device; every other live instance is a pre-created static device.
    dynamic_instances: Collection[tuple[int, int]] = frozenset()
    # Taints (wire shape) for every device of a GPU, keyed by minor: how health reaches the
    # scheduler.
    taints: Mapping[int, Sequence[Mapping[str, Any]]] = field(default_factory=dict)
    # Taints of single devices, keyed by device name (a share whose MPS daemon fails, a lent
    # share whose GPU may not be lent now or whose owner is busy).
    device_taints: Mapping[str, Sequence[Mapping[str, Any]]] = field(default_factory=dict)
    # Memory kept free for the owner of a GPU that is lent (bytes); None: the node lends
    # nothing, and no lent share is published.
    lend_headroom_bytes: int | None = None

    def __post_init__(self) -> None:
        if self.timeslice_shares < 0:
            raise ValueError(f"timeslice_shares must be 0 or more, got {self.timeslice_shares}")
        if self.generation < 0:
            raise ValueError(f"generation must be 0 or more, got {self.generation}")
        policy = self.fractional
        if not 1 <= policy.compute_default <= 100:
            raise ValueError(
                f"fractional.compute_default must be 1..100 (percent), got {policy.compute_default}"
            )
        if self.lend_headroom_bytes is not None and self.lend_headroom_bytes < 0:
            raise ValueError(
                f"lend_headroom_bytes must be 0 or more, got {self.lend_headroom_bytes}"
            )
        if policy.memory_step <= 0 or policy.memory_default < policy.memory_step:
            raise ValueError(
                "fractional.memory_default must be at least fractional.memory_step, and the step "
                f"positive (got default {policy.memory_default}, step {policy.memory_step})"
            )

    @property
    def counter_value(self) -> int:
        """R: the value of each memory-slice counter."""
        if DeviceType.TIMESLICE in self.shapes:
            return max(1, self.timeslice_shares)
        return 1


Device = dict[str, Any]


def _device(
    name: str,
    attrs: attributes.Attributes,
    capacity: attributes.Capacities,
    consumes: tuple[str, Mapping[str, int]] | None,
    *,
    multi: bool = False,
) -> Device:
    device: Device = {"name": name, "attributes": attrs}
    if multi:
        # Many claims share this one device, each consuming part of its capacity.
        device["allowMultipleAllocations"] = True
    if capacity:
        device["capacity"] = capacity
    if consumes is not None:
        counter_set, counters = consumes
        device["consumesCounters"] = [
            {
                "counterSet": counter_set,
                "counters": {k: {"value": format_quantity(v)} for k, v in sorted(counters.items())},
            }
        ]
    return device


def _overlap_damage(profile: MigProfile, placement: MigPlacement, gpu: GpuInfo) -> int:
    """How many larger placements this one would block: the fewer, the better to hand out first."""
    return sum(
        1
        for other in gpu.mig_profiles
        if other.placement_size > profile.placement_size
        for p in other.placements
        if p.overlaps(placement)
    )


def _mig_order(gpu: GpuInfo, profile: MigProfile, placement: MigPlacement) -> tuple[int, ...]:
    return (
        placement.size,
        profile.slice_count,
        profile.memory_mib,
        profile.copy_engines + profile.decoders + profile.jpeg_engines + profile.ofa_engines,
        _overlap_damage(profile, placement, gpu),
        placement.start,
    )


def _static_devices(inventory: Inventory, settings: SliceSettings, minor: int) -> list[MigDevice]:
    dynamic = set(settings.dynamic_instances)
    return [d for d in inventory.mig_devices_of(minor) if (minor, d.gi_id) not in dynamic]


def _static_device(gpu: GpuInfo, device: MigDevice) -> Device | None:
    profile = gpu.profile(device.profile)
    if profile is None:
        return None
    attrs = attributes.mig_attributes(
        gpu, profile, device.placement.start, device.placement.size, device.uuid
    )
    return _device(names.static_mig(device), attrs, attributes.mig_capacity(profile), None)


def _gpu_devices(
    gpu: GpuInfo, static: list[MigDevice], settings: SliceSettings
) -> tuple[GpuCounters, list[Device]]:
    shares = settings.counter_value
    profiles = {p.name: p for p in gpu.mig_profiles}
    static_usage = [
        (profiles[d.profile], d.placement.start, d.placement.size)
        for d in static
        if d.profile in profiles
    ]
    counters = gpu_counters(gpu, shares, static_usage)
    ordered: list[tuple[tuple[int, ...], Device]] = []

    def add(
        order: tuple[int, ...],
        name: str,
        attrs: attributes.Attributes,
        capacity: attributes.Capacities,
        consumption: Mapping[str, int] | None,
        *,
        multi: bool = False,
    ) -> None:
        if consumption is not None and not counters.fits_alone(consumption):
            return
        consumes = (counters.name, consumption) if consumption is not None else None
        ordered.append((order, _device(name, attrs, capacity, consumes, multi=multi)))

    if DeviceType.TIMESLICE in settings.shapes:
        for k in range(settings.timeslice_shares):
            add(
                (0, k),
                names.timeslice_share(gpu.minor, k),
                attributes.timeslice_attributes(gpu, k),
                {"memory": attributes.quantity(gpu.memory_bytes)},
                counters.timeslice(),
            )
    # A GPU smaller than one memory step cannot offer a valid memory request policy.
    if DeviceType.SHARED in settings.shapes and gpu.memory_bytes >= settings.fractional.memory_step:
        add(
            (1,),
            names.fractional_share(gpu.minor),
            attributes.fractional_attributes(gpu),
            _fractional_capacity(gpu, settings.fractional),
            counters.fractional(),
            multi=True,
        )
    lendable = lendable_memory(gpu, settings)
    if lendable is not None:
        # Its own capacity and no counters: a borrower never takes the owner's room, so the
        # GPU is given whole or carved up exactly as if it were not lent (docs/overcommit.md).
        add(
            (1, 1),
            names.lent_share(gpu.minor),
            attributes.lent_attributes(gpu),
            _share_capacity(lendable, settings.fractional),
            None,
            multi=True,
        )
    if DeviceType.MIG in settings.shapes and gpu.mig_enabled:
        for profile in gpu.mig_profiles:
            for placement in profile.placements:
                add(
                    (2, *_mig_order(gpu, profile, placement)),
                    names.mig_placement(gpu.minor, profile, placement.start),
                    attributes.mig_attributes(gpu, profile, placement.start, placement.size, None),
                    attributes.mig_capacity(profile),
                    counters.mig(profile, placement.start, placement.size),
                )
    for mig in static:
        built = _static_device(gpu, mig)
        if built is not None:
            ordered.append(((2, *_mig_order(gpu, profiles[mig.profile], mig.placement)), built))
    if DeviceType.GPU in settings.shapes:
        add(
            (3,),
            names.whole_gpu(gpu.minor),
            attributes.whole_gpu_attributes(gpu),
            attributes.whole_gpu_capacity(gpu),
            counters.whole_gpu(),
        )

    ordered.sort(key=lambda item: item[0])
    devices = [device for _, device in ordered]
    return counters, devices


def lendable_memory(gpu: GpuInfo, settings: SliceSettings) -> int | None:
    """The most a borrower may ask for on this GPU, None where it lends nothing: the node does
    not lend, the shape is off, or the GPU is in MIG mode (its owners hold MIG devices, which
    MPS clients of the whole GPU cannot share)."""
    headroom = settings.lend_headroom_bytes
    if (
        headroom is None
        or not settings.partitionable
        or DeviceType.OPPORTUNISTIC not in settings.shapes
        or gpu.mig_enabled
    ):
        return None
    lendable = gpu.memory_bytes - headroom
    return lendable if lendable >= settings.fractional.memory_step else None


def _fractional_capacity(gpu: GpuInfo, policy: FractionalPolicy) -> attributes.Capacities:
    return _share_capacity(gpu.memory_bytes, policy)


def _share_capacity(memory_bytes: int, policy: FractionalPolicy) -> attributes.Capacities:
    step = policy.memory_step
    top = step + (memory_bytes - step) // step * step
    default = min(policy.memory_default, top)
    default -= (default - step) % step
    return {
        "compute": {
            "value": "100",
            "requestPolicy": {
                "default": str(policy.compute_default),
                "validRange": {"min": "1", "max": "100", "step": "1"},
            },
        },
        "memory": {
            "value": format_quantity(memory_bytes),
            "requestPolicy": {
                "default": format_quantity(default),
                "validRange": {
                    "min": format_quantity(step),
                    "max": format_quantity(top),
                    "step": format_quantity(step),
                },
            },
        },
    }


def _fallback_devices(
    gpu: GpuInfo, static: list[MigDevice], settings: SliceSettings
) -> list[Device]:
    if static:
        built = [_static_device(gpu, d) for d in static]
        return [d for d in built if d is not None]
    if DeviceType.GPU not in settings.shapes:
        return []
    return [
        _device(
            names.whole_gpu(gpu.minor),
            attributes.whole_gpu_attributes(gpu),
            attributes.whole_gpu_capacity(gpu),
            None,
        )
    ]


def _chunks(items: Sequence[Any], size: int) -> list[Sequence[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)] or [items]


def _slice(
    inventory: Inventory, settings: SliceSettings, suffix: str, body: dict[str, Any]
) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": names.slice_name(inventory.node_name, settings.driver_name, suffix)
    }
    if settings.node_uid:
        metadata["ownerReferences"] = [
            {
                "apiVersion": "v1",
                "kind": "Node",
                "name": inventory.node_name,
                "uid": settings.node_uid,
                "controller": True,
            }
        ]
    spec: dict[str, Any] = {
        "driver": settings.driver_name,
        "nodeName": inventory.node_name,
        "pool": {
            "name": inventory.node_name,
            "generation": settings.generation,
            "resourceSliceCount": 0,
        },
        **body,
    }
    return {"apiVersion": API_VERSION, "kind": "ResourceSlice", "metadata": metadata, "spec": spec}


def build_resource_slices(inventory: Inventory, settings: SliceSettings) -> list[dict[str, Any]]:
    """Every ResourceSlice of the node's pool, in publication order."""
    counter_sets: list[dict[str, Any]] = []
    device_slices: list[tuple[str, list[Device]]] = []
    for gpu in sorted(inventory.gpus, key=lambda g: g.minor):
        static = _static_devices(inventory, settings, gpu.minor)
        if settings.partitionable:
            counters, devices = _gpu_devices(gpu, static, settings)
            counter_sets.append(
                {
                    "name": counters.name,
                    "counters": {
                        k: {"value": format_quantity(v)}
                        for k, v in sorted(counters.available.items())
                    },
                }
            )
        else:
            devices = _fallback_devices(gpu, static, settings)
        taints = [dict(t) for t in settings.taints.get(gpu.minor, ())]
        for device in devices:
            own = [dict(t) for t in settings.device_taints.get(device["name"], ())]
            if taints or own:
                device["taints"] = [*taints, *own]
        if devices:
            device_slices.append((f"gpu-{gpu.minor}", devices))

    slices: list[dict[str, Any]] = []
    for index, chunk in enumerate(_chunks(counter_sets, MAX_COUNTER_SETS)):
        if chunk:
            slices.append(
                _slice(inventory, settings, f"counters-{index}", {"sharedCounters": list(chunk)})
            )
    for suffix, devices in device_slices:
        limited = any("consumesCounters" in d or "taints" in d for d in devices)
        size = MAX_DEVICES_WITH_COUNTERS_OR_TAINTS if limited else MAX_DEVICES
        parts = _chunks(devices, size)
        for part, chunk in enumerate(parts):
            name = suffix if len(parts) == 1 else f"{suffix}-{part}"
            slices.append(_slice(inventory, settings, name, {"devices": list(chunk)}))
    if not slices:
        # An empty pool still needs one slice so schedulers see the node's pool as complete.
        slices.append(_slice(inventory, settings, "empty", {"devices": []}))
    for item in slices:
        item["spec"]["pool"]["resourceSliceCount"] = len(slices)
    return slices
