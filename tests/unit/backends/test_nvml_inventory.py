"""Enumeration through NvmlBackend against the pynvml stand-in."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pynvml

from dra_driver.backends.base import GpuBackend
from dra_driver.inventory.model import MigPlacement
from dra_driver.inventory.products import product
from tests.unit.backends.nvml_standin import (
    H100_A,
    H100_B,
    INVALID_ARGUMENT,
    L40S,
    NOT_SUPPORTED,
    StandInNvml,
    build_backend,
)

H100_FACTS = product("H100-SXM5-80GB")


def test_satisfies_the_backend_protocol(tmp_path: Path) -> None:
    _, backend = build_backend(tmp_path)
    assert isinstance(backend, GpuBackend)
    assert backend.node_name == "node-a"


def test_gpus_are_ordered_by_minor_and_keep_their_enumeration_index(tmp_path: Path) -> None:
    _, backend = build_backend(tmp_path)
    gpus = backend.inventory().gpus
    assert [(g.minor, g.index, g.uuid) for g in gpus] == [
        (0, 1, H100_A),
        (1, 2, L40S),
        (2, 0, H100_B),
    ]


def test_mig_enabled_h100_fields(tmp_path: Path) -> None:
    _, backend = build_backend(tmp_path)
    gpu = backend.inventory().gpu(0)
    assert gpu.product_name == "NVIDIA H100 80GB HBM3"
    assert gpu.brand == "Nvidia"
    assert gpu.architecture == "Hopper"
    assert gpu.cuda_compute_capability == "9.0"
    assert gpu.driver_version == "580.65.06"
    assert gpu.cuda_driver_version == "12.8"
    assert gpu.memory_bytes == H100_FACTS.memory_mib * 1024 * 1024
    assert gpu.multiprocessors == 132
    assert gpu.pci_bus_id == "0000:18:00.0"
    assert gpu.pcie_root == "pci0000:17"
    assert gpu.numa_node == 0
    assert gpu.mig_capable and gpu.mig_enabled
    assert gpu.memory_slices == 8


def test_gpu_without_mig(tmp_path: Path) -> None:
    _, backend = build_backend(tmp_path)
    gpu = backend.inventory().gpu(1)
    assert gpu.product_name == "NVIDIA L40S"
    assert gpu.architecture == "Ada Lovelace"
    assert gpu.cuda_compute_capability == "8.9"
    assert gpu.multiprocessors == 142
    assert not gpu.mig_capable and not gpu.mig_enabled
    assert gpu.mig_profiles == () and gpu.memory_slices == 0
    assert gpu.nvlink_domain == ""
    assert gpu.pcie_root == "pci0000:3a"


def test_numa_node_falls_back_to_sysfs_and_minus_one_means_unknown(tmp_path: Path) -> None:
    _, backend = build_backend(tmp_path)
    inventory = backend.inventory()
    assert inventory.gpu(1).numa_node == 1  # NVML: not supported; sysfs: 1
    assert inventory.gpu(2).numa_node is None  # NVML: not supported; sysfs: -1


def test_sm_count_prefers_device_attributes(tmp_path: Path) -> None:
    machine = StandInNvml()
    machine.gpu(1).attributes_on_full_gpu = True
    machine.gpu(1).multiprocessors = 140
    machine.gpu(1).cores = None
    _, backend = build_backend(tmp_path, machine)
    assert backend.inventory().gpu(1).multiprocessors == 140


def test_sm_count_from_cores_when_attributes_call_the_handle_invalid(tmp_path: Path) -> None:
    machine = StandInNvml()
    machine.fail("nvmlDeviceGetAttributes", pynvml.NVML_ERROR_INVALID_ARGUMENT, times=3)
    _, backend = build_backend(tmp_path, machine)
    assert [g.multiprocessors for g in backend.inventory().gpus] == [132, 142, 132]


def test_sm_count_is_zero_when_nvml_cannot_tell(tmp_path: Path) -> None:
    machine = StandInNvml()
    machine.gpu(1).cores = None
    _, backend = build_backend(tmp_path, machine)
    assert backend.inventory().gpu(1).multiprocessors == 0


def test_unknown_architecture_and_brand(tmp_path: Path) -> None:
    machine = StandInNvml()
    machine.gpu(1).architecture = 0xFFFFFFFF
    machine.gpu(1).brand = 99
    _, backend = build_backend(tmp_path, machine)
    gpu = backend.inventory().gpu(1)
    assert (gpu.architecture, gpu.brand) == ("Unknown", "Unknown")


def test_cuda_version_from_the_older_call_when_v2_is_missing(tmp_path: Path) -> None:
    machine = StandInNvml()
    machine.has_cuda_v2 = False
    machine.cuda_version = 12040
    _, backend = build_backend(tmp_path, machine)
    assert backend.inventory().gpu(0).cuda_driver_version == "12.4"


def test_nvlink_connected_gpus_share_a_domain(tmp_path: Path) -> None:
    _, backend = build_backend(tmp_path)
    inventory = backend.inventory()
    domain = inventory.gpu(0).nvlink_domain
    assert domain and len(domain) <= 64
    assert inventory.gpu(2).nvlink_domain == domain
    assert inventory.gpu(1).nvlink_domain == ""
    # Stable across snapshots, different on another node with the same layout.
    assert backend.inventory().gpu(0).nvlink_domain == domain
    _, other = build_backend(tmp_path / "other", node_name="node-b")
    assert other.inventory().gpu(0).nvlink_domain not in ("", domain)


def test_gpus_joined_only_through_a_switch_share_a_domain(tmp_path: Path) -> None:
    machine = StandInNvml()
    machine.gpu(0).nvlinks = {1: "00000000:C1:00.0"}
    machine.gpu(2).nvlinks = {5: "00000000:C1:00.0"}
    _, backend = build_backend(tmp_path, machine)
    inventory = backend.inventory()
    assert inventory.gpu(0).nvlink_domain == inventory.gpu(2).nvlink_domain != ""


def test_inactive_links_do_not_join_gpus(tmp_path: Path) -> None:
    machine = StandInNvml()
    machine.gpu(0).nvlinks = {}
    machine.gpu(2).nvlinks = {}
    _, backend = build_backend(tmp_path, machine)
    inventory = backend.inventory()
    assert inventory.gpu(0).nvlink_domain == inventory.gpu(2).nvlink_domain == ""


def test_registered_fabric_names_the_domain(tmp_path: Path) -> None:
    machine = StandInNvml()
    cluster = bytes(range(1, 17))
    for minor in (0, 2):
        machine.gpu(minor).fabric = (cluster, 7, pynvml.NVML_GPU_FABRIC_STATE_COMPLETED, 0)
    _, backend = build_backend(tmp_path, machine)
    inventory = backend.inventory()
    expected = "01020304-0506-0708-090a-0b0c0d0e0f10.7"
    assert inventory.gpu(0).nvlink_domain == inventory.gpu(2).nvlink_domain == expected


def test_fabric_still_registering_falls_back_to_links(tmp_path: Path) -> None:
    machine = StandInNvml()
    in_progress = pynvml.NVML_GPU_FABRIC_STATE_IN_PROGRESS
    machine.gpu(0).fabric = (bytes(range(1, 17)), 7, in_progress, 0)
    _, backend = build_backend(tmp_path, machine)
    domain = backend.inventory().gpu(0).nvlink_domain
    assert domain.startswith("nvlink-")


def test_mig_profiles_match_the_hardware_table(tmp_path: Path) -> None:
    _, backend = build_backend(tmp_path)
    for minor in (0, 2):  # MIG enabled and MIG disabled alike
        profiles = backend.inventory().gpu(minor).mig_profiles
        expected = sorted(
            (dataclasses.replace(p, unconfirmed=()) for p in H100_FACTS.mig_profiles),
            key=lambda p: p.profile_index,
        )
        assert list(profiles) == expected


def test_profile_index_and_id_are_kept_apart(tmp_path: Path) -> None:
    _, backend = build_backend(tmp_path)
    gpu = backend.inventory().gpu(0)
    one_g_me = gpu.profile("1g.10gb+me")
    assert one_g_me is not None
    assert (one_g_me.profile_index, one_g_me.gi_profile_id) == (7, 20)
    one_g_20 = gpu.profile("1g.20gb")
    assert one_g_20 is not None
    assert (one_g_20.profile_index, one_g_20.gi_profile_id) == (9, 15)
    assert one_g_20.placements == tuple(MigPlacement(s, 2) for s in (0, 2, 4, 6))
    full = gpu.profile("7g.80gb")
    assert full is not None
    assert (full.ci_profile_index, full.ci_profile_id) == (4, 4)


def test_profile_walk_skips_missing_and_unknown_indices(tmp_path: Path) -> None:
    machine, backend = build_backend(tmp_path)
    backend.inventory()
    walked = [args[1] for args in machine.called("nvmlDeviceGetGpuInstanceProfileInfo")]
    assert sorted(set(walked)) == list(range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT))
    codes = {code for name, code in machine.raised if name.endswith("GpuInstanceProfileInfo")}
    assert codes == {NOT_SUPPORTED, INVALID_ARGUMENT}


def test_placements_are_asked_for_by_profile_id(tmp_path: Path) -> None:
    machine, backend = build_backend(tmp_path)
    backend.inventory()
    asked = {args[1] for args in machine.called("nvmlDeviceGetGpuInstancePossiblePlacements")}
    assert asked == {p.gi_profile_id for p in H100_FACTS.mig_profiles}
    assert not [r for r in machine.raised if r[0].endswith("PossiblePlacements")]


def test_profiles_are_walked_once_per_gpu(tmp_path: Path) -> None:
    machine, backend = build_backend(tmp_path)
    backend.inventory()
    first = len(machine.called("nvmlDeviceGetGpuInstanceProfileInfo"))
    backend.inventory()
    backend.possible_placements(0, "1g.10gb")
    assert len(machine.called("nvmlDeviceGetGpuInstanceProfileInfo")) == first


def test_profile_names_are_derived_when_the_driver_has_no_named_profile_info(
    tmp_path: Path,
) -> None:
    machine = StandInNvml()
    machine.has_profile_info_v2 = False
    _, backend = build_backend(tmp_path, machine)
    names = [p.name for p in backend.inventory().gpu(0).mig_profiles]
    assert sorted(names) == sorted(p.name for p in H100_FACTS.mig_profiles)


def test_profiles_appear_once_a_driver_offers_placements(tmp_path: Path) -> None:
    machine = StandInNvml()
    machine.placements_need_mig = True
    _, backend = build_backend(tmp_path, machine)
    gpu = backend.inventory().gpu(2)
    assert gpu.mig_capable and not gpu.mig_enabled
    assert (gpu.mig_profiles, gpu.memory_slices) == ((), 0)
    machine.gpu(2).mig_enabled = True
    gpu = backend.inventory().gpu(2)
    assert gpu.mig_enabled and gpu.memory_slices == 8
    assert len(gpu.mig_profiles) == len(H100_FACTS.mig_profiles)


def test_inventory_lists_live_mig_devices_of_mig_enabled_gpus_only(tmp_path: Path) -> None:
    _, backend = build_backend(tmp_path)
    gi_id = backend.create_gpu_instance(0, "3g.40gb", MigPlacement(4, 4))
    ci_id = backend.create_compute_instance(0, gi_id)
    backend.create_gpu_instance(0, "1g.10gb", MigPlacement(0, 1))  # no compute instance
    inventory = backend.inventory()
    assert len(inventory.mig_devices) == 1
    device = inventory.mig_devices[0]
    assert (device.parent_minor, device.parent_uuid) == (0, H100_A)
    assert (device.profile, device.gi_profile_id) == ("3g.40gb", 9)
    assert (device.gi_id, device.ci_id) == (gi_id, ci_id)
    assert device.placement == MigPlacement(4, 4)
    assert device.uuid.startswith("MIG-")
    assert inventory.mig_devices_of(2) == ()


def test_a_machine_without_gpus_has_an_empty_inventory(tmp_path: Path) -> None:
    _, backend = build_backend(tmp_path, StandInNvml(gpus=[]))
    inventory = backend.inventory()
    assert inventory.gpus == ()
    assert inventory.mig_devices == ()
    assert backend.health_events() == ()
