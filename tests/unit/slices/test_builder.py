"""What the builder publishes: names, order, attributes, counters, layout."""

from __future__ import annotations

import re
from typing import Any

import pytest

from api.device_type import DeviceType
from dra_driver.backends.fake import FakeBackend
from dra_driver.backends.mig import create_mig_device
from dra_driver.inventory.model import MigPlacement
from dra_driver.inventory.products import known_products
from dra_driver.slices import check_limits
from dra_driver.slices.attributes import to_semver
from tests.unit.slices.conftest import devices_of

PRODUCTS = sorted(known_products())


def by_name(slices: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["name"]: d for d in devices_of(slices)}


def consumed(device: dict[str, Any]) -> dict[str, str]:
    (entry,) = device["consumesCounters"]
    return {k: v["value"] for k, v in entry["counters"].items()}


@pytest.mark.parametrize("key", PRODUCTS)
def test_mig_devices_equal_the_placements_in_the_facts(key, inventory_of, build):
    slices = build(inventory_of(f"{key}:2"))
    product = known_products()[key]
    for minor in (0, 1):
        published = {
            (d["attributes"]["profile"]["string"], d["attributes"]["placementStart"]["int"])
            for d in devices_of(slices)
            if d["attributes"]["type"]["string"] == "mig" and d["name"].startswith(f"gpu-{minor}-")
        }
        expected = {(p.name, pl.start) for p in product.mig_profiles for pl in p.placements}
        assert published == expected


