"""CDI naming rules: what runtimes accept, so the driver never writes a name they refuse."""

from __future__ import annotations

import pytest

from dra_driver.cdi import (
    CdiError,
    parse_qualified_name,
    qualified_name,
    split_kind,
    validate_claim_uid,
    validate_device_name,
    validate_kind,
)


@pytest.mark.parametrize(
    "kind",
    ["nvidia.com/gpu", "k8s.gpu.dra-driver.dev/claim", "a/b", "Vendor_1/class-2", "v/c.d"],
)
def test_good_kinds(kind: str) -> None:
    validate_kind(kind)


@pytest.mark.parametrize(
    ("kind", "fragment"),
    [
        ("nvidia.com", "expected '<vendor>/<class>'"),
        ("1vendor/gpu", "vendor '1vendor'"),
        ("-vendor/gpu", "vendor '-vendor'"),
        ("vendor-/gpu", "vendor 'vendor-'"),
        ("vendor/gpu.", "class 'gpu.'"),
        ("vendor/9gpu", "class '9gpu'"),
        ("vendor/", "class ''"),
        ("/gpu", "vendor ''"),
        ("vendor/gpu/x", "class 'gpu/x'"),
        ("vendor/g:pu", "class 'g:pu'"),
        ("vendör/gpu", "vendor 'vendör'"),
    ],
)
def test_bad_kinds_name_the_part(kind: str, fragment: str) -> None:
    with pytest.raises(CdiError, match="CDI kind") as caught:
        validate_kind(kind)
    assert fragment in str(caught.value)


@pytest.mark.parametrize(
    "name",
    [
        "gpu-0",
        "0",
        "7f1b2c3d-aaaa-4bbb-8ccc-0123456789ab-gpu-0",
        "gpu-0-mig-1g.10gb-3",
        "gpu:0",
        "a_b",
        "GPU0",
    ],
)
def test_good_device_names(name: str) -> None:
    validate_device_name(name)


@pytest.mark.parametrize("name", ["", "-gpu", "gpu-", "gpu.", ":gpu", "gpu/0", "gpu 0", "gpu=0"])
def test_bad_device_names(name: str) -> None:
    with pytest.raises(CdiError, match=f"device name {name!r}"):
        validate_device_name(name)


def test_claim_uids_are_safe_file_name_parts() -> None:
    validate_claim_uid("7f1b2c3d-aaaa-4bbb-8ccc-0123456789ab")
    for bad in ("", "../etc", "a/b", "a_b", "uid-", ".hidden"):
        with pytest.raises(CdiError, match="claim UID"):
            validate_claim_uid(bad)


def test_qualified_name_round_trip() -> None:
    device_id = qualified_name("k8s.gpu.dra-driver.dev/claim", "0abc-gpu-1")
    assert device_id == "k8s.gpu.dra-driver.dev/claim=0abc-gpu-1"
    assert parse_qualified_name(device_id) == ("k8s.gpu.dra-driver.dev/claim", "0abc-gpu-1")


def test_qualified_name_validates_both_parts() -> None:
    with pytest.raises(CdiError, match="vendor"):
        qualified_name("1nvidia.com/gpu", "gpu-0")
    with pytest.raises(CdiError, match="device name"):
        qualified_name("nvidia.com/gpu", "gpu-")


@pytest.mark.parametrize(
    "device_id", ["nvidia.com/gpu", "nvidia.com/gpu=", "nvidia.com=gpu", "=gpu-0", "a/b=c=d"]
)
def test_parse_rejects_malformed_ids(device_id: str) -> None:
    with pytest.raises(CdiError, match=r"CDI device ID|CDI kind"):
        parse_qualified_name(device_id)


def test_split_kind() -> None:
    assert split_kind("nvidia.com/gpu") == ("nvidia.com", "gpu")
