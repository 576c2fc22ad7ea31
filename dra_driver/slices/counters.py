"""Shared counters that make the shapes of one GPU mutually exclusive.

Each GPU has one counter set: a `memory-slice-<i>` counter per MIG memory slice, each worth R
(R = time-slice shares, at least 1), plus capacity counters (SMs, memory, engines) worth the whole
GPU. A whole GPU takes everything; a MIG placement takes R of the slices it covers and its own
engines; a time-slice share takes 1 of every slice; the fractional device takes R of every slice.
Engine counters matter: there is one OFA engine, which is why two media-extension (`+me`)
profiles can never coexist, and the counters say so exactly as the hardware does.

MIG instances that already exist and that no claim of ours created ("static" devices) are
subtracted from the totals, so nothing that would collide with them can ever fit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from dra_driver.inventory.model import GpuInfo, MigProfile
from dra_driver.slices import names

CAPACITY_COUNTERS = (
    "multiprocessors",
    "memory",
    "copy-engines",
    "decoders",
    "encoders",
    "jpeg-engines",
    "ofa-engines",
)


def memory_slice_count(gpu: GpuInfo) -> int:
    """A GPU without MIG still gets one slice counter so shares and the whole GPU exclude."""
    return gpu.memory_slices if gpu.mig_capable and gpu.memory_slices > 0 else 1


def gpu_totals(gpu: GpuInfo) -> dict[str, int]:
    """Capacity counters of the whole GPU: its SMs and memory, and the engines of the profile
    that spans the GPU (the largest number of each engine any MIG layout can use)."""
    full = gpu.full_profile
    totals = {"multiprocessors": gpu.multiprocessors, "memory": gpu.memory_bytes}
    if full is not None:
        totals.update(profile_usage(full))
        totals["multiprocessors"] = max(gpu.multiprocessors, full.multiprocessors)
        totals["memory"] = max(gpu.memory_bytes, full.memory_bytes)
    return {k: v for k, v in totals.items() if v > 0}


def profile_usage(profile: MigProfile) -> dict[str, int]:
    return {
        "multiprocessors": profile.multiprocessors,
        "memory": profile.memory_bytes,
        "copy-engines": profile.copy_engines,
        "decoders": profile.decoders,
        "encoders": profile.encoders,
        "jpeg-engines": profile.jpeg_engines,
        "ofa-engines": profile.ofa_engines,
    }


@dataclass(frozen=True, slots=True)
class GpuCounters:
    """The counter set of one GPU and the consumption of each shape."""

    gpu: GpuInfo
    shares: int
    # Capacity counters of the whole GPU (`gpu_totals`), worked out once per GPU.
    totals: Mapping[str, int]
    available: Mapping[str, int]

    @property
    def name(self) -> str:
        return names.counter_set(self.gpu.minor)

    def _slices(self, slices: Iterable[int], amount: int) -> dict[str, int]:
        return {names.memory_slice_counter(i): amount for i in slices}

    def whole_gpu(self) -> dict[str, int]:
        consumed = self._slices(range(memory_slice_count(self.gpu)), self.shares)
        consumed.update(self.totals)
        return consumed

    def mig(self, profile: MigProfile, start: int, size: int) -> dict[str, int]:
        consumed = self._slices(range(start, start + size), self.shares)
        usage = profile_usage(profile).items()
        consumed.update({k: v for k, v in usage if v > 0 and k in self.totals})
        return consumed

    def timeslice(self) -> dict[str, int]:
        return self._slices(range(memory_slice_count(self.gpu)), 1)

    def fractional(self) -> dict[str, int]:
        return self._slices(range(memory_slice_count(self.gpu)), self.shares)

    def fits_alone(self, consumption: Mapping[str, int]) -> bool:
        """Whether a device could ever be allocated; one that cannot is not worth publishing."""
        return all(self.available.get(k, 0) >= v for k, v in consumption.items())


def gpu_counters(
    gpu: GpuInfo,
    shares: int,
    static_usage: Iterable[tuple[MigProfile, int, int]] = (),
) -> GpuCounters:
    """Counter totals for `gpu`, less what pre-existing MIG instances physically hold."""
    totals = gpu_totals(gpu)
    available = {names.memory_slice_counter(i): shares for i in range(memory_slice_count(gpu))}
    available.update(totals)
    for profile, start, size in static_usage:
        for i in range(start, start + size):
            available[names.memory_slice_counter(i)] = 0
        for key, used in profile_usage(profile).items():
            if key in available:
                available[key] = max(0, available[key] - used)
    return GpuCounters(gpu=gpu, shares=shares, totals=totals, available=available)
