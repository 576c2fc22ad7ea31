"""What an allocated device name means on this node.

Device names are the only thing an allocation result says about a device, and they are derived
from stable facts (minor, profile, placement, share index), so they can be read back without
the ResourceSlice that published them. Reading them back here, rather than looking the name up
in the last published slices, keeps prepare working while the publisher is behind or failing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from api.device_type import DeviceType
from dra_driver.inventory.model import GpuInfo, Inventory, MigPlacement, MigProfile


class UnknownDeviceError(ValueError):
    """The allocation names a device this node does not have (or no longer has)."""


@dataclass(frozen=True, slots=True)
class WholeGpu:
    gpu: GpuInfo

    device_type: ClassVar[DeviceType] = DeviceType.GPU


@dataclass(frozen=True, slots=True)
class OnDemandMig:
    """A MIG placement: the instance is created at prepare and destroyed at unprepare."""

    gpu: GpuInfo
    profile: MigProfile
    placement: MigPlacement

    device_type: ClassVar[DeviceType] = DeviceType.MIG


@dataclass(frozen=True, slots=True)
class StaticMig:
    """A MIG device an administrator created; prepare only hands it out."""

    gpu: GpuInfo
    gi_id: int
    ci_id: int
    uuid: str

    device_type: ClassVar[DeviceType] = DeviceType.MIG


@dataclass(frozen=True, slots=True)
class TimeSliceShare:
    gpu: GpuInfo
    index: int

    device_type: ClassVar[DeviceType] = DeviceType.TIMESLICE


@dataclass(frozen=True, slots=True)
class FractionalShare:
    gpu: GpuInfo

    device_type: ClassVar[DeviceType] = DeviceType.SHARED


@dataclass(frozen=True, slots=True)
class LentShare:
    """A borrower's share of a GPU its owner lends (docs/overcommit.md)."""

    gpu: GpuInfo

    device_type: ClassVar[DeviceType] = DeviceType.OPPORTUNISTIC


Target = WholeGpu | OnDemandMig | StaticMig | TimeSliceShare | FractionalShare | LentShare

# Profile names in device names always contain a "g" (1g10gb), so an all-digit pair is a
# pre-created device's GI/CI ids and never a placement.
_WHOLE = re.compile(r"gpu-(\d+)")
_STATIC = re.compile(r"gpu-(\d+)-mig-(\d+)-(\d+)")
_PLACEMENT = re.compile(r"gpu-(\d+)-mig-([a-z0-9]+)-(\d+)")
_TIMESLICE = re.compile(r"gpu-(\d+)-ts-(\d+)")
_SHARED = re.compile(r"gpu-(\d+)-shared")
_LENT = re.compile(r"gpu-(\d+)-lent")


def type_word(target: Target) -> str:
    """What a container's `DRA_DEVICE_<NAME>_TYPE` says: the device type, with a pre-created MIG
    device told apart from one made on demand."""
    if isinstance(target, StaticMig):
        return "static-mig"
    return target.device_type.value


def resolve_target(inventory: Inventory, device: str) -> Target:
    """Map an allocated device name to what it is on this node, or say why it cannot be."""
    if match := _WHOLE.fullmatch(device):
        return WholeGpu(_gpu(inventory, device, match.group(1)))
    if match := _STATIC.fullmatch(device):
        gpu = _gpu(inventory, device, match.group(1))
        gi_id, ci_id = int(match.group(2)), int(match.group(3))
        for live in inventory.mig_devices_of(gpu.minor):
            if live.gi_id == gi_id and live.ci_id == ci_id:
                return StaticMig(gpu, gi_id, ci_id, live.uuid)
        raise UnknownDeviceError(
            f"device {device}: GPU {gpu.minor} has no MIG device with GPU instance {gi_id} and "
            f"compute instance {ci_id} (it was destroyed after it was published)"
        )
    if match := _PLACEMENT.fullmatch(device):
        gpu = _gpu(inventory, device, match.group(1))
        profile = next((p for p in gpu.mig_profiles if p.dns_name == match.group(2)), None)
        if profile is None:
            raise UnknownDeviceError(
                f"device {device}: GPU {gpu.minor} ({gpu.product_name}) has no MIG profile "
                f"named {match.group(2)!r} in device names"
            )
        start = int(match.group(3))
        placement = next((p for p in profile.placements if p.start == start), None)
        if placement is None:
            raise UnknownDeviceError(
                f"device {device}: profile {profile.name} cannot be placed at memory slice {start}"
            )
        return OnDemandMig(gpu, profile, placement)
    if match := _TIMESLICE.fullmatch(device):
        return TimeSliceShare(_gpu(inventory, device, match.group(1)), int(match.group(2)))
    if match := _SHARED.fullmatch(device):
        return FractionalShare(_gpu(inventory, device, match.group(1)))
    if match := _LENT.fullmatch(device):
        return LentShare(_gpu(inventory, device, match.group(1)))
    raise UnknownDeviceError(f"device {device}: not a device name this driver publishes")


def _gpu(inventory: Inventory, device: str, minor_text: str) -> GpuInfo:
    minor = int(minor_text)
    for gpu in inventory.gpus:
        if gpu.minor == minor:
            return gpu
    raise UnknownDeviceError(f"device {device}: node {inventory.node_name} has no GPU {minor}")
