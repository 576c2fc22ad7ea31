"""NvmlBackend against the GPUs of this machine; read-only, skipped where there are none."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from dra_driver.backends.base import GpuBackend
from dra_driver.backends.nvml import NvmlBackend
from dra_driver.inventory.model import Inventory
from tests.gpu.conftest import nvml_gpu_count

_COUNT, _WHY_NOT = nvml_gpu_count()
if _COUNT == 0:
    pytest.skip(_WHY_NOT, allow_module_level=True)

pytestmark = pytest.mark.gpu

UUID = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
MIG_UUID = re.compile(r"^MIG-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
BUS_ID = re.compile(r"^[0-9a-f]{4,}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
PCIE_ROOT = re.compile(r"^pci[0-9a-f]{4,}:[0-9a-f]{2}$")
VERSION = re.compile(r"^\d+\.\d+(\.\d+)*$")


@pytest.fixture(scope="module")
def inventory(nvml_backend: NvmlBackend) -> Inventory:
    return nvml_backend.inventory()


def test_is_a_gpu_backend(nvml_backend: NvmlBackend) -> None:
    assert isinstance(nvml_backend, GpuBackend)


def test_every_gpu_is_listed_once(inventory: Inventory) -> None:
    assert len(inventory.gpus) == _COUNT
    assert len({g.minor for g in inventory.gpus}) == _COUNT
    assert sorted(g.index for g in inventory.gpus) == list(range(_COUNT))
    assert len({g.uuid for g in inventory.gpus}) == _COUNT


def test_identity_and_versions(inventory: Inventory) -> None:
    for gpu in inventory.gpus:
        assert UUID.match(gpu.uuid), gpu.uuid
        assert gpu.product_name
        assert gpu.brand and gpu.architecture
        assert VERSION.match(gpu.cuda_compute_capability), gpu.cuda_compute_capability
        assert VERSION.match(gpu.driver_version), gpu.driver_version
        assert VERSION.match(gpu.cuda_driver_version), gpu.cuda_driver_version
        assert gpu.memory_bytes > 0
        assert gpu.multiprocessors > 0


def test_pci_and_topology(inventory: Inventory) -> None:
    for gpu in inventory.gpus:
        assert BUS_ID.match(gpu.pci_bus_id), gpu.pci_bus_id
        assert (Path("/sys/bus/pci/devices") / gpu.pci_bus_id).exists()
        assert gpu.pcie_root == "" or PCIE_ROOT.match(gpu.pcie_root), gpu.pcie_root
        assert gpu.numa_node is None or gpu.numa_node >= 0
        assert len(gpu.nvlink_domain) <= 64
    assert len({g.pci_bus_id for g in inventory.gpus}) == len(inventory.gpus)


def test_mig_profiles(inventory: Inventory, nvml_backend: NvmlBackend) -> None:
    capable = [g for g in inventory.gpus if g.mig_capable]
    if not capable:
        pytest.skip("no MIG-capable GPU here")
    for gpu in capable:
        assert gpu.mig_profiles, gpu.uuid
        assert gpu.memory_slices > 0
        ids = [p.gi_profile_id for p in gpu.mig_profiles]
        indices = [p.profile_index for p in gpu.mig_profiles]
        assert len(set(ids)) == len(ids)
        assert len(set(indices)) == len(indices)
        assert len({p.name for p in gpu.mig_profiles}) == len(ids)
        for profile in gpu.mig_profiles:
            assert profile.name and not profile.name.startswith("MIG")
            assert profile.placements
            assert len({p.size for p in profile.placements}) == 1
            for placement in profile.placements:
                assert placement.start >= 0 and placement.end <= gpu.memory_slices
            assert profile.memory_mib > 0 and profile.multiprocessors > 0
            assert nvml_backend.possible_placements(gpu.minor, profile.name) == profile.placements
        full = gpu.full_profile
        assert full is not None and full.placement_size == gpu.memory_slices


def test_live_mig_devices_are_consistent(inventory: Inventory, nvml_backend: NvmlBackend) -> None:
    enabled = [g for g in inventory.gpus if g.mig_enabled]
    if not enabled:
        pytest.skip("no GPU with MIG enabled here")
    for gpu in enabled:
        listed = nvml_backend.mig_devices(gpu.minor)
        assert {d.uuid for d in listed} == {d.uuid for d in inventory.mig_devices_of(gpu.minor)}
        instances = {gi.gi_id: gi for gi in nvml_backend.gpu_instances(gpu.minor)}
        names = {p.name for p in gpu.mig_profiles}
        taken: list[tuple[int, int]] = []
        for device in listed:
            assert MIG_UUID.match(device.uuid), device.uuid
            assert device.parent_uuid == gpu.uuid
            assert device.profile in names
            instance = instances[device.gi_id]
            assert device.ci_id in instance.ci_ids
            assert instance.placement == device.placement
            assert device.placement.end <= gpu.memory_slices
            taken.append((device.gi_id, device.ci_id))
        assert len(set(taken)) == len(taken)
        starts = sorted(gi.placement for gi in instances.values())
        for left, right in itertools.pairwise(starts):
            assert not left.overlaps(right)


def test_health_events_can_be_polled(nvml_backend: NvmlBackend) -> None:
    assert isinstance(nvml_backend.health_events(), tuple)
