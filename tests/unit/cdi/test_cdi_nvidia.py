"""Device nodes of real GPUs, checked against fake /dev and /proc trees."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_driver.cdi import (
    CdiError,
    DeviceNode,
    control_device_nodes,
    gpu_device_nodes,
    mig_capability_minor,
    mig_device_nodes,
    visible_devices_env,
)

ACCESS = "DeviceFileMinor: {minor}\nDeviceFileMode: 292\nDeviceFileModify: 1\n"


@pytest.fixture
def dev(tmp_path: Path) -> Path:
    root = tmp_path / "driver-root" / "dev"
    (root / "nvidia-caps").mkdir(parents=True)
    for name in ("nvidia0", "nvidia3", "nvidiactl", "nvidia-uvm"):
        (root / name).touch()
    for cap in (30, 31, 42):
        (root / "nvidia-caps" / f"nvidia-cap{cap}").touch()
    return root


@pytest.fixture
def proc(tmp_path: Path) -> Path:
    root = tmp_path / "proc"
    mig = root / "driver/nvidia/capabilities/gpu3/mig"
    for relative, minor in (("gi2", 30), ("gi2/ci0", 31), ("gi5", 42)):
        (mig / relative).mkdir(parents=True, exist_ok=True)
        (mig / relative / "access").write_text(ACCESS.format(minor=minor))
    return root


def test_gpu_node_with_host_path_under_another_root(dev: Path) -> None:
    assert gpu_device_nodes(3, dev) == (
        DeviceNode(path="/dev/nvidia3", host_path=str(dev / "nvidia3")),
    )


def test_no_host_path_when_the_root_is_the_real_dev(
    dev: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dra_driver.cdi import nvidia

    monkeypatch.setattr(nvidia, "DEV_ROOT", dev)
    assert gpu_device_nodes(3, dev) == (DeviceNode(path="/dev/nvidia3"),)
    assert control_device_nodes(dev)[0] == DeviceNode(path="/dev/nvidiactl")
    with pytest.raises(CdiError, match="/dev/nvidia987654 does not exist"):
        gpu_device_nodes(987654)


def test_missing_gpu_node_is_named(dev: Path) -> None:
    with pytest.raises(CdiError, match=f"{dev / 'nvidia1'} does not exist"):
        gpu_device_nodes(1, dev)


def test_control_nodes_only_those_present(dev: Path) -> None:
    assert control_device_nodes(dev) == (
        DeviceNode("/dev/nvidiactl", host_path=str(dev / "nvidiactl")),
        DeviceNode("/dev/nvidia-uvm", host_path=str(dev / "nvidia-uvm")),
    )
    (dev / "nvidia-uvm-tools").touch()
    assert [node.path for node in control_device_nodes(dev)] == [
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
    ]


def test_capability_minors(proc: Path) -> None:
    assert mig_capability_minor(3, 2, None, proc) == 30
    assert mig_capability_minor(3, 2, 0, proc) == 31


def test_capability_file_errors_name_the_file(proc: Path) -> None:
    missing = proc / "driver/nvidia/capabilities/gpu3/mig/gi9/access"
    with pytest.raises(CdiError, match=f"cannot read MIG capability file {missing}"):
        mig_capability_minor(3, 9, None, proc)
    access = proc / "driver/nvidia/capabilities/gpu3/mig/gi2/access"
    access.write_text("DeviceFileMode: 292\n")
    with pytest.raises(CdiError, match=f"{access} has no 'DeviceFileMinor: N' line"):
        mig_capability_minor(3, 2, None, proc)
    access.write_text("DeviceFileMinor: lots\n")
    with pytest.raises(CdiError, match=f"{access}: DeviceFileMinor 'lots' is not a number"):
        mig_capability_minor(3, 2, None, proc)


def test_mig_device_nodes(dev: Path, proc: Path) -> None:
    nodes = mig_device_nodes(3, 2, 0, dev, proc)
    assert [node.path for node in nodes] == [
        "/dev/nvidia3",
        "/dev/nvidia-caps/nvidia-cap30",
        "/dev/nvidia-caps/nvidia-cap31",
    ]
    assert nodes[2].host_path == str(dev / "nvidia-caps" / "nvidia-cap31")
    assert [node.path for node in mig_device_nodes(3, 5, None, dev, proc)] == [
        "/dev/nvidia3",
        "/dev/nvidia-caps/nvidia-cap42",
    ]


def test_mig_device_nodes_missing_cap_node(dev: Path, proc: Path) -> None:
    (dev / "nvidia-caps" / "nvidia-cap31").unlink()
    with pytest.raises(CdiError, match="nvidia-cap31 does not exist"):
        mig_device_nodes(3, 2, 0, dev, proc)


def test_visible_devices_env() -> None:
    assert visible_devices_env(["GPU-a", "MIG-b"]) == (
        "NVIDIA_VISIBLE_DEVICES=GPU-a,MIG-b",
        "CUDA_VISIBLE_DEVICES=GPU-a,MIG-b",
    )
