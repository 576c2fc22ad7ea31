"""PCI, NUMA and NVLink helpers (pure functions and sysfs reads)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dra_driver.backends.nvml.topology import (
    MAX_DOMAIN_LENGTH,
    fabric_domain,
    normalize_bus_id,
    nvlink_components,
    pcie_root,
    sysfs_numa_node,
)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("00000000:18:00.0", "0000:18:00.0"),
        ("00000000:C1:1F.7", "0000:c1:1f.7"),
        ("0000:3b:00.0", "0000:3b:00.0"),
        ("00010000:01:00.0", "10000:01:00.0"),  # VMD domain keeps its fifth digit, like sysfs
        ("18:00.0", "0000:18:00.0"),
        ("00000000:18:00.0\x00", "0000:18:00.0"),
    ],
)
def test_normalize_bus_id(raw: str, expected: str) -> None:
    assert normalize_bus_id(raw) == expected


@pytest.mark.parametrize("raw", ["", "garbage", "0000:18:00", "0000:18:00.9"])
def test_normalize_rejects_non_addresses(raw: str) -> None:
    with pytest.raises(ValueError, match="PCI bus id"):
        normalize_bus_id(raw)


def _device(sysfs: Path, path: str, bus_id: str, numa: str | None = None) -> None:
    device = sysfs / "devices" / path
    device.mkdir(parents=True)
    if numa is not None:
        (device / "numa_node").write_text(numa)
    links = sysfs / "bus" / "pci" / "devices"
    links.mkdir(parents=True, exist_ok=True)
    (links / bus_id).symlink_to(os.path.relpath(device, links))


def test_pcie_root_is_the_first_component_behind_the_switches(tmp_path: Path) -> None:
    _device(
        tmp_path,
        "pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:18:00.0",
        "0000:18:00.0",
    )
    assert pcie_root(tmp_path, "0000:18:00.0") == "pci0000:15"


def test_pcie_root_unknown(tmp_path: Path) -> None:
    assert pcie_root(tmp_path, "0000:18:00.0") == ""
    _device(tmp_path, "platform/gpu0", "0000:19:00.0")
    assert pcie_root(tmp_path, "0000:19:00.0") == ""


@pytest.mark.parametrize(
    ("content", "expected"), [("1\n", 1), ("0", 0), ("-1\n", None), ("x", None)]
)
def test_sysfs_numa_node(tmp_path: Path, content: str, expected: int | None) -> None:
    _device(tmp_path, "pci0000:00/0000:00:01.0/0000:01:00.0", "0000:01:00.0", content)
    assert sysfs_numa_node(tmp_path, "0000:01:00.0") == expected


def test_sysfs_numa_node_missing(tmp_path: Path) -> None:
    assert sysfs_numa_node(tmp_path, "0000:01:00.0") is None


def test_fabric_domain() -> None:
    domain = fabric_domain(bytes(range(16)), 4294967295)
    assert domain == "00010203-0405-0607-0809-0a0b0c0d0e0f.4294967295"
    assert len(domain) <= MAX_DOMAIN_LENGTH
    assert fabric_domain(bytes(16), 3) == ""
    assert fabric_domain(b"short", 3) == ""


def test_nvlink_components_direct_switch_and_isolated() -> None:
    links = {
        "0000:18:00.0": ["0000:2a:00.0"],
        "0000:2a:00.0": ["0000:18:00.0"],
        "0000:3b:00.0": ["0000:c1:00.0"],
        "0000:4c:00.0": ["0000:c1:00.0", "0000:c2:00.0"],
        "0000:5d:00.0": [],
    }
    names = nvlink_components("node-a", links)
    assert names["0000:18:00.0"] == names["0000:2a:00.0"] != ""
    assert names["0000:3b:00.0"] == names["0000:4c:00.0"] != ""
    assert names["0000:18:00.0"] != names["0000:3b:00.0"]
    assert names["0000:5d:00.0"] == ""
    assert all(len(name) <= MAX_DOMAIN_LENGTH for name in names.values())


def test_nvlink_component_names_are_deterministic_and_per_node() -> None:
    links = {"0000:18:00.0": ["0000:2a:00.0"], "0000:2a:00.0": ["0000:18:00.0"]}
    reordered = dict(reversed(list(links.items())))
    assert nvlink_components("node-a", links) == nvlink_components("node-a", reordered)
    assert nvlink_components("node-a", links) != nvlink_components("node-b", links)


def test_single_gpu_with_links_to_a_switch_still_has_a_domain() -> None:
    assert nvlink_components("n", {"0000:18:00.0": ["0000:c1:00.0"]})["0000:18:00.0"]
