"""Noticing that the API server dropped the fields partitionable devices depend on."""

from __future__ import annotations

import copy

from dra_driver.backends.fake import FakeBackend
from dra_driver.slices import SliceSettings, build_resource_slices
from kubeletplugin.publisher.dropped import dropped_fields


def slices() -> list[dict[str, object]]:
    backend = FakeBackend.from_spec("H100-SXM5-80GB:1", "node-a")
    return build_resource_slices(backend.inventory(), SliceSettings())


def test_a_faithful_store_drops_nothing() -> None:
    for obj in slices():
        assert dropped_fields(obj, copy.deepcopy(obj)) == []


def test_missing_counters_shares_and_policies_are_named() -> None:
    counters, devices = slices()
    stripped = copy.deepcopy(counters)
    del stripped["spec"]["sharedCounters"]
    assert dropped_fields(counters, stripped) == ["spec.sharedCounters"]
    stripped = copy.deepcopy(devices)
    for device in stripped["spec"]["devices"]:
        device.pop("consumesCounters", None)
        device.pop("allowMultipleAllocations", None)
        for capacity in (device.get("capacity") or {}).values():
            capacity.pop("requestPolicy", None)
    found = dropped_fields(devices, stripped)
    assert "spec.devices[0].consumesCounters" in found
    shared = next(
        i for i, d in enumerate(devices["spec"]["devices"]) if d.get("allowMultipleAllocations")
    )
    assert f"spec.devices[{shared}].allowMultipleAllocations" in found
    assert f"spec.devices[{shared}].capacity[memory].requestPolicy" in found


def test_the_plain_layout_has_nothing_to_drop() -> None:
    backend = FakeBackend.from_spec("H100-SXM5-80GB:1", "node-a")
    for obj in build_resource_slices(backend.inventory(), SliceSettings(partitionable=False)):
        stripped = copy.deepcopy(obj)
        stripped["spec"].pop("sharedCounters", None)
        assert dropped_fields(obj, stripped) == []
