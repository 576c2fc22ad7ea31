"""What a container gets for a list of CDI device IDs: order, overrides, unknown IDs."""

from __future__ import annotations

import pytest

from dra_driver.cdi import (
    CdiDevice,
    CdiError,
    CdiSpec,
    ContainerEdits,
    DeviceNode,
    Hook,
    Mount,
    container_edits,
    container_environment,
)

CLAIM_A = CdiSpec(
    kind="k8s.gpu.dra-driver.dev/claim",
    edits=ContainerEdits(env=("SPEC=a", "SHARED=from-a")),
    devices=(
        CdiDevice("a-gpu-0", ContainerEdits(env=("DEVICE=a0", "ONLY_A0=1"))),
        CdiDevice("a-gpu-1", ContainerEdits(env=("DEVICE=a1",))),
    ),
)
CLAIM_B = CdiSpec(
    kind="k8s.gpu.dra-driver.dev/other",
    edits=ContainerEdits(env=("SPEC=b",)),
    devices=(CdiDevice("b-gpu-0", ContainerEdits(env=("DEVICE=b0", "SHARED=from-b0"))),),
)
A0 = "k8s.gpu.dra-driver.dev/claim=a-gpu-0"
A1 = "k8s.gpu.dra-driver.dev/claim=a-gpu-1"
B0 = "k8s.gpu.dra-driver.dev/other=b-gpu-0"


def test_later_values_win_in_device_order() -> None:
    env = container_environment([CLAIM_A, CLAIM_B], [A0, B0, A1])
    assert env == {
        "SPEC": "b",
        "SHARED": "from-b0",
        "DEVICE": "a1",
        "ONLY_A0": "1",
    }
    # Names keep the position where they first appeared.
    assert list(env) == ["SPEC", "SHARED", "DEVICE", "ONLY_A0"]


def test_spec_edits_are_applied_once_before_its_first_device() -> None:
    # B's spec-level SPEC=b comes after A's, A's is not applied a second time for A1.
    assert container_environment([CLAIM_A, CLAIM_B], [A0, B0, A1])["SPEC"] == "b"
    assert container_environment([CLAIM_A, CLAIM_B], [B0, A0])["SPEC"] == "a"
    # A spec-level value is overridden by its own device applied after it.
    assert container_environment([CLAIM_B], [B0])["SHARED"] == "from-b0"


def test_unreferenced_specs_contribute_nothing() -> None:
    assert container_environment([CLAIM_A, CLAIM_B], [B0]) == {
        "SPEC": "b",
        "DEVICE": "b0",
        "SHARED": "from-b0",
    }
    assert container_environment([CLAIM_A], []) == {}


def test_unknown_ids_are_named() -> None:
    unknown = "k8s.gpu.dra-driver.dev/claim=a-gpu-9"
    with pytest.raises(CdiError, match=f"'{unknown}' is not defined"):
        container_environment([CLAIM_A], [A0, unknown])
    with pytest.raises(CdiError, match="CDI device ID 'garbage'"):
        container_environment([CLAIM_A], ["garbage"])


def test_conflicting_definitions_are_refused_equal_ones_tolerated() -> None:
    assert container_environment([CLAIM_A, CLAIM_A], [A0])["DEVICE"] == "a0"
    changed = CdiSpec(
        kind=CLAIM_A.kind, devices=(CdiDevice("a-gpu-0", ContainerEdits(env=("DEVICE=x",))),)
    )
    with pytest.raises(CdiError, match="defined differently"):
        container_environment([CLAIM_A, changed], [A0])


def test_merged_edits() -> None:
    spec = CdiSpec(
        kind="vendor/gpu",
        edits=ContainerEdits(
            env=("X=1",),
            device_nodes=(DeviceNode("/dev/nvidiactl"),),
            hooks=(Hook("createContainer", "/bin/spec-hook"),),
        ),
        devices=(
            CdiDevice(
                "d0",
                ContainerEdits(
                    env=("X=2", "Y=a=b"),
                    device_nodes=(DeviceNode("/dev/nvidia0"),),
                    mounts=(Mount("/h/one", "/c/lib"),),
                    hooks=(Hook("createContainer", "/bin/d0-hook"),),
                ),
            ),
            CdiDevice(
                "d1",
                ContainerEdits(
                    device_nodes=(DeviceNode("/dev/nvidiactl", host_path="/other/nvidiactl"),),
                    mounts=(Mount("/h/two", "/c/lib"), Mount("/h/three", "/c/other")),
                ),
            ),
        ),
    )
    merged = container_edits([spec], ["vendor/gpu=d0", "vendor/gpu=d1", "vendor/gpu=d0"])
    assert merged.env == ("X=2", "Y=a=b")
    assert merged.device_nodes == (
        DeviceNode("/dev/nvidiactl", host_path="/other/nvidiactl"),
        DeviceNode("/dev/nvidia0"),
    )
    assert merged.mounts == (Mount("/h/two", "/c/lib"), Mount("/h/three", "/c/other"))
    # A repeated device ID is applied once, so its hook is not doubled.
    assert [hook.path for hook in merged.hooks] == ["/bin/spec-hook", "/bin/d0-hook"]
