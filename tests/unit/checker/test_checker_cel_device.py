"""The checker's own reading of a device for CEL, against hand-written values.

The checker must not share the allocator's conversion (``dra_driver/cel/device_value.py``); these
rows pin what Kubernetes gives a selector for each kind of attribute and capacity, and check that
the checker refuses what Kubernetes would not accept as a CEL value.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from dra_driver.cel import CelEnvironment
from dra_driver.checker.cel_device import DeviceValueError, checker_device_variable

DRIVER = "gpu.example.com"
DEVICE: dict[str, Any] = {
    "name": "gpu-0",
    "attributes": {
        "type": {"string": "gpu"},
        "numa": {"int": 1},
        "migCapable": {"bool": True},
        "driverVersion": {"version": "580.95.5"},
        "example.com/link": {"string": "nv0"},
        f"{DRIVER}/index": {"int": 3},
    },
    "capacity": {"memory": {"value": "80Gi"}, "example.com/lanes": {"value": 16}},
}

EXPECTED = [
    f'device.attributes["{DRIVER}"].type == "gpu"',
    f'device.attributes["{DRIVER}"].numa == 1',
    f'device.attributes["{DRIVER}"].migCapable',
    f'device.attributes["{DRIVER}"].index == 3',
    f'device.attributes["{DRIVER}"].driverVersion.isGreaterThan(semver("580.95.4"))',
    'device.attributes["example.com"].link == "nv0"',
    f'device.capacity["{DRIVER}"].memory == quantity("80Gi")',
    'device.capacity["example.com"].lanes.asInteger() == 16',
    f'device.driver == "{DRIVER}"',
    "!device.allowMultipleAllocations",
]


@pytest.mark.parametrize("expression", EXPECTED)
def test_checker_device_values(expression: str) -> None:
    variable = checker_device_variable(DRIVER, DEVICE)
    assert CelEnvironment().compile(expression).evaluate(variable) is True


@pytest.mark.parametrize(
    "attributes",
    [
        {"v": {"version": "1.02.0"}},
        {"v": {"int": 1, "string": "x"}},
        {"v": {"int": True}},
        {"x": {"int": 1}, f"{DRIVER}/x": {"int": 2}},
    ],
)
def test_checker_refuses_what_kubernetes_would(attributes: dict[str, Any]) -> None:
    with pytest.raises(DeviceValueError):
        checker_device_variable(DRIVER, {"name": "d", "attributes": attributes})


def test_checker_does_not_import_the_allocators_device_value() -> None:
    root = Path(__file__).resolve().parents[3] / "dra_driver" / "checker"
    for path in root.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert not node.module.startswith("dra_driver.allocator"), path
                assert node.module != "dra_driver.cel.device_value", path
                names = {alias.name for alias in node.names}
                assert "device_variable" not in names, path


@pytest.mark.parametrize(
    ("device", "message"),
    [
        ({"attributes": {"v": {"version": "1.02.0"}}}, "attribute v: '1.02.0' is not a semantic"),
        ({"attributes": {"v": 5}}, "attribute v is not an object"),
        ({"attributes": {"v": {"int": 1, "string": "x"}}}, "attribute v must hold exactly one"),
        ({"attributes": {"v": {"int": True}}}, "attribute v: int value True has the wrong type"),
        ({"capacity": {"memory": 5}}, "capacity memory has no quantity value"),
        ({"capacity": {"memory": {"value": "lots"}}}, "capacity memory: "),
        (
            {"attributes": {"x": {"int": 1}, f"{DRIVER}/x": {"int": 2}}},
            f"{DRIVER}/x names {DRIVER}/x a second time",
        ),
    ],
)
def test_checker_says_which_attribute_or_capacity_it_refuses(
    device: dict[str, Any], message: str
) -> None:
    with pytest.raises(DeviceValueError) as caught:
        checker_device_variable(DRIVER, {"name": "d", **device})
    assert str(caught.value).startswith(message)


@pytest.mark.parametrize(
    "expression",
    [
        f'device.attributes["{DRIVER}"].v == semver("1.0.0-alpha.10")',
        f'device.attributes["{DRIVER}"].v.isGreaterThan(semver("1.0.0-alpha.9"))',
        f'device.attributes["{DRIVER}"].v.isLessThan(semver("1.0.0"))',
    ],
)
def test_checker_reads_the_pre_release_of_a_version(expression: str) -> None:
    variable = checker_device_variable(
        DRIVER, {"name": "d", "attributes": {"v": {"version": "1.0.0-alpha.10"}}}
    )
    assert CelEnvironment().compile(expression).evaluate(variable) is True
