from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from dra_driver.backends.fake import FakeBackend
from dra_driver.inventory.model import Inventory
from dra_driver.slices import SliceSettings, build_resource_slices


def devices_of(slices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for s in slices for d in s["spec"].get("devices") or []]


def counter_sets_of(slices: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    return {
        cs["name"]: {k: int(v["value"].removesuffix("Mi")) for k, v in cs["counters"].items()}
        for s in slices
        for cs in s["spec"].get("sharedCounters") or []
    }


@pytest.fixture
def inventory_of() -> Callable[[str], Inventory]:
    def make(spec: str, node: str = "node-a") -> Inventory:
        return FakeBackend.from_spec(spec, node).inventory()

    return make


@pytest.fixture
def build() -> Callable[..., list[dict[str, Any]]]:
    def run(inventory: Inventory, **settings: Any) -> list[dict[str, Any]]:
        return build_resource_slices(inventory, SliceSettings(**settings))

    return run
