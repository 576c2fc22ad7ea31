"""The limit checker finds each API-server limit violation and names it."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from dra_driver.slices import SliceLimitError, check_limits, enforce_limits

Slices = list[dict[str, Any]]


@pytest.fixture
def good(inventory_of, build) -> Slices:
    slices = build(inventory_of("A100-SXM4-40GB:2"))
    assert check_limits(slices) == []
    return slices


def first_device(slices: Slices) -> dict[str, Any]:
    return slices[1]["spec"]["devices"][0]


def too_many_devices(s: Slices) -> None:
    devices = s[1]["spec"]["devices"]
    for i in range(70 - len(devices)):
        extra = copy.deepcopy(devices[0])
        extra["name"] = f"extra-{i}"
        devices.append(extra)


def too_many_plain_devices(s: Slices) -> None:
    s[1]["spec"]["devices"] = [
        {"name": f"d-{i}", "attributes": {"type": {"string": "gpu"}}} for i in range(129)
    ]


def too_many_attributes(s: Slices) -> None:
    first_device(s)["attributes"].update({f"extra{i}": {"int": i} for i in range(20)})


def add_attribute(key: str, value: dict[str, Any]) -> Callable[[Slices], None]:
    return lambda s: first_device(s)["attributes"].__setitem__(key, value)


def too_many_counter_sets(s: Slices) -> None:
    sets = s[0]["spec"]["sharedCounters"]
    for i in range(9 - len(sets)):
        extra = copy.deepcopy(sets[0])
        extra["name"] = f"extra-{i}"
        sets.append(extra)


def too_many_counters(s: Slices) -> None:
    s[0]["spec"]["sharedCounters"][0]["counters"].update(
        {f"c-{i}": {"value": "1"} for i in range(30)}
    )


def too_many_consumptions(s: Slices) -> None:
    entry = first_device(s)["consumesCounters"][0]
    first_device(s)["consumesCounters"] = [
        entry,
        {**entry, "counterSet": "gpu-1"},
        {**entry, "counterSet": "gpu-x"},
    ]


def too_many_taints(s: Slices) -> None:
    first_device(s)["taints"] = [{"key": f"k{i}", "effect": "NoSchedule"} for i in range(17)]


def bad_taint_effect(s: Slices) -> None:
    first_device(s)["taints"] = [{"key": "k", "effect": "Sometimes"}]


def devices_and_counters(s: Slices) -> None:
    s[0]["spec"]["devices"] = [{"name": "x", "attributes": {}}]


def wrong_slice_count(s: Slices) -> None:
    s[1]["spec"]["pool"]["resourceSliceCount"] = 7


def mixed_generations(s: Slices) -> None:
    s[2]["spec"]["pool"]["generation"] = 2


def unknown_counter_set(s: Slices) -> None:
    first_device(s)["consumesCounters"][0]["counterSet"] = "gpu-9"


def unknown_counter(s: Slices) -> None:
    first_device(s)["consumesCounters"][0]["counters"]["bogus"] = {"value": "1"}


def duplicate_device(s: Slices) -> None:
    s[2]["spec"]["devices"][0]["name"] = first_device(s)["name"]


def bad_device_name(s: Slices) -> None:
    first_device(s)["name"] = "GPU_0"


def two_node_fields(s: Slices) -> None:
    s[1]["spec"]["allNodes"] = True


def request_policy_without_multi(s: Slices) -> None:
    device = next(d for d in s[1]["spec"]["devices"] if d["name"].endswith("-shared"))
    del device["allowMultipleAllocations"]


def off_step_default(s: Slices) -> None:
    device = next(d for d in s[1]["spec"]["devices"] if d["name"].endswith("-shared"))
    device["capacity"]["memory"]["requestPolicy"]["default"] = "300Mi"


def bad_quantity(s: Slices) -> None:
    s[0]["spec"]["sharedCounters"][0]["counters"]["memory"] = {"value": "lots"}


CASES = [
    (too_many_devices, "spec.devices", "at most 64 (some device uses taints or consumesCounters)"),
    (too_many_plain_devices, "spec.devices", "129 devices, at most 128"),
    (too_many_attributes, "spec.devices[0]", "at most 32 together"),
    (add_attribute("x" * 33, {"int": 1}), "attributes[" + "x" * 33 + "]", "longer than 32"),
    (add_attribute("9lives", {"int": 1}), "attributes[9lives]", "C identifier"),
    (add_attribute("Bad_Domain.io/x", {"int": 1}), "attributes[Bad_Domain.io/x]", "DNS subdomain"),
    (add_attribute("long", {"string": "s" * 65}), "attributes[long].string", "at most 64"),
    (
        add_attribute("ver", {"version": "1.2"}),
        "attributes[ver].version",
        "not semantic versioning",
    ),
    (add_attribute("two", {"int": 1, "bool": True}), "attributes[two]", "exactly one of"),
    (too_many_counter_sets, "spec.sharedCounters", "9 counter sets, at most 8"),
    (too_many_counters, "spec.sharedCounters[0].counters", "at most 32"),
    (too_many_consumptions, "consumesCounters", "3 entries, at most 2"),
    (too_many_taints, "taints", "17 taints, at most 16"),
    (bad_taint_effect, "taints[0].effect", "'Sometimes' is not one of"),
    (devices_and_counters, "spec", "either devices or sharedCounters, not both"),
    (wrong_slice_count, "spec.pool.resourceSliceCount", "says 7 but the pool has 3 slices"),
    (mixed_generations, "spec.pool.generation", "slices disagree"),
    (unknown_counter_set, "consumesCounters", "counter set 'gpu-9' does not exist"),
    (unknown_counter, "consumesCounters", "['bogus'] are not in counter set"),
    (duplicate_device, "spec.devices", "in two slices"),
    (bad_device_name, "spec.devices[0].name", "must be a DNS label"),
    (two_node_fields, "spec", "exactly one of nodeName"),
    (request_policy_without_multi, "requestPolicy", "only allowed when allowMultipleAllocations"),
    (off_step_default, "validRange.step", "default is not min plus a multiple of step"),
    (bad_quantity, "counters[memory].value", "is not a quantity"),
]


@pytest.mark.parametrize(("mutate", "path", "message"), CASES, ids=[c[0].__name__ for c in CASES])
def test_each_violation_is_found_and_named(good, mutate, path, message):
    mutate(good)
    violations = check_limits(good)
    assert violations, "the checker missed the violation"
    assert any(path in v.path and message in v.message for v in violations), violations
    assert all(str(v).startswith('ResourceSlice "') for v in violations)


def test_enforce_raises_with_every_violation_listed(good):
    too_many_taints(good)
    bad_device_name(good)
    with pytest.raises(SliceLimitError) as caught:
        enforce_limits(good)
    assert len(caught.value.violations) == 2
    assert "17 taints, at most 16" in str(caught.value)
    assert "GPU_0" in str(caught.value)
