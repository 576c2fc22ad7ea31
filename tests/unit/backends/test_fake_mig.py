"""MIG primitives of the fake backend, checked against the facts of every packaged product."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest

from dra_driver.backends.base import GpuBackend, TimeSliceInterval
from dra_driver.backends.errors import (
    InsufficientResourcesError,
    InUseError,
    InvalidArgumentError,
    NotFoundError,
    NotSupportedError,
    NvmlUnavailableError,
)
from dra_driver.backends.fake import FakeBackend
from dra_driver.backends.fake.spec import FakeGpuSpec
from dra_driver.backends.mig import create_mig_device, destroy_mig_device
from dra_driver.inventory.model import MigPlacement
from dra_driver.inventory.products import known_products, product_from_dict

MakeBackend = Callable[..., FakeBackend]
PRODUCTS = sorted(known_products())


def single(key: str) -> FakeBackend:
    return FakeBackend("node-a", [FakeGpuSpec.of(key)], boot_id="b")


def live_placements(backend: FakeBackend, minor: int = 0) -> set[tuple[str, int, int]]:
    return {(g.profile, g.placement.start, g.placement.size) for g in backend.gpu_instances(minor)}


def test_is_a_gpu_backend(make_backend: MakeBackend) -> None:
    assert isinstance(make_backend("A30-24GB:1"), GpuBackend)


@pytest.mark.parametrize("key", PRODUCTS)
def test_possible_placements_are_the_product_facts(key: str) -> None:
    backend = single(key)
    for profile in known_products()[key].mig_profiles:
        assert backend.possible_placements(0, profile.name) == profile.placements


@pytest.mark.parametrize("key", PRODUCTS)
def test_every_placement_of_every_profile_fits_an_empty_gpu(key: str) -> None:
    backend = single(key)
    for profile in known_products()[key].mig_profiles:
        for placement in profile.placements:
            gi_id = backend.create_gpu_instance(0, profile.name, placement)
            assert gi_id == 1
            (instance,) = backend.gpu_instances(0)
            assert (instance.profile, instance.gi_profile_id, instance.placement) == (
                profile.name,
                profile.gi_profile_id,
                placement,
            )
            assert instance.ci_ids == ()
            backend.destroy_gpu_instance(0, gi_id)
            assert backend.gpu_instances(0) == ()


@pytest.mark.parametrize("key", PRODUCTS)
def test_overlapping_placements_collide(key: str) -> None:
    backend = single(key)
    profiles = known_products()[key].mig_profiles
    for first, second in itertools.product(profiles, repeat=2):
        for a, b in itertools.product(first.placements, second.placements):
            if not a.overlaps(b):
                continue
            gi_id = backend.create_gpu_instance(0, first.name, a)
            with pytest.raises(InsufficientResourcesError) as caught:
                backend.create_gpu_instance(0, second.name, b)
            assert caught.value.code == 23
            assert f"overlaps GPU instance {gi_id}" in str(caught.value)
            backend.destroy_gpu_instance(0, gi_id)


@pytest.mark.parametrize("key", PRODUCTS)
def test_placements_not_offered_are_invalid(key: str) -> None:
    backend = single(key)
    slices = known_products()[key].memory_slices
    for profile in known_products()[key].mig_profiles:
        offered = set(profile.placements)
        for start, size in itertools.product(range(slices + 1), range(1, slices + 2)):
            placement = MigPlacement(start, size)
            if placement in offered:
                continue
            with pytest.raises(InvalidArgumentError) as caught:
                backend.create_gpu_instance(0, profile.name, placement)
            assert caught.value.code == 2
    assert backend.gpu_instances(0) == ()


@pytest.mark.parametrize("key", PRODUCTS)
def test_media_extension_profiles_exclude_each_other(key: str) -> None:
    """One OFA engine per GPU: a second `+me` instance fails even on free slices."""
    backend = single(key)
    media = [p for p in known_products()[key].mig_profiles if p.name.endswith("+me")]
    assert media, "every packaged MIG product has a +me profile"
    for first, second in itertools.product(media, repeat=2):
        for a, b in itertools.product(first.placements, second.placements):
            if a.overlaps(b):
                continue
            gi_id = backend.create_gpu_instance(0, first.name, a)
            with pytest.raises(InsufficientResourcesError):
                backend.create_gpu_instance(0, second.name, b)
            backend.destroy_gpu_instance(0, gi_id)


def test_distinct_media_profiles_are_refused_for_engines() -> None:
    backend = single("A30-24GB")
    backend.create_gpu_instance(0, "1g.6gb+me", MigPlacement(0, 1))
    with pytest.raises(InsufficientResourcesError, match="ofa_engines") as caught:
        backend.create_gpu_instance(0, "2g.12gb+me", MigPlacement(2, 2))
    assert caught.value.code == 23


def test_same_media_profile_twice_hits_instance_count() -> None:
    backend = single("H100-SXM5-80GB")
    backend.create_gpu_instance(0, "1g.10gb+me", MigPlacement(0, 1))
    with pytest.raises(InsufficientResourcesError, match=r"allows 1 instance\(s\) and 1 exist"):
        backend.create_gpu_instance(0, "1g.10gb+me", MigPlacement(3, 1))


def test_media_profile_fits_beside_plain_profiles() -> None:
    backend = single("A100-SXM4-40GB")
    backend.create_gpu_instance(0, "1g.5gb+me", MigPlacement(0, 1))
    for start in range(1, 7):
        backend.create_gpu_instance(0, "1g.5gb", MigPlacement(start, 1))
    assert len(backend.gpu_instances(0)) == 7


def custom_backend(instance_count: int, multiprocessors: int) -> FakeBackend:
    """A four-slice GPU whose one profile has no engines, to isolate count and SM limits."""
    profile = {
        "name": "1g.1gb",
        "profile_index": 0,
        "gi_profile_id": 19,
        "ci_profile_index": 0,
        "ci_profile_id": 0,
        "slice_count": 1,
        "instance_count": instance_count,
        "memory_mib": 1024,
        "multiprocessors": 10,
        "copy_engines": 0,
        "decoders": 0,
        "encoders": 0,
        "jpeg_engines": 0,
        "ofa_engines": 0,
        "placements": [[0, 1], [1, 1], [2, 1], [3, 1]],
    }
    full = dict(profile, name="4g.4gb", gi_profile_id=0, instance_count=1)
    full.update(multiprocessors=40, placements=[[0, 4]])
    custom = product_from_dict(
        {
            "key": "X",
            "product_name": "X",
            "architecture": "A",
            "cuda_compute_capability": "9.0",
            "memory_mib": 4096,
            "multiprocessors": multiprocessors,
            "memory_slices": 4,
            "compute_slices": 4,
            "mig_profiles": [profile, full],
        }
    )
    return FakeBackend("n", [FakeGpuSpec(custom)], boot_id="b")


def test_instance_count_limit_alone() -> None:
    backend = custom_backend(instance_count=2, multiprocessors=100)
    backend.create_gpu_instance(0, "1g.1gb", MigPlacement(0, 1))
    backend.create_gpu_instance(0, "1g.1gb", MigPlacement(1, 1))
    with pytest.raises(InsufficientResourcesError, match=r"allows 2 instance\(s\) and 2 exist"):
        backend.create_gpu_instance(0, "1g.1gb", MigPlacement(2, 1))


def test_multiprocessor_total_limits_instances() -> None:
    backend = custom_backend(instance_count=4, multiprocessors=25)
    backend.create_gpu_instance(0, "1g.1gb", MigPlacement(0, 1))
    backend.create_gpu_instance(0, "1g.1gb", MigPlacement(1, 1))
    with pytest.raises(InsufficientResourcesError, match="not enough multiprocessors"):
        backend.create_gpu_instance(0, "1g.1gb", MigPlacement(2, 1))


@pytest.mark.parametrize("key", PRODUCTS)
def test_destroy_frees_slices_and_ids_are_lowest_free(key: str) -> None:
    backend = single(key)
    smallest = known_products()[key].mig_profiles[0]
    ids = [backend.create_gpu_instance(0, smallest.name, p) for p in smallest.placements[:3]]
    assert ids == [1, 2, 3]
    backend.destroy_gpu_instance(0, 2)
    assert backend.create_gpu_instance(0, smallest.name, smallest.placements[1]) == 2
    assert backend.create_gpu_instance(0, smallest.name, smallest.placements[3]) == 4


@pytest.mark.parametrize("key", PRODUCTS)
def test_full_profile_then_teardown(key: str) -> None:
    backend = single(key)
    full = backend.gpus[0].full_profile
    assert full is not None
    gi_id = backend.create_gpu_instance(0, full.name, full.placements[0])
    assert backend.create_compute_instance(0, gi_id) == 0
    with pytest.raises(InUseError) as in_use:
        backend.destroy_gpu_instance(0, gi_id)
    assert in_use.value.code == 19
    backend.destroy_compute_instance(0, gi_id, 0)
    backend.destroy_gpu_instance(0, gi_id)
    assert backend.gpu_instances(0) == ()
    assert backend.create_gpu_instance(0, full.name, full.placements[0]) == 1


def test_compute_instance_rules() -> None:
    backend = single("H100-SXM5-80GB")
    with pytest.raises(NotFoundError) as missing:
        backend.create_compute_instance(0, 1)
    assert missing.value.code == 6
    gi_id = backend.create_gpu_instance(0, "3g.40gb", MigPlacement(4, 4))
    assert backend.create_compute_instance(0, gi_id) == 0
    with pytest.raises(InsufficientResourcesError, match="already has its full-size compute"):
        backend.create_compute_instance(0, gi_id)
    with pytest.raises(NotFoundError, match="no compute instance 5"):
        backend.destroy_compute_instance(0, gi_id, 5)
    with pytest.raises(NotFoundError, match="no GPU instance 9"):
        backend.destroy_compute_instance(0, 9, 0)
    with pytest.raises(NotFoundError, match="no GPU instance 9"):
        backend.destroy_gpu_instance(0, 9)
    (instance,) = backend.gpu_instances(0)
    assert instance.ci_ids == (0,)


def test_mig_devices_and_inventory() -> None:
    backend = FakeBackend("node-a", [FakeGpuSpec.of("A100-SXM4-40GB", 2)], boot_id="b")
    lone_gi = backend.create_gpu_instance(0, "1g.5gb", MigPlacement(6, 1))
    device = create_mig_device(backend, 1, "3g.20gb", MigPlacement(4, 4))
    assert device.parent_minor == 1
    assert device.parent_uuid == backend.gpus[1].uuid
    assert (device.profile, device.gi_profile_id, device.ci_id) == ("3g.20gb", 9, 0)
    assert device.placement == MigPlacement(4, 4)
    assert device.uuid.startswith("MIG-")
    # A GPU instance without a compute instance is not a MIG device, but is an instance.
    assert backend.mig_devices(0) == ()
    assert [g.gi_id for g in backend.gpu_instances(0)] == [lone_gi]
    assert backend.mig_devices(1) == (device,)
    inventory = backend.inventory()
    assert inventory.node_name == "node-a"
    assert inventory.gpus == backend.gpus
    assert inventory.mig_devices == (device,)


def test_recreated_device_gets_a_new_uuid() -> None:
    backend = single("H100-SXM5-80GB")
    first = create_mig_device(backend, 0, "1g.10gb", MigPlacement(2, 1))
    destroy_mig_device(backend, 0, first.gi_id, first.ci_id)
    second = create_mig_device(backend, 0, "1g.10gb", MigPlacement(2, 1))
    assert (second.gi_id, second.ci_id) == (first.gi_id, first.ci_id)
    assert second.uuid != first.uuid


def test_mig_device_round_trip_via_composite_helpers() -> None:
    backend = single("H200-SXM-141GB")
    device = create_mig_device(backend, 0, "2g.35gb", MigPlacement(2, 2))
    assert backend.mig_devices(0) == (device,)
    destroy_mig_device(backend, 0, device.gi_id, device.ci_id)
    assert backend.gpu_instances(0) == ()
    # Tearing down again converges: both halves are already gone.
    destroy_mig_device(backend, 0, device.gi_id, device.ci_id)


def test_composite_create_rolls_back_gpu_instance_when_ci_fails() -> None:
    backend = single("B200")
    backend.fail_next_creates(0, error="InsufficientResources", compute_instance=True)
    with pytest.raises(InsufficientResourcesError, match="injected fault"):
        create_mig_device(backend, 0, "4g.90gb", MigPlacement(0, 4))
    assert backend.gpu_instances(0) == ()
    device = create_mig_device(backend, 0, "4g.90gb", MigPlacement(0, 4))
    assert device.gi_id == 1


def test_mig_disabled_gpu_refuses_mig_but_reports_placements() -> None:
    backend = FakeBackend("n", [FakeGpuSpec.of("A100-SXM4-40GB", mig_enabled=False)], boot_id="b")
    assert backend.possible_placements(0, "7g.40gb") == (MigPlacement(0, 8),)
    with pytest.raises(NotSupportedError, match="MIG mode is disabled") as caught:
        backend.create_gpu_instance(0, "7g.40gb", MigPlacement(0, 8))
    assert caught.value.code == 3
    with pytest.raises(NotSupportedError):
        backend.create_compute_instance(0, 1)
    with pytest.raises(NotSupportedError):
        destroy_mig_device(backend, 0, 1, 0)
    assert backend.gpu_instances(0) == ()
    assert backend.mig_devices(0) == ()


def test_gpu_without_mig() -> None:
    custom = product_from_dict(
        {
            "key": "L4",
            "product_name": "NVIDIA L4",
            "architecture": "Ada Lovelace",
            "cuda_compute_capability": "8.9",
            "memory_mib": 23034,
            "multiprocessors": 58,
        }
    )
    backend = FakeBackend("n", [FakeGpuSpec(custom)], boot_id="b")
    with pytest.raises(NotSupportedError, match="does not support MIG"):
        backend.possible_placements(0, "1g.5gb")
    with pytest.raises(NotSupportedError, match="does not support MIG"):
        backend.create_gpu_instance(0, "1g.5gb", MigPlacement(0, 1))
    backend.set_timeslice(0, TimeSliceInterval.LONG)
    assert backend.timeslice(0) is TimeSliceInterval.LONG
    assert backend.inventory().mig_devices == ()


def test_unknown_profile_is_not_supported() -> None:
    backend = single("A30-24GB")
    for call in (
        lambda: backend.possible_placements(0, "7g.80gb"),
        lambda: backend.create_gpu_instance(0, "7g.80gb", MigPlacement(0, 8)),
    ):
        with pytest.raises(NotSupportedError, match=r"no MIG profile '7g\.80gb'") as caught:
            call()
        assert caught.value.code == 3


def test_node_without_gpus() -> None:
    backend = FakeBackend("empty", [], boot_id="b")
    assert backend.inventory().gpus == ()
    assert backend.health_events() == ()
    with pytest.raises(NotFoundError, match=r"has no GPU with minor 0 \(it has no GPUs\)"):
        backend.gpu_instances(0)


def test_unknown_minor_is_not_found() -> None:
    backend = single("A30-24GB")
    calls: list[Callable[[], object]] = [
        lambda: backend.possible_placements(3, "1g.6gb"),
        lambda: backend.create_gpu_instance(3, "1g.6gb", MigPlacement(0, 1)),
        lambda: backend.create_compute_instance(3, 1),
        lambda: backend.destroy_compute_instance(3, 1, 0),
        lambda: backend.destroy_gpu_instance(3, 1),
        lambda: backend.gpu_instances(3),
        lambda: backend.mig_devices(3),
        lambda: backend.set_timeslice(3, TimeSliceInterval.SHORT),
    ]
    for call in calls:
        with pytest.raises(NotFoundError, match="has no GPU with minor 3") as caught:
            call()
        assert caught.value.code == 6


def test_errors_name_gpu_and_operation() -> None:
    backend = single("H100-SXM5-80GB")
    uuid = backend.gpus[0].uuid
    backend.create_gpu_instance(0, "4g.40gb", MigPlacement(0, 4))
    with pytest.raises(InsufficientResourcesError) as caught:
        backend.create_gpu_instance(0, "1g.10gb", MigPlacement(2, 1))
    assert caught.value.gpu == f"0 ({uuid})"
    assert str(caught.value).startswith(
        f"GPU 0 ({uuid}): create GPU instance 1g.10gb at 2:1: placement overlaps GPU instance 1"
    )


def test_timeslice_is_recorded() -> None:
    backend = FakeBackend("n", [FakeGpuSpec.of("A30-24GB", 2)], boot_id="b")
    assert backend.timeslice(1) is TimeSliceInterval.DEFAULT
    backend.set_timeslice(1, TimeSliceInterval.MEDIUM)
    assert backend.timeslice(1) is TimeSliceInterval.MEDIUM
    assert backend.timeslice(0) is TimeSliceInterval.DEFAULT


def test_closed_backend_refuses_calls() -> None:
    backend = single("A30-24GB")
    backend.close()
    with pytest.raises(NvmlUnavailableError) as caught:
        backend.inventory()
    assert caught.value.code == 1
    with pytest.raises(NvmlUnavailableError):
        backend.create_gpu_instance(0, "1g.6gb", MigPlacement(0, 1))
