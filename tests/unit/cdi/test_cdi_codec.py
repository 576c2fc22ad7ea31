"""The CDI wire form: round trips, the lowest sufficient version, and strict reading."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from dra_driver.cdi import (
    CdiDevice,
    CdiError,
    CdiSpec,
    ContainerEdits,
    DeviceNode,
    Hook,
    Mount,
    minimum_version,
    spec_from_dict,
    spec_to_dict,
)

KIND = "k8s.gpu.dra-driver.dev/claim"


def _device(name: str = "gpu-0", **edits: Any) -> CdiDevice:
    return CdiDevice(name=name, edits=ContainerEdits(**(edits or {"env": ("GPU=0",)})))


FULL_SPEC = CdiSpec(
    kind="nvidia.com/gpu",
    devices=(
        CdiDevice(
            name="gpu-0",
            edits=ContainerEdits(
                env=("NVIDIA_VISIBLE_DEVICES=GPU-aaaa",),
                device_nodes=(
                    DeviceNode(
                        path="/dev/nvidia0",
                        host_path="/driver-root/dev/nvidia0",
                        type="c",
                        major=195,
                        minor=0,
                        permissions="rw",
                    ),
                ),
            ),
        ),
        CdiDevice(
            name="gpu-1",
            edits=ContainerEdits(
                mounts=(Mount("/host/lib", "/usr/lib/x", ("ro", "nosuid"), type="bind"),),
                hooks=(Hook("createContainer", "/usr/bin/hook", ("hook", "-v"), ("A=1",)),),
            ),
        ),
    ),
    edits=ContainerEdits(
        env=("SHARED=1",), device_nodes=(DeviceNode(path="/dev/nvidiactl"),), hooks=()
    ),
)


def test_round_trip_keeps_every_field() -> None:
    data = spec_to_dict(FULL_SPEC)
    assert spec_from_dict(data, "test") == FULL_SPEC


def test_wire_form_is_camel_case_and_omits_empty_fields() -> None:
    spec = CdiSpec(kind=KIND, devices=(_device("gpu-0", env=("A=1",)),))
    assert spec_to_dict(spec) == {
        "cdiVersion": "0.3.0",
        "kind": KIND,
        "devices": [{"name": "gpu-0", "containerEdits": {"env": ["A=1"]}}],
    }
    data = spec_to_dict(FULL_SPEC)
    node = data["devices"][0]["containerEdits"]["deviceNodes"][0]
    assert node["hostPath"] == "/driver-root/dev/nvidia0"
    mount = data["devices"][1]["containerEdits"]["mounts"][0]
    assert mount == {
        "hostPath": "/host/lib",
        "containerPath": "/usr/lib/x",
        "options": ["ro", "nosuid"],
        "type": "bind",
    }
    hook = data["devices"][1]["containerEdits"]["hooks"][0]
    assert hook["hookName"] == "createContainer"
    assert data["containerEdits"] == {
        "env": ["SHARED=1"],
        "deviceNodes": [{"path": "/dev/nvidiactl"}],
    }


@pytest.mark.parametrize(
    ("spec", "version"),
    [
        (CdiSpec(kind=KIND, devices=(_device("gpu-0"),)), "0.3.0"),
        (
            CdiSpec(kind=KIND, devices=(_device("g", mounts=(Mount("/a", "/b", type="bind"),)),)),
            "0.4.0",
        ),
        (CdiSpec(kind=KIND, devices=(_device("0abc-gpu-0"),)), "0.5.0"),
        (
            CdiSpec(
                kind=KIND,
                devices=(_device("gpu-0"),),
                edits=ContainerEdits(device_nodes=(DeviceNode("/dev/x", host_path="/h/x"),)),
            ),
            "0.5.0",
        ),
        (
            CdiSpec(
                kind=KIND,
                devices=(_device("gpu-0", device_nodes=(DeviceNode("/dev/x", host_path="/x"),)),),
            ),
            "0.5.0",
        ),
        (CdiSpec(kind=KIND, devices=(_device("gpu-0"),), annotations={"a": "b"}), "0.6.0"),
        (CdiSpec(kind="vendor/gpu.class", devices=(_device("gpu-0"),)), "0.6.0"),
        # A dot in the vendor part was always allowed.
        (CdiSpec(kind="nvidia.com/gpu", devices=(_device("gpu-0"),)), "0.3.0"),
        # The highest trigger wins.
        (
            CdiSpec(kind=KIND, devices=(_device("0abc"),), annotations={"a": "b"}),
            "0.6.0",
        ),
    ],
)
def test_minimum_version(spec: CdiSpec, version: str) -> None:
    assert minimum_version(spec) == version
    assert spec_to_dict(spec)["cdiVersion"] == version


def _valid() -> dict[str, Any]:
    return spec_to_dict(FULL_SPEC)


def _mutated(path: list[Any], value: Any) -> dict[str, Any]:
    data = copy.deepcopy(_valid())
    target: Any = data
    for key in path[:-1]:
        target = target[key]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return data


_DELETE = object()


@pytest.mark.parametrize(
    ("path", "value", "fragment"),
    [
        (["cdiVersion"], _DELETE, "cdiVersion: is required"),
        (["cdiVersion"], "0.2.0", "cdiVersion: '0.2.0' is not one of"),
        (
            ["cdiVersion"],
            "0.3.0",
            "cdiVersion: 0.3.0 is too low for this content, which needs 0.5.0",
        ),
        (["kind"], "nvidia", "kind: CDI kind 'nvidia'"),
        (["kind"], 3, "kind: expected a string, found int"),
        (["devices"], _DELETE, "devices: is required"),
        (["devices"], [], "devices: a spec needs at least one device"),
        (["devices"], {"name": "x"}, "devices: expected a list, found dict"),
        (["extra"], 1, "extra: unsupported field"),
        (["devices", 0, "name"], "-bad", "devices[0].name: CDI device name '-bad'"),
        (["devices", 1, "name"], "gpu-0", "devices[1].name: device 'gpu-0' is defined twice"),
        (["devices", 0, "containerEdits"], _DELETE, "devices[0].containerEdits: is required"),
        (["devices", 0, "containerEdits"], {}, "devices[0].containerEdits: a device must edit"),
        (["devices", 0, "containerEdits", "env", 0], "NOVALUE", "devices[0].containerEdits.env[0]"),
        (
            ["devices", 0, "containerEdits", "env", 0],
            5,
            "containerEdits.env[0]: expected a string, found int",
        ),
        (
            ["devices", 0, "containerEdits", "deviceNodes", 0, "type"],
            "x",
            "devices[0].containerEdits.deviceNodes[0].type: 'x'",
        ),
        (
            ["devices", 0, "containerEdits", "deviceNodes", 0, "major"],
            "195",
            "deviceNodes[0].major: expected an integer, found str",
        ),
        (
            ["devices", 0, "containerEdits", "deviceNodes", 0, "minor"],
            True,
            "deviceNodes[0].minor: expected an integer, found bool",
        ),
        (
            ["devices", 0, "containerEdits", "deviceNodes", 0, "permissions"],
            "rwx",
            "deviceNodes[0].permissions",
        ),
        (
            ["devices", 0, "containerEdits", "deviceNodes", 0, "path"],
            "dev/nvidia0",
            "deviceNodes[0].path: 'dev/nvidia0' is not an absolute path",
        ),
        (
            ["devices", 0, "containerEdits", "deviceNodes", 0, "fileMode"],
            420,
            "deviceNodes[0].fileMode: unsupported field",
        ),
        (
            ["devices", 1, "containerEdits", "hooks", 0, "hookName"],
            "preStart",
            "devices[1].containerEdits.hooks[0].hookName: 'preStart'",
        ),
        (
            ["devices", 1, "containerEdits", "mounts", 0, "containerPath"],
            _DELETE,
            "mounts[0].containerPath: is required",
        ),
        (["containerEdits"], [], "containerEdits: expected an object, found list"),
        (["annotations"], {"a": 1}, "annotations['a']: expected a string, found int"),
    ],
)
def test_strict_reading_names_source_and_field(path: list[Any], value: Any, fragment: str) -> None:
    with pytest.raises(CdiError) as caught:
        spec_from_dict(_mutated(path, value), "/var/run/cdi/x.yaml")
    message = str(caught.value)
    assert message.startswith("/var/run/cdi/x.yaml: ")
    assert fragment in message


def test_writing_refuses_invalid_specs() -> None:
    bad = CdiSpec(kind=KIND, devices=(_device("gpu-0", env=("=x",)),))
    with pytest.raises(CdiError, match=r"devices\[0\]\.containerEdits\.env\[0\]"):
        spec_to_dict(bad)
    with pytest.raises(CdiError, match="at least one device"):
        spec_to_dict(CdiSpec(kind=KIND, devices=()))


def test_a_declared_version_above_the_minimum_is_accepted() -> None:
    data = spec_to_dict(CdiSpec(kind=KIND, devices=(_device("gpu-0"),)))
    data["cdiVersion"] = "0.8.0"
    assert spec_from_dict(data, "x").devices[0].name == "gpu-0"
