from __future__ import annotations

import copy
from typing import Any

import pytest

from dra_driver.backends.fake import FakeBackend
from dra_driver.cel import CelEnvironment, DeviceVariable, device_variable
from dra_driver.slices import SliceSettings, build_resource_slices

DRIVER = "gpu.dra-driver.dev"


def _device(**attributes: Any) -> dict[str, Any]:
    return {"name": "d", "attributes": attributes}


def test_values_keep_their_types(env: CelEnvironment) -> None:
    var = device_variable(
        DRIVER,
        _device(
            s={"string": "text"},
            i={"int": -3},
            b={"bool": False},
            v={"version": "1.2.3-rc.1+build"},
        ),
    )
    g = 'device.attributes["gpu.dra-driver.dev"]'
    assert env.compile(f'{g}.s == "text" && {g}.i == -3 && {g}.b == false').evaluate(var)
    assert env.compile(f"type({g}.i) == int && type({g}.s) == string").evaluate(var)
    assert env.compile(f'{g}.v == semver("1.2.3-rc.1") && {g}.v.patch() == 3').evaluate(var)


def test_names_without_a_domain_belong_to_the_driver(env: CelEnvironment) -> None:
    var = device_variable(
        "example.com",
        _device(**{"local": {"int": 1}, "other.org/remote": {"int": 2}}),
    )
    assert env.compile('device.attributes["example.com"].local == 1').evaluate(var)
    assert env.compile('device.attributes["other.org"].remote == 2').evaluate(var)
    assert env.compile("device.attributes.size() == 2").evaluate(var)
    assert env.compile('device.driver == "example.com"').evaluate(var)


def test_missing_sections_are_empty(env: CelEnvironment) -> None:
    var = device_variable(DRIVER, {"name": "bare"})
    assert env.compile(
        "device.attributes.size() == 0 && device.capacity.size() == 0"
        " && !device.allowMultipleAllocations"
    ).evaluate(var)


def test_input_is_not_kept_by_reference(env: CelEnvironment) -> None:
    raw = _device(n={"int": 1})
    var = device_variable(DRIVER, raw)
    raw["attributes"]["n"]["int"] = 2
    assert env.compile('device.attributes["gpu.dra-driver.dev"].n == 1').evaluate(var)


@pytest.mark.parametrize(
    ("attributes", "capacity", "fragment"),
    [
        ({"driverVersion": {"version": "580.95"}}, {}, "attribute 'driverVersion'"),
        ({"driverVersion": {"version": "01.0.0"}}, {}, "not a semantic version"),
        ({"v": {"version": 5}}, {}, "attribute 'v': version value must be a string"),
        ({"empty": {}}, {}, "attribute 'empty' must have exactly one of"),
        ({"two": {"int": 1, "string": "x"}}, {}, "attribute 'two' must have exactly one"),
        ({"list": {"strings": ["a"]}}, {}, "attribute 'list' has unsupported field 'strings'"),
        ({"flag": {"bool": 1}}, {}, "attribute 'flag': bool value must be true or false"),
        ({"n": {"int": True}}, {}, "attribute 'n': int value must be an integer"),
        ({"n": {"int": 2**63}}, {}, "does not fit in 64 bits"),
        ({"long": {"string": "x" * 65}}, {}, "longer than 64 characters"),
        ({"bad-name": {"int": 1}}, {}, "attribute 'bad-name': the name must be a C identifier"),
        ({"x" * 33: {"int": 1}}, {}, "at most 32 characters"),
        ({"Example.COM/x": {"int": 1}}, {}, "domain 'Example.COM' must be a DNS subdomain"),
        ({"raw": "gpu"}, {}, "attribute 'raw' must be an object"),
        (
            {"dup": {"int": 1}, "gpu.dra-driver.dev/dup": {"int": 2}},
            {},
            "repeats gpu.dra-driver.dev/dup",
        ),
        ({}, {"memory": {"value": "80GB"}}, "capacity 'memory'"),
        ({}, {"memory": {"value": "80GB"}}, "is not a quantity"),
        ({}, {"memory": {"value": 1.5}}, "capacity 'memory': value must be a quantity string"),
        ({}, {"memory": "80Gi"}, "capacity 'memory' must be an object"),
        (
            {f"a{i}": {"int": i} for i in range(20)},
            {f"c{i}": {"value": "1"} for i in range(13)},
            "20 attributes and 13 capacities; at most 32",
        ),
    ],
)
def test_malformed_devices_are_refused(
    attributes: dict[str, Any], capacity: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(ValueError) as caught:
        device_variable(DRIVER, {"name": "d", "attributes": attributes, "capacity": capacity})
    assert fragment in str(caught.value)


def test_limits_themselves_are_accepted() -> None:
    attributes = {f"a{i}": {"string": "x" * 64} for i in range(16)}
    capacity = {f"c{i}": {"value": "1Ei"} for i in range(16)}
    name = "d" * 63
    attributes[f"{name}/{'i' * 32}"] = attributes.pop("a0")
    var = device_variable(DRIVER, {"attributes": attributes, "capacity": capacity})
    assert isinstance(var, DeviceVariable)


@pytest.mark.parametrize(
    ("driver", "device", "fragment"),
    [
        ("", {}, "driver name '' must be a DNS subdomain"),
        ("GPU.example.com", {}, "driver name 'GPU.example.com'"),
        ("x" * 64, {}, "at most 63 characters"),
        (DRIVER, [], "device must be an object"),
        (DRIVER, {"attributes": []}, "attributes must be an object"),
        (DRIVER, {"allowMultipleAllocations": "yes"}, "allowMultipleAllocations must be"),
    ],
)
def test_malformed_driver_or_shape(driver: str, device: Any, fragment: str) -> None:
    with pytest.raises(ValueError) as caught:
        device_variable(driver, device)
    assert fragment in str(caught.value)


@pytest.mark.parametrize("model", ["H100-SXM5-80GB:2", "A100-SXM4-40GB:1", "B200:1"])
def test_every_published_device_is_usable(model: str, env: CelEnvironment) -> None:
    """The slice builder's output must pass the same checks the API server applies."""
    inventory = FakeBackend.from_spec(model, "node-a").inventory()
    slices = build_resource_slices(inventory, SliceSettings())
    devices = [d for s in slices for d in s["spec"].get("devices") or []]
    assert devices
    kinds = env.compile(
        'device.attributes["gpu.dra-driver.dev"].type in ["gpu", "mig", "timeslice", "shared"]'
    )
    newer_driver = env.compile(
        'device.attributes["gpu.dra-driver.dev"].driverVersion.isGreaterThan(semver("1.0.0"))'
    )
    has_memory = env.compile(
        'device.capacity["gpu.dra-driver.dev"].memory.compareTo(quantity("1Mi")) > 0'
    )
    for device in devices:
        var = device_variable(DRIVER, copy.deepcopy(device))
        assert kinds.evaluate(var), device["name"]
        assert newer_driver.evaluate(var), device["name"]
        assert has_memory.evaluate(var), device["name"]
