"""The LENDING view of `dra-driver usage`: which GPU a device name belongs to (every name the
slice builder can publish), who owns and who borrows each GPU, and how the table shows it."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from dra_driver.cli.claim_idleness import UNKNOWN, HeldDevice
from dra_driver.cli.usage import lending_by_device, render_table, usage_rows
from dra_driver.inventory.model import MigDevice, MigPlacement
from dra_driver.inventory.products import known_products
from dra_driver.slices import names
from dra_driver.slices.names import gpu_of

NOW = datetime(2025, 1, 1, tzinfo=UTC)


def held(namespace: str, claim: str, device: str, pool: str = "node-1") -> HeldDevice:
    return HeldDevice(pool, namespace, claim, (f"{claim}-pod",), pool, device, UNKNOWN, None)


def _owner_names(minor: int) -> list[str]:
    """Every name of GPU `minor` that is an owner's, built as the slice builder builds it."""
    found = [
        names.whole_gpu(minor),
        names.timeslice_share(minor, 0),
        names.timeslice_share(minor, 15),
        names.fractional_share(minor),
        names.static_mig(
            MigDevice(minor, "GPU-x", "1g.10gb", 19, 7, 0, "MIG-x", MigPlacement(0, 1))
        ),
    ]
    for product in known_products().values():
        for profile in product.mig_profiles:
            found += [names.mig_placement(minor, profile, p.start) for p in profile.placements]
    return found


@pytest.mark.parametrize("minor", [0, 3, 12])
def test_every_published_name_belongs_to_its_gpu_and_only_the_lent_share_borrows(
    minor: int,
) -> None:
    owners = _owner_names(minor)
    assert len(owners) > 5
    for name in owners:
        assert gpu_of(name) == (minor, False), name
    assert gpu_of(names.lent_share(minor)) == (minor, True)


@pytest.mark.parametrize("name", ["gpu", "gpu-", "gpu-x", "gpu-1-lentx", "gpu-1-ts-", "nic-0"])
def test_a_name_that_is_no_gpus_is_neither_owner_nor_borrower(name: str) -> None:
    assert gpu_of(name) is None


def test_owners_and_borrowers_are_claims_per_gpu_and_pool() -> None:
    devices = [
        held("qa", "train", "gpu-0-ts-0"),
        held("qa", "tune", "gpu-0-ts-1"),
        held("qb", "b1", "gpu-0-lent"),
        held("qb", "b2", "gpu-0-lent"),
        held("qa", "idle", "gpu-1"),  # its GPU has no borrower: not lent
        held("qa", "far", "gpu-0", pool="node-2"),  # same minor, another node
    ]
    found = lending_by_device(devices)
    gpu0 = {"gpu": "gpu-0", "owners": ["qa/train", "qa/tune"], "borrowers": ["qb/b1", "qb/b2"]}
    assert found == {
        ("qa", "train", "node-1", "gpu-0-ts-0"): {"role": "lent", **gpu0},
        ("qa", "tune", "node-1", "gpu-0-ts-1"): {"role": "lent", **gpu0},
        ("qb", "b1", "node-1", "gpu-0-lent"): {"role": "borrowed", **gpu0},
        ("qb", "b2", "node-1", "gpu-0-lent"): {"role": "borrowed", **gpu0},
    }


def test_a_claim_counts_once_however_many_pods_share_it() -> None:
    shared = HeldDevice("node-1", "qb", "b", ("p1", "p2"), "node-1", "gpu-0-lent", UNKNOWN, None)
    rows = usage_rows([held("qa", "train", "gpu-0"), shared], None, NOW)
    cells = {(r["claim"], r["pod"]): r["lending"]["role"] for r in rows}
    assert cells == {
        ("train", "train-pod"): "lent",
        ("b", "p1"): "borrowed",
        ("b", "p2"): "borrowed",
    }
    assert "LENT to 1\n" in render_table(rows)


def _lending_column(text: str) -> dict[str, str]:
    header, *lines = text.splitlines()
    at = header.index("LENDING")
    return {line.split()[2]: line[at:] for line in lines}


def test_the_table_says_lent_to_n_borrowed_from_the_owner_and_blank_otherwise() -> None:
    devices = [
        held("qa", "train", "gpu-0"),
        held("qb", "b1", "gpu-0-lent"),
        held("qb", "b2", "gpu-0-lent"),
        held("qa", "other", "gpu-1"),
        held("qc", "orphan", "gpu-2-lent"),
    ]
    text = render_table(usage_rows(devices, None, NOW))
    assert text.splitlines()[0].split() == ["NODE", "POD", "CLAIM", "DEVICE", "IDLE", "LENDING"]
    assert _lending_column(text) == {
        "qa/train": "LENT to 2",
        "qb/b1": "BORROWED from qa/train",
        "qb/b2": "BORROWED from qa/train",
        "qa/other": "",
        "qc/orphan": "BORROWED gpu-2 (no owner)",
    }


def test_several_owners_show_the_first_and_how_many_more() -> None:
    devices = [held("qa", f"ts{i}", f"gpu-0-ts-{i}") for i in range(3)]
    text = render_table(usage_rows([*devices, held("qb", "b", "gpu-0-lent")], None, NOW))
    assert _lending_column(text)["qb/b"] == "BORROWED from qa/ts0 and 2 more"


def test_lending_comes_after_the_metrics_columns() -> None:
    rows = usage_rows([held("qa", "train", "gpu-0"), held("qb", "b", "gpu-0-lent")], {}, NOW)
    header = render_table(rows, with_metrics=True).splitlines()[0].split()
    assert header == ["NODE", "POD", "CLAIM", "DEVICE", "IDLE", "UTIL", "MEMORY", "LENDING"]


def test_without_lending_the_table_keeps_its_columns() -> None:
    rows = usage_rows([held("qa", "train", "gpu-0"), held("qa", "x", "gpu-1-shared")], None, NOW)
    assert all(r["lending"] is None for r in rows)
    assert render_table(rows).splitlines()[0].split() == ["NODE", "POD", "CLAIM", "DEVICE", "IDLE"]
