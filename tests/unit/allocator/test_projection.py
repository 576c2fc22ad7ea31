"""Which selectors may share verdicts between devices that look alike to them."""

from __future__ import annotations

from typing import Any

import pytest

from dra_driver.allocator.projection import device_entries, projection_key, projection_of

D = "gpu.dra-driver.dev"


@pytest.mark.parametrize(
    "expression",
    [
        f'device.driver == "{D}" && device.attributes["{D}"].type == "gpu"',
        'device.attributes[device.driver].type == "gpu"',
        f'device.capacity["{D}"].memory.compareTo(quantity("40Gi")) >= 0',
        f'"type" in device.attributes["{D}"]',
        f'has(device.attributes["{D}"].type)',
        f'device.attributes["{D}"].?numa.orValue(0) == 0',
        f'device.attributes["{D}"]["productName"].startsWith("NVIDIA")',
    ],
)
def test_selectors_that_read_named_ids_are_projected(expression: str) -> None:
    assert projection_of(expression).names is not None


@pytest.mark.parametrize(
    "expression",
    [
        f'device.attributes["{D}"].size() > 2',
        f'size(device.attributes["{D}"]) > 2',
        f'device.attributes["{D}"]["ty" + "pe"] == "x"',
        f'device.attributes["{D}"] == device.attributes["other.example.com"]',
        f'device.attributes["{D}"].exists(k, k == "type")',
        f'device.attributes["{D}"].all(k, k != "x")',
        f'cel.bind(a, device.attributes["{D}"], a.type == "x")',
        f'device.attributes["{D}"] == {{"type": "gpu"}}',
        '"type" in device.attributes',
        f'device.attributes["{D}"][r"type"] == "gpu"',
    ],
)
def test_selectors_that_could_see_other_keys_are_opaque(expression: str) -> None:
    assert projection_of(expression).names is None


def key(projection: Any, driver: str, device: dict[str, Any]) -> tuple[object, ...] | None:
    multiple = bool(device.get("allowMultipleAllocations"))
    return projection_key(projection, driver, multiple, device_entries(device))


def test_the_key_holds_only_what_the_selector_names() -> None:
    projection = projection_of(f'device.attributes["{D}"].profile == "1g.10gb"')
    one = {"attributes": {"profile": {"string": "1g.10gb"}, "uuid": {"string": "a"}}}
    two = {"attributes": {"profile": {"string": "1g.10gb"}, "uuid": {"string": "b"}}}
    other = {"attributes": {"profile": {"string": "2g.20gb"}, "uuid": {"string": "a"}}}
    assert key(projection, D, one) == key(projection, D, two)
    assert key(projection, D, one) != key(projection, D, other)
    assert key(projection, D, one) != key(projection, "x.example.com", one)
    shared = {**one, "allowMultipleAllocations": True}
    assert key(projection, D, one) != key(projection, D, shared)
