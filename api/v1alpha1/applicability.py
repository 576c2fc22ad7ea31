"""Which configurations make sense for which kinds of device.

A config kind describes one family of devices, and a sharing strategy only
works where the device was published for it: a shared (fractional) GPU is
carved up by MPS limits, so time-slicing it would silently drop those
limits. These rules answer "why not?" in words so callers can either report
the answer or, for configs that name no request, quietly move on.
"""

from __future__ import annotations

from api.device_type import DeviceType
from api.v1alpha1.types import (
    DeviceConfig,
    GpuConfig,
    GpuSharing,
    MigDeviceConfig,
    SharingStrategy,
)

SERVED_DEVICE_TYPES: dict[str, frozenset[DeviceType]] = {
    "GpuConfig": frozenset(
        {DeviceType.GPU, DeviceType.TIMESLICE, DeviceType.SHARED, DeviceType.OPPORTUNISTIC}
    ),
    "MigDeviceConfig": frozenset({DeviceType.MIG}),
}

_STRATEGY_MISFITS: dict[tuple[SharingStrategy, DeviceType], str] = {
    (SharingStrategy.TIME_SLICING, DeviceType.SHARED): (
        "strategy TimeSlicing cannot apply to shared GPU devices, whose fractional "
        "shares are enforced with MPS; use strategy MPS"
    ),
    (SharingStrategy.TIME_SLICING, DeviceType.OPPORTUNISTIC): (
        "strategy TimeSlicing cannot apply to lent GPU devices, whose borrowers are held to "
        "MPS limits below the owner; use strategy MPS"
    ),
    (SharingStrategy.MPS, DeviceType.TIMESLICE): (
        "strategy MPS cannot apply to time-sliced GPU devices; use strategy TimeSlicing"
    ),
}


def kind_for(device_type: DeviceType) -> str:
    """The config kind that serves ``device_type``."""
    return next(kind for kind, served in SERVED_DEVICE_TYPES.items() if device_type in served)


def kind_misfit(config: DeviceConfig, device_type: DeviceType) -> str | None:
    """Why this kind of config cannot describe such a device, or None if it can."""
    if device_type in SERVED_DEVICE_TYPES[config.kind]:
        return None
    return (
        f"{config.kind} does not apply to {device_type.display_name} devices, "
        f"use {kind_for(device_type)}"
    )


def strategy_misfit(config: DeviceConfig, device_type: DeviceType) -> str | None:
    """Why the config's sharing strategy cannot work on such a device, or None."""
    if config.sharing is None:
        return None
    return _STRATEGY_MISFITS.get((config.sharing.strategy, device_type))


def lending_misfit(config: DeviceConfig, device_type: DeviceType) -> str | None:
    """Why the config's ``lending`` cannot apply to such a device, or None.

    Lending is its owner's choice about its own GPU. A borrower's device (gpu-opportunistic) is
    a share of somebody else's GPU, so a borrower has nothing to lend or to refuse; letting the
    field pass would suggest it changed something."""
    if not isinstance(config, GpuConfig) or config.lending is None:
        return None
    if device_type is not DeviceType.OPPORTUNISTIC:
        return None
    return (
        f"lending {config.lending.value} cannot apply to lent GPU devices: a borrower holds "
        "a share of another owner's GPU and has nothing of its own to lend or refuse; remove "
        "lending, or leave this request out of the entry"
    )


def default_config_for(device_type: DeviceType) -> DeviceConfig:
    """What a device gets when no config entry applies to it.

    Time-sliced and shared devices were published for one way of sharing,
    so they default to it (interval Default, MPS without extra limits);
    whole GPUs and MIG devices default to no sharing settings at all.
    """
    if device_type == DeviceType.MIG:
        return MigDeviceConfig()
    if device_type == DeviceType.TIMESLICE:
        return GpuConfig(sharing=GpuSharing(strategy=SharingStrategy.TIME_SLICING))
    if device_type in (DeviceType.SHARED, DeviceType.OPPORTUNISTIC):
        return GpuConfig(sharing=GpuSharing(strategy=SharingStrategy.MPS))
    return GpuConfig()
