"""MIG create/destroy flows through NvmlBackend against the pynvml stand-in."""

from __future__ import annotations

from pathlib import Path

import pynvml
import pytest

from dra_driver.backends.errors import (
    InsufficientResourcesError,
    InUseError,
    InvalidArgumentError,
    NotFoundError,
    NotSupportedError,
)
from dra_driver.backends.mig import create_mig_device, destroy_mig_device
from dra_driver.backends.nvml import NvmlBackend
from dra_driver.inventory.model import MigPlacement
from tests.unit.backends.nvml_standin import H100_A, StandInNvml, build_backend


@pytest.fixture
def machine_and_backend(tmp_path: Path) -> tuple[StandInNvml, NvmlBackend]:
    return build_backend(tmp_path)


@pytest.fixture
def backend(machine_and_backend: tuple[StandInNvml, NvmlBackend]) -> NvmlBackend:
    return machine_and_backend[1]


def test_possible_placements_are_the_profiles_placements(backend: NvmlBackend) -> None:
    assert backend.possible_placements(0, "1g.10gb") == tuple(
        MigPlacement(start, 1) for start in range(7)
    )
    assert backend.possible_placements(0, "7g.80gb") == (MigPlacement(0, 8),)
    # MIG-capable but disabled: placements are still known.
    assert backend.possible_placements(2, "3g.40gb") == (MigPlacement(0, 4), MigPlacement(4, 4))


def test_full_create_and_destroy_cycle(
    machine_and_backend: tuple[StandInNvml, NvmlBackend],
) -> None:
    machine, backend = machine_and_backend
    gi_id = backend.create_gpu_instance(0, "1g.10gb", MigPlacement(6, 1))
    created = machine.called("nvmlDeviceCreateGpuInstanceWithPlacement")
    assert created[-1][1:] == (19, (6, 1))  # profile id, not index 0

    (instance,) = backend.gpu_instances(0)
    assert (instance.gi_id, instance.profile, instance.gi_profile_id) == (gi_id, "1g.10gb", 19)
    assert instance.placement == MigPlacement(6, 1)
    assert instance.ci_ids == ()
    assert backend.mig_devices(0) == ()

    ci_id = backend.create_compute_instance(0, gi_id)
    assert backend.gpu_instances(0)[0].ci_ids == (ci_id,)
    (device,) = backend.mig_devices(0)
    assert (device.gi_id, device.ci_id, device.parent_uuid) == (gi_id, ci_id, H100_A)
    assert device.placement == MigPlacement(6, 1)

    backend.destroy_compute_instance(0, gi_id, ci_id)
    assert backend.mig_devices(0) == ()
    backend.destroy_gpu_instance(0, gi_id)
    assert backend.gpu_instances(0) == ()


def test_compute_instance_uses_the_full_size_profile_id_the_gpu_reports(
    machine_and_backend: tuple[StandInNvml, NvmlBackend],
) -> None:
    machine, backend = machine_and_backend
    machine.ci_profile_ids = {2: 42}  # a driver where the 3-slice CI id differs from its index
    gi_id = backend.create_gpu_instance(0, "3g.40gb", MigPlacement(0, 4))
    backend.create_compute_instance(0, gi_id)
    created = machine.called("nvmlGpuInstanceCreateComputeInstance")
    assert created[-1][1] == 42
    looked_up = machine.called("nvmlGpuInstanceGetComputeInstanceProfileInfo")
    assert looked_up[-1][1:] == (2, 0)  # 3-slice CI index, shared engines


def test_mig_helpers_work_end_to_end(backend: NvmlBackend) -> None:
    device = create_mig_device(backend, 0, "2g.20gb", MigPlacement(2, 2))
    assert device.profile == "2g.20gb"
    assert device.placement == MigPlacement(2, 2)
    destroy_mig_device(backend, 0, device.gi_id, device.ci_id)
    destroy_mig_device(backend, 0, device.gi_id, device.ci_id)  # already gone: still fine
    assert backend.gpu_instances(0) == ()


