"""Random MIG operation sequences against a plain reference model of one GPU.

The model knows only occupied memory slices, per-profile counts and engine sums; if the backend
ever disagrees about which operations succeed or what is live, one of the two is wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from dra_driver.backends.errors import (
    BackendError,
    InsufficientResourcesError,
    InUseError,
    InvalidArgumentError,
    NotFoundError,
)
from dra_driver.backends.fake import FakeBackend
from dra_driver.backends.fake.spec import FakeGpuSpec
from dra_driver.inventory.model import GpuInfo, MigPlacement, MigProfile
from dra_driver.inventory.products import known_products

ENGINES = (
    "multiprocessors",
    "copy_engines",
    "decoders",
    "encoders",
    "jpeg_engines",
    "ofa_engines",
)
# Repeats weight the draw towards operations that build state, so sequences get interesting.
KINDS = (
    *("create_gi",) * 4,
    "create_gi_anywhere",
    *("create_ci",) * 2,
    "destroy_ci",
    *("destroy_gi",) * 2,
)


@dataclass
class ModelInstance:
    profile: MigProfile
    placement: MigPlacement
    has_ci: bool = False


@dataclass
class Model:
    gpu: GpuInfo
    instances: dict[int, ModelInstance] = field(default_factory=dict)

    def occupied(self) -> set[int]:
        return {s for i in self.instances.values() for s in i.placement.slices()}

    def create_gi(self, profile: MigProfile, placement: MigPlacement) -> type[BackendError] | int:
        if placement not in profile.placements:
            return InvalidArgumentError
        if self.occupied() & set(placement.slices()):
            return InsufficientResourcesError
        if sum(i.profile.name == profile.name for i in self.instances.values()) >= (
            profile.instance_count
        ):
            return InsufficientResourcesError
        full = self.gpu.full_profile
        assert full is not None
        for engine in ENGINES:
            total = (
                self.gpu.multiprocessors if engine == "multiprocessors" else getattr(full, engine)
            )
            used = sum(getattr(i.profile, engine) for i in self.instances.values())
            if used + getattr(profile, engine) > total:
                return InsufficientResourcesError
        gi_id = min(set(range(1, len(self.instances) + 2)) - set(self.instances))
        self.instances[gi_id] = ModelInstance(profile, placement)
        return gi_id

    def create_ci(self, gi_id: int) -> type[BackendError] | int:
        instance = self.instances.get(gi_id)
        if instance is None:
            return NotFoundError
        if instance.has_ci:
            return InsufficientResourcesError
        instance.has_ci = True
        return 0

    def destroy_ci(self, gi_id: int, ci_id: int) -> type[BackendError] | None:
        instance = self.instances.get(gi_id)
        if instance is None or not instance.has_ci or ci_id != 0:
            return NotFoundError
        instance.has_ci = False
        return None

    def destroy_gi(self, gi_id: int) -> type[BackendError] | None:
        instance = self.instances.get(gi_id)
        if instance is None:
            return NotFoundError
        if instance.has_ci:
            return InUseError
        del self.instances[gi_id]
        return None


Outcome = type[BackendError] | int | None


def outcome(operation: Callable[..., int | None], *args: int | str | MigPlacement) -> Outcome:
    """The result of a call, or the type of the backend error it raised."""
    try:
        return operation(*args)
    except BackendError as error:
        return type(error)


def pick_gi(model: Model, a: int, b: int) -> int:
    """Mostly a live GPU instance, sometimes one that does not exist."""
    ids = sorted(model.instances)
    if ids and b % 8:
        return ids[a % len(ids)]
    return (max(ids, default=0) + 1) if a % 2 else 0


operations = st.lists(
    st.tuples(st.sampled_from(KINDS), st.integers(0, 255), st.integers(0, 255)),
    min_size=1,
    max_size=60,
)


@settings(max_examples=400, deadline=None)
@given(key=st.sampled_from(sorted(known_products())), steps=operations)
def test_random_operations_match_reference_model(
    key: str, steps: list[tuple[str, int, int]]
) -> None:
    backend = FakeBackend("prop-node", [FakeGpuSpec.of(key)], boot_id="b")
    gpu = backend.gpus[0]
    profiles = gpu.mig_profiles
    model = Model(gpu)
    for kind, a, b in steps:
        profile = profiles[a % len(profiles)]
        if kind == "create_gi":
            placement = profile.placements[b % len(profile.placements)]
        else:
            placement = MigPlacement(b % gpu.memory_slices, a % gpu.memory_slices + 1)
        gi_id = pick_gi(model, a, b)
        expected: Outcome
        if kind in ("create_gi", "create_gi_anywhere"):
            expected = model.create_gi(profile, placement)
            actual = outcome(backend.create_gpu_instance, 0, profile.name, placement)
        elif kind == "create_ci":
            expected = model.create_ci(gi_id)
            actual = outcome(backend.create_compute_instance, 0, gi_id)
        elif kind == "destroy_ci":
            ci_id = 0 if b % 7 else 1
            expected = model.destroy_ci(gi_id, ci_id)
            actual = outcome(backend.destroy_compute_instance, 0, gi_id, ci_id)
        else:
            expected = model.destroy_gi(gi_id)
            actual = outcome(backend.destroy_gpu_instance, 0, gi_id)
        assert actual == expected, (kind, profile.name, placement, gi_id)

        live = backend.gpu_instances(0)
        placements = [g.placement for g in live]
        for i, first in enumerate(placements):
            for second in placements[i + 1 :]:
                assert not first.overlaps(second)
        assert {s for p in placements for s in p.slices()} == model.occupied()
        assert {(g.gi_id, g.profile, g.placement, g.ci_ids) for g in live} == {
            (gi, m.profile.name, m.placement, (0,) if m.has_ci else ())
            for gi, m in model.instances.items()
        }
        assert {d.gi_id for d in backend.mig_devices(0)} == {
            gi for gi, m in model.instances.items() if m.has_ci
        }
