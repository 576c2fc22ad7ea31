"""Sharing settings: which time-slice a GPU gets, and which MPS limits a device's clients get.

A GPU has one time-slice setting however many claims share it, so it is derived from every
current user rather than set by the last one: the shortest interval anyone asked for wins (a
user who asked for a responsive GPU is never given a slower one because someone else joined),
and when the last user leaves the GPU goes back to the driver's default. Deriving it from the
checkpoint on every change also makes it self-healing after a crash: recovery simply applies it
again.

MPS limits are per client process and travel in the container environment (the CUDA MPS client
reads `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` and `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`). A fractional
share's limits come from what the scheduler granted (the result's consumedCapacity), so the
enforced share is exactly the accounted one; an MPS config on a whole GPU or MIG device sets them
explicitly.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from api import GpuConfig, MigDeviceConfig, SharingStrategy
from api.quantity import parse_quantity
from api.v1alpha1 import DeviceConfig
from dra_driver.backends.base import TimeSliceInterval
from dra_driver.checkpoint import ClaimRecord

# Strictest first: the first one any user asked for is what the GPU gets.
_PRECEDENCE = (
    TimeSliceInterval.SHORT,
    TimeSliceInterval.MEDIUM,
    TimeSliceInterval.LONG,
    TimeSliceInterval.DEFAULT,
)
MIB = 1 << 20


class ShareError(ValueError):
    """The allocation result's consumedCapacity cannot be turned into MPS limits."""


@dataclass(frozen=True, slots=True)
class MpsLimits:
    thread_percentage: int | None = None
    pinned_memory_bytes: int | None = None
    # 1 (below normal) for a borrower of a lent GPU, so the owner's kernels go first; None
    # leaves MPS's default (normal).
    client_priority: int | None = None

    def environment(self) -> tuple[str, ...]:
        """Client-side MPS variables. Memory is written in MiB (MPS accepts an `M` suffix), rounded
        down so a client never gets more than it was granted; the device is ordinal 0 because a
        container sees only its own devices."""
        env: list[str] = []
        if self.thread_percentage is not None:
            env.append(f"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={self.thread_percentage}")
        if self.pinned_memory_bytes is not None:
            mib = max(1, self.pinned_memory_bytes // MIB)
            env.append(f"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0={mib}M")
        if self.client_priority is not None:
            env.append(f"CUDA_MPS_CLIENT_PRIORITY={self.client_priority}")
        return tuple(env)


def requested_interval(config: DeviceConfig) -> TimeSliceInterval | None:
    """The interval a GPU config asks for, or None when it does not time-slice."""
    if not isinstance(config, GpuConfig) or config.sharing is None:
        return None
    sharing = config.sharing
    if sharing.strategy is not SharingStrategy.TIME_SLICING or sharing.time_slicing_config is None:
        return None
    return sharing.time_slicing_config.interval


def strictest(intervals: Iterable[TimeSliceInterval]) -> TimeSliceInterval:
    wanted = set(intervals)
    return next((i for i in _PRECEDENCE if i in wanted), TimeSliceInterval.DEFAULT)


def timeslice_users(
    claims: Mapping[str, ClaimRecord], minor: int, *, exclude: str | None = None
) -> list[TimeSliceInterval]:
    """Intervals asked for on one GPU by the claims that hold it (prepared or being prepared)."""
    found: list[TimeSliceInterval] = []
    for uid, record in claims.items():
        if uid == exclude:
            continue
        for device in record.devices:
            if device.minor == minor and device.timeslice_interval is not None:
                found.append(TimeSliceInterval(device.timeslice_interval))
    return found


def uses_mps(config: DeviceConfig) -> bool:
    """Whether an explicit config puts the device's clients under MPS."""
    sharing = config.sharing if isinstance(config, GpuConfig | MigDeviceConfig) else None
    return sharing is not None and sharing.strategy is SharingStrategy.MPS


def config_limits(config: DeviceConfig, gpu_index: int, gpu_uuid: str) -> MpsLimits:
    """MPS limits an explicit config sets (whole GPU or MIG device with strategy MPS)."""
    sharing = config.sharing if isinstance(config, GpuConfig | MigDeviceConfig) else None
    if sharing is None or sharing.strategy is not SharingStrategy.MPS or sharing.mps_config is None:
        return MpsLimits()
    mps = sharing.mps_config
    memory = mps.default_pinned_device_memory_limit
    per_device = mps.default_per_device_pinned_memory_limit or {}
    for key in (gpu_uuid, str(gpu_index)):
        if key in per_device:
            memory = per_device[key]
            break
    return MpsLimits(
        thread_percentage=mps.default_active_thread_percentage,
        pinned_memory_bytes=memory.num_bytes if memory is not None else None,
    )


def granted_limits(consumed: Mapping[str, object] | None, where: str) -> MpsLimits:
    """MPS limits from a fractional share's consumedCapacity (`compute` percent, `memory` bytes).

    A result without consumedCapacity comes from a scheduler without consumable capacity; the
    share then runs without limits, which is what such a cluster could account for anyway.
    """
    if not consumed:
        return MpsLimits()
    percent = _whole(consumed.get("compute"), f"{where}.consumedCapacity.compute")
    memory = _whole(consumed.get("memory"), f"{where}.consumedCapacity.memory")
    if percent is not None and not 1 <= percent <= 100:
        raise ShareError(f"{where}.consumedCapacity.compute: {percent} is not a percentage 1..100")
    return MpsLimits(thread_percentage=percent, pinned_memory_bytes=memory)


BORROWER_PRIORITY = 1
"""MPS client priority "below normal": the owner's kernels are scheduled first."""


def borrower_limits(granted: MpsLimits, lendable: int | None, where: str) -> MpsLimits:
    """A borrower's MPS limits: what the scheduler granted, its pinned memory never above what
    the GPU's owner leaves free now less the headroom (`lendable`, None when the GPU may not be
    lent at all), and a priority below the owner's. Refused (ShareError) when the GPU cannot
    be lent now or lends less than was granted: the borrower would otherwise start with less
    memory than it was promised, or take what the owner needs."""
    if lendable is None:
        raise ShareError(
            f"{where}: the GPU is not lent now (its owner is busy, has not been idle long "
            "enough, refuses to lend, or this node does not lend)"
        )
    memory = granted.pinned_memory_bytes
    if memory is None:
        memory = lendable
    elif memory > lendable:
        raise ShareError(
            f"{where}: {memory // MIB} MiB were granted but the GPU's owner leaves only "
            f"{lendable // MIB} MiB free beyond its headroom now"
        )
    return MpsLimits(
        thread_percentage=granted.thread_percentage,
        pinned_memory_bytes=memory,
        client_priority=BORROWER_PRIORITY,
    )


def _whole(raw: object, where: str) -> int | None:
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, str | int):
        raise ShareError(f"{where}: expected a quantity, got {raw!r}")
    if isinstance(raw, int):
        return raw
    try:
        value = parse_quantity(raw, where).value
    except ValueError as err:
        raise ShareError(str(err)) from None
    # Round down: enforcing more than was accounted would overcommit the GPU.
    return int(value)