def test_device_names_follow_the_resource_model(inventory_of, build):
    names = set(by_name(build(inventory_of("A100-SXM4-40GB:1"))))
    assert {"gpu-0", "gpu-0-shared", "gpu-0-ts-0", "gpu-0-ts-3"} <= names
    assert "gpu-0-mig-1g5gb-6" in names
    assert "gpu-0-mig-1g5gbme-0" in names  # "+me" becomes "me"
    assert "gpu-0-mig-7g40gb-0" in names
    assert all(re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", n) and len(n) <= 63 for n in names)


def test_devices_of_a_gpu_are_ordered_small_to_large(inventory_of, build):
    slices = build(inventory_of("H100-SXM5-80GB:1"))
    (gpu_slice,) = [s for s in slices if s["spec"].get("devices")]
    kinds = [d["attributes"]["type"]["string"] for d in gpu_slice["spec"]["devices"]]
    order = {"timeslice": 0, "shared": 1, "mig": 2, "gpu": 3}
    assert kinds == sorted(kinds, key=order.__getitem__)
    sizes = [
        d["attributes"]["placementSize"]["int"]
        for d in gpu_slice["spec"]["devices"]
        if d["attributes"]["type"]["string"] == "mig"
    ]
    assert sizes == sorted(sizes)
    # Among 1-slice placements the one that blocks the fewest larger placements comes first:
    # slice 6 is outside the 4g placement, so handing it out first keeps 4g possible.
    first_mig = next(d for d in gpu_slice["spec"]["devices"] if "mig" in d["name"])
    assert first_mig["name"] == "gpu-0-mig-1g10gb-6"


def test_attributes_of_a_whole_gpu(inventory_of, build):
    inventory = inventory_of("H100-SXM5-80GB:1")
    gpu = inventory.gpus[0]
    device = by_name(build(inventory))["gpu-0"]
    attrs = device["attributes"]
    assert attrs["type"] == {"string": "gpu"}
    assert attrs["uuid"] == {"string": gpu.uuid}
    assert attrs["productName"] == {"string": "NVIDIA H100 80GB HBM3"}
    assert attrs["cudaComputeCapability"] == {"version": "9.0.0"}
    assert attrs["driverVersion"] == {"version": to_semver(gpu.driver_version, "x")}
    assert attrs["migCapable"] == {"bool": True}
    assert attrs["resource.kubernetes.io/pciBusID"] == {"string": gpu.pci_bus_id}
    assert attrs["resource.kubernetes.io/pcieRoot"] == {"string": gpu.pcie_root}
    assert attrs["nvlinkDomain"] == {"string": gpu.nvlink_domain}
    assert device["capacity"] == {
        "memory": {"value": "81559Mi"},
        "multiprocessors": {"value": "132"},
    }


def test_attributes_and_capacity_of_a_mig_placement(inventory_of, build):
    inventory = inventory_of("H100-SXM5-80GB:1")
    device = by_name(build(inventory))["gpu-0-mig-3g40gb-4"]
    attrs = device["attributes"]
    assert attrs["type"] == {"string": "mig"}
    assert attrs["profile"] == {"string": "3g.40gb"}
    assert attrs["parentUUID"] == {"string": inventory.gpus[0].uuid}
    assert attrs["placementStart"] == {"int": 4}
    assert attrs["placementSize"] == {"int": 4}
    assert "uuid" not in attrs  # an on-demand placement has no UUID until prepare creates it
    assert device["capacity"]["memory"] == {"value": "40448Mi"}
    assert device["capacity"]["multiprocessors"] == {"value": "60"}
    assert device["capacity"]["ofaEngines"] == {"value": "0"}


def test_counter_consumption_of_each_shape(inventory_of, build):
    devices = by_name(build(inventory_of("H100-SXM5-80GB:1"), timeslice_shares=3))
    all_slices = {f"memory-slice-{i}" for i in range(8)}
    whole = consumed(devices["gpu-0"])
    assert {k: whole[k] for k in all_slices} == dict.fromkeys(all_slices, "3")
    assert whole["multiprocessors"] == "132"
    assert whole["ofa-engines"] == "1"
    mig = consumed(devices["gpu-0-mig-2g20gb-2"])
    assert {k for k in mig if k.startswith("memory-slice")} == {"memory-slice-2", "memory-slice-3"}
    assert mig["memory-slice-2"] == "3"
    assert mig["multiprocessors"] == "32"
    assert "ofa-engines" not in mig
    assert consumed(devices["gpu-0-ts-0"]) == dict.fromkeys(all_slices, "1")
    assert consumed(devices["gpu-0-shared"]) == dict.fromkeys(all_slices, "3")
    assert devices["gpu-0-shared"]["allowMultipleAllocations"] is True
    assert "allowMultipleAllocations" not in devices["gpu-0"]


def test_fractional_share_request_policy_is_valid(inventory_of, build):
    device = by_name(build(inventory_of("A30-24GB:1")))["gpu-0-shared"]
    compute = device["capacity"]["compute"]
    assert compute["value"] == "100"
    assert compute["requestPolicy"]["validRange"] == {"min": "1", "max": "100", "step": "1"}
    memory = device["capacity"]["memory"]["requestPolicy"]
    assert memory["default"] == "2Gi"
    assert memory["validRange"]["step"] == "256Mi"
    assert memory["validRange"]["max"] == "24Gi"


def test_shapes_setting_limits_what_is_published(inventory_of, build):
    inventory = inventory_of("A30-24GB:1")
    kinds = {
        d["attributes"]["type"]["string"]
        for d in devices_of(build(inventory, shapes=frozenset({DeviceType.GPU, DeviceType.MIG})))
    }
    assert kinds == {"gpu", "mig"}
    devices = by_name(build(inventory, shapes=frozenset({DeviceType.GPU})))
    assert set(devices) == {"gpu-0"}
    # Without time-slice shares every slice counter is worth 1.
    assert consumed(devices["gpu-0"])["memory-slice-0"] == "1"


def test_gpu_with_mig_disabled_publishes_no_placements(tmp_path, build):
    spec = tmp_path / "gpus.yaml"
    spec.write_text("gpus:\n  - profile: A100-SXM4-40GB\n    count: 1\n    migEnabled: false\n")
    devices = by_name(build(FakeBackend.from_spec(str(spec), "node-a").inventory()))
    assert not [n for n in devices if "-mig-" in n]
    assert "gpu-0" in devices


def test_layout_one_counter_slice_then_one_slice_per_gpu(inventory_of, build):
    slices = build(inventory_of("H100-SXM5-80GB:3"))
    names = [s["metadata"]["name"] for s in slices]
    assert names == [
        "node-a-gpu-dra-driver-dev-counters-0",
        "node-a-gpu-dra-driver-dev-gpu-0",
        "node-a-gpu-dra-driver-dev-gpu-1",
        "node-a-gpu-dra-driver-dev-gpu-2",
    ]
    assert [cs["name"] for cs in slices[0]["spec"]["sharedCounters"]] == ["gpu-0", "gpu-1", "gpu-2"]
    for s in slices:
        assert s["spec"]["pool"] == {"name": "node-a", "generation": 1, "resourceSliceCount": 4}
        assert s["spec"]["nodeName"] == "node-a"
        assert s["spec"]["driver"] == "gpu.dra-driver.dev"


def test_more_than_eight_gpus_split_the_counter_sets(inventory_of, build):
    slices = build(inventory_of("A30-24GB:10"))
    counter_slices = [s for s in slices if s["spec"].get("sharedCounters")]
    assert [len(s["spec"]["sharedCounters"]) for s in counter_slices] == [8, 2]
    assert check_limits(slices) == []


def test_many_shares_split_a_gpu_into_several_slices(inventory_of, build):
    slices = build(inventory_of("H100-SXM5-80GB:1"), timeslice_shares=100)
    gpu_slices = [s for s in slices if s["spec"].get("devices")]
    assert len(gpu_slices) == 2  # 127 devices, at most 64 per slice
    assert all(len(s["spec"]["devices"]) <= 64 for s in gpu_slices)
    assert sum(len(s["spec"]["devices"]) for s in gpu_slices) == 100 + 1 + 25 + 1
    assert check_limits(slices) == []


def test_owner_reference_to_the_node_when_its_uid_is_known(inventory_of, build):
    slices = build(inventory_of("A30-24GB:1"), node_uid="1234")
    for s in slices:
        assert s["metadata"]["ownerReferences"] == [
            {
                "apiVersion": "v1",
                "kind": "Node",
                "name": "node-a",
                "uid": "1234",
                "controller": True,
            }
        ]


def test_taints_reach_every_device_of_the_gpu(inventory_of, build):
    taint = {"key": "gpu.dra-driver.dev/unhealthy", "value": "xid-79", "effect": "NoSchedule"}
    slices = build(inventory_of("A30-24GB:2"), taints={1: [taint]})
    for device in devices_of(slices):
        expected = [taint] if device["name"].startswith("gpu-1") else None
        assert device.get("taints") == expected
    assert check_limits(slices) == []


def _with_static_instance(spec: str, profile: str, start: int) -> tuple[FakeBackend, int]:
    backend = FakeBackend.from_spec(spec, "node-a")
    gpu = backend.inventory().gpus[0]
    size = gpu.profile(profile).placement_size  # type: ignore[union-attr]
    device = create_mig_device(backend, 0, profile, MigPlacement(start, size))
    return backend, device.gi_id


def test_pre_created_mig_device_is_published_and_blocks_what_collides(build):
    backend, gi_id = _with_static_instance("H100-SXM5-80GB:1", "3g.40gb", 4)
    inventory = backend.inventory()
    devices = by_name(build(inventory))
    static = devices[f"gpu-0-mig-{gi_id}-0"]
    assert static["attributes"]["uuid"]["string"] == inventory.mig_devices[0].uuid
    assert "consumesCounters" not in static
    # Nothing that overlaps slices 4-7 is offered, and the whole GPU and shares are gone.
    assert "gpu-0" not in devices
    assert "gpu-0-shared" not in devices
    assert not [n for n in devices if n.startswith("gpu-0-ts-")]
    assert "gpu-0-mig-4g40gb-0" in devices
    assert "gpu-0-mig-3g40gb-4" not in devices
    assert "gpu-0-mig-1g10gb-6" not in devices
    assert "gpu-0-mig-1g10gb-3" in devices


def test_instances_created_for_claims_are_not_static(build):
    backend, gi_id = _with_static_instance("H100-SXM5-80GB:1", "3g.40gb", 4)
    devices = by_name(build(backend.inventory(), dynamic_instances={(0, gi_id)}))
    assert f"gpu-0-mig-{gi_id}-0" not in devices
    assert "gpu-0-mig-3g40gb-4" in devices
    assert "gpu-0" in devices


def test_fallback_layout_has_no_counters(build):
    backend, gi_id = _with_static_instance("A100-SXM4-40GB:2", "1g.5gb", 0)
    slices = build(backend.inventory(), partitionable=False)
    assert not [s for s in slices if s["spec"].get("sharedCounters")]
    devices = by_name(slices)
    assert set(devices) == {f"gpu-0-mig-{gi_id}-0", "gpu-1"}
    assert all("consumesCounters" not in d for d in devices.values())
    assert check_limits(slices) == []


def test_node_without_gpus_publishes_one_empty_slice(build):
    inventory = FakeBackend.from_spec("A30-24GB:1", "node-a").inventory()
    empty = type(inventory)(node_name="node-a", gpus=())
    slices = build(empty)
    assert len(slices) == 1
    assert slices[0]["spec"]["devices"] == []
    assert slices[0]["spec"]["pool"]["resourceSliceCount"] == 1


def test_long_node_names_still_give_valid_slice_names(inventory_of, build):
    node = "n" * 240
    slices = build(inventory_of("A30-24GB:1", node=node))
    assert all(len(s["metadata"]["name"]) <= 253 for s in slices)
    assert len({s["metadata"]["name"] for s in slices}) == len(slices)
    assert check_limits(slices) == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("9.0", "9.0.0"),
        ("580.65.06", "580.65.6"),
        ("13", "13.0.0"),
        ("535.104.05.1", "535.104.5+1"),
    ],
)
def test_versions_become_semver(text, expected):
    assert to_semver(text, "driverVersion") == expected


@pytest.mark.parametrize("text", ["", "9.x", "r535", "1..2"])
def test_non_numeric_versions_are_refused_with_the_attribute_named(text):
    with pytest.raises(ValueError, match="driverVersion"):
        to_semver(text, "driverVersion")


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"timeslice_shares": -1}, "timeslice_shares"),
        ({"generation": -2}, "generation"),
    ],
)
def test_bad_settings_name_the_field(settings, field):
    from dra_driver.slices import SliceSettings

    with pytest.raises(ValueError, match=field):
        SliceSettings(**settings)


def test_bad_fractional_policy_names_the_field():
    from dra_driver.slices import SliceSettings
    from dra_driver.slices.builder import FractionalPolicy

    with pytest.raises(ValueError, match=r"fractional\.compute_default"):
        SliceSettings(fractional=FractionalPolicy(compute_default=0))
    with pytest.raises(ValueError, match=r"fractional\.memory_default"):
        SliceSettings(fractional=FractionalPolicy(memory_default=1, memory_step=256))