def test_failed_compute_instance_leaves_no_gpu_instance_behind(
    machine_and_backend: tuple[StandInNvml, NvmlBackend],
) -> None:
    machine, backend = machine_and_backend
    machine.fail("nvmlGpuInstanceCreateComputeInstance", pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
    with pytest.raises(InsufficientResourcesError):
        create_mig_device(backend, 0, "1g.10gb", MigPlacement(3, 1))
    assert backend.gpu_instances(0) == ()


def test_several_devices_sorted_by_placement(backend: NvmlBackend) -> None:
    for start in (4, 0):
        create_mig_device(backend, 0, "2g.20gb", MigPlacement(start, 2))
    create_mig_device(backend, 0, "1g.10gb", MigPlacement(6, 1))
    placements = [d.placement.start for d in backend.mig_devices(0)]
    assert placements == [0, 4, 6]
    assert len({d.uuid for d in backend.mig_devices(0)}) == 3


def test_overlapping_placement_is_insufficient_resources(backend: NvmlBackend) -> None:
    backend.create_gpu_instance(0, "3g.40gb", MigPlacement(0, 4))
    with pytest.raises(InsufficientResourcesError) as caught:
        backend.create_gpu_instance(0, "1g.10gb", MigPlacement(2, 1))
    assert caught.value.code == 23


def test_placement_the_profile_does_not_offer_is_invalid(backend: NvmlBackend) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        backend.create_gpu_instance(0, "3g.40gb", MigPlacement(2, 4))
    assert caught.value.code == 2


def test_unknown_profile_is_not_supported(backend: NvmlBackend) -> None:
    with pytest.raises(NotSupportedError, match=r"5g\.50gb"):
        backend.create_gpu_instance(0, "5g.50gb", MigPlacement(0, 4))
    with pytest.raises(NotSupportedError):
        backend.possible_placements(1, "1g.10gb")  # L40S has no MIG at all


def test_creating_on_a_gpu_with_mig_disabled_is_not_supported(backend: NvmlBackend) -> None:
    with pytest.raises(NotSupportedError) as caught:
        backend.create_gpu_instance(2, "1g.10gb", MigPlacement(0, 1))
    assert caught.value.code == 3
    assert backend.gpu_instances(2) == ()
    assert backend.mig_devices(2) == ()
    assert backend.gpu_instances(1) == ()  # no MIG at all


def test_gpu_instance_with_compute_instance_is_in_use(backend: NvmlBackend) -> None:
    gi_id = backend.create_gpu_instance(0, "1g.10gb", MigPlacement(0, 1))
    backend.create_compute_instance(0, gi_id)
    with pytest.raises(InUseError) as caught:
        backend.destroy_gpu_instance(0, gi_id)
    assert caught.value.code == 19


def test_busy_compute_instance_is_in_use(
    machine_and_backend: tuple[StandInNvml, NvmlBackend],
) -> None:
    machine, backend = machine_and_backend
    gi_id = backend.create_gpu_instance(0, "1g.10gb", MigPlacement(0, 1))
    ci_id = backend.create_compute_instance(0, gi_id)
    machine.gpu(0).gpu_instances[gi_id].compute_instances[ci_id].busy = True
    with pytest.raises(InUseError):
        backend.destroy_compute_instance(0, gi_id, ci_id)


def test_destroying_what_does_not_exist_is_not_found(backend: NvmlBackend) -> None:
    with pytest.raises(NotFoundError):
        backend.destroy_gpu_instance(0, 5)
    gi_id = backend.create_gpu_instance(0, "1g.10gb", MigPlacement(0, 1))
    with pytest.raises(NotFoundError):
        backend.destroy_compute_instance(0, gi_id, 3)
    with pytest.raises(NotFoundError):
        backend.create_compute_instance(0, gi_id + 1)


def test_unknown_minor_is_not_found(backend: NvmlBackend) -> None:
    with pytest.raises(NotFoundError, match="minor 9"):
        backend.create_gpu_instance(9, "1g.10gb", MigPlacement(0, 1))
    with pytest.raises(NotFoundError):
        backend.mig_devices(9)


def test_gpu_instance_ids_come_from_nvml(backend: NvmlBackend) -> None:
    first = backend.create_gpu_instance(0, "1g.10gb", MigPlacement(0, 1))
    second = backend.create_gpu_instance(0, "1g.10gb", MigPlacement(1, 1))
    assert first != second
    assert {gi.gi_id for gi in backend.gpu_instances(0)} == {first, second}
