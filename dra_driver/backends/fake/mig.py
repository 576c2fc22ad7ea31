"""The admission rules a MIG-capable GPU applies to a new GPU instance.

Kept apart from the backend so the rules read as one list, in the order hardware checks them:
a placement the profile never offers is a caller bug (invalid argument), whereas a collision with
live instances, the profile's instance limit or exhausted engines is a capacity problem
(insufficient resources) that a different placement or a teardown can fix. Engines matter
because slices alone under-constrain: a GPU has one optical-flow engine, so two `+me` instances
cannot coexist even on disjoint slices.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields

from dra_driver.backends.errors import InsufficientResourcesError, InvalidArgumentError
from dra_driver.backends.return_codes import NvmlReturn
from dra_driver.inventory.model import GpuInfo, MigPlacement, MigProfile


@dataclass(frozen=True, slots=True)
class Engines:
    """Countable resources a GPU instance takes from its GPU."""

    multiprocessors: int = 0
    copy_engines: int = 0
    decoders: int = 0
    encoders: int = 0
    jpeg_engines: int = 0
    ofa_engines: int = 0

    @classmethod
    def of_profile(cls, profile: MigProfile) -> Engines:
        return cls(
            multiprocessors=profile.multiprocessors,
            copy_engines=profile.copy_engines,
            decoders=profile.decoders,
            encoders=profile.encoders,
            jpeg_engines=profile.jpeg_engines,
            ofa_engines=profile.ofa_engines,
        )

    @classmethod
    def of_gpu(cls, gpu: GpuInfo) -> Engines:
        """The full-size profile owns every engine; SMs count the whole chip (some stay unused
        by any MIG layout, which is why the full profile's SM count is not the total)."""
        full = gpu.full_profile
        if full is None:
            return cls(multiprocessors=gpu.multiprocessors)
        return cls(
            multiprocessors=gpu.multiprocessors,
            copy_engines=full.copy_engines,
            decoders=full.decoders,
            encoders=full.encoders,
            jpeg_engines=full.jpeg_engines,
            ofa_engines=full.ofa_engines,
        )

    def __add__(self, other: Engines) -> Engines:
        return Engines(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(Engines)))

    def exceeded(self, limit: Engines) -> list[str]:
        """Names of the resources where this sum goes over `limit`."""
        return [f.name for f in fields(Engines) if getattr(self, f.name) > getattr(limit, f.name)]


@dataclass(frozen=True, slots=True)
class LiveInstance:
    gi_id: int
    profile: MigProfile
    placement: MigPlacement


def check_admission(
    gpu: GpuInfo,
    label: str,
    operation: str,
    profile: MigProfile,
    placement: MigPlacement,
    live: Iterable[LiveInstance],
) -> None:
    """Raise what the GPU would if asked to create `profile` at `placement` next to `live`."""
    if placement not in profile.placements:
        offered = ", ".join(f"{p.start}:{p.size}" for p in profile.placements)
        raise InvalidArgumentError(
            label,
            operation,
            f"profile {profile.name} has no placement {placement.start}:{placement.size} "
            f"(offered: {offered})",
            code=int(NvmlReturn.INVALID_ARGUMENT),
        )
    instances = list(live)
    for other in instances:
        if other.placement.overlaps(placement):
            raise InsufficientResourcesError(
                label,
                operation,
                f"placement overlaps GPU instance {other.gi_id} ({other.profile.name} at "
                f"{other.placement.start}:{other.placement.size})",
                code=int(NvmlReturn.INSUFFICIENT_RESOURCES),
            )
    same_profile = sum(1 for other in instances if other.profile.name == profile.name)
    if same_profile >= profile.instance_count:
        raise InsufficientResourcesError(
            label,
            operation,
            f"profile {profile.name} allows {profile.instance_count} instance(s) and "
            f"{same_profile} exist",
            code=int(NvmlReturn.INSUFFICIENT_RESOURCES),
        )
    used = Engines()
    for other in instances:
        used = used + Engines.of_profile(other.profile)
    short = (used + Engines.of_profile(profile)).exceeded(Engines.of_gpu(gpu))
    if short:
        raise InsufficientResourcesError(
            label,
            operation,
            f"not enough {', '.join(short)} left for profile {profile.name}",
            code=int(NvmlReturn.INSUFFICIENT_RESOURCES),
        )
