"""What a claim's spec holds for real GPUs (`HostDeviceNodes`) and fake ones (`NoDeviceNodes`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_driver.cdi import CdiError, ContainerEdits, Mount, minimum_version
from dra_driver.driverroot import discover, driver_edits
from kubeletplugin.prepare.container_edits import (
    HandedOut,
    HostDeviceNodes,
    NoDeviceNodes,
    cdi_id,
    claim_spec,
    env_key,
)
from tests.support import fake_driver_root

KIND = "k8s.gpu.dra-driver.dev/gpu"


def _gpu(minor: int, mig: tuple[int, int] | None = None) -> HandedOut:
    return HandedOut(
        cdi_name=f"claim-gpu-{minor}",
        device_name=f"gpu-{minor}",
        device_type="mig" if mig else "gpu",
        uuid=f"GPU-{minor}",
        parent_minor=minor,
        mig_ids=mig,
    )


def _capability(proc: Path, path: str, minor: int) -> None:
    access = proc / "driver/nvidia/capabilities/gpu1/mig" / path / "access"
    access.parent.mkdir(parents=True, exist_ok=True)
    access.write_text(f"DeviceFileMinor: {minor}\nDeviceFileMode: 292\n")


def test_a_gpu_gets_its_node_and_a_mig_device_its_capability_nodes(tmp_path: Path) -> None:
    fake = fake_driver_root.build(tmp_path, gpus=2)
    proc = tmp_path / "proc"
    _capability(proc, "gi3", 30)
    _capability(proc, "gi3/ci0", 31)
    for cap in (30, 31):
        (fake.dev / f"nvidia-caps/nvidia-cap{cap}").write_bytes(b"")
    nodes = HostDeviceNodes(fake.dev, proc)
    assert [n.path for n in nodes.for_device(_gpu(0))] == ["/dev/nvidia0"]
    assert [(n.path, n.host_path) for n in nodes.for_device(_gpu(1, (3, 0)))] == [
        ("/dev/nvidia1", str(fake.dev / "nvidia1")),
        ("/dev/nvidia-caps/nvidia-cap30", str(fake.dev / "nvidia-caps/nvidia-cap30")),
        ("/dev/nvidia-caps/nvidia-cap31", str(fake.dev / "nvidia-caps/nvidia-cap31")),
    ]
    with pytest.raises(CdiError, match="nvidia5 does not exist"):
        nodes.for_device(_gpu(5))


def test_without_driver_edits_the_common_part_is_control_nodes_and_void(tmp_path: Path) -> None:
    fake = fake_driver_root.build(tmp_path)
    common = HostDeviceNodes(fake.dev, tmp_path).common()
    assert common.env == ("NVIDIA_VISIBLE_DEVICES=void",)
    assert [n.path for n in common.device_nodes][:2] == ["/dev/nvidiactl", "/dev/nvidia-uvm"]
    assert common.mounts == () and common.hooks == ()


def test_a_claim_spec_carries_the_driver_files_once_for_all_devices(tmp_path: Path) -> None:
    fake = fake_driver_root.build(tmp_path, layout="rhel")
    edits = driver_edits(discover(fake.root), dev_root=fake.dev)
    spec = claim_spec(KIND, [_gpu(0), _gpu(1)], HostDeviceNodes(fake.dev, tmp_path, edits))
    assert spec.edits == edits
    assert all(not device.edits.mounts for device in spec.devices)
    assert minimum_version(spec) == "0.5.0"  # the fake dev root's nodes carry a host path


def test_fake_gpus_get_the_driver_edits_only_when_given(tmp_path: Path) -> None:
    assert NoDeviceNodes().common() == ContainerEdits()
    fake = fake_driver_root.build(tmp_path)
    edits = driver_edits(discover(fake.root), dev_root=fake.dev)
    nodes = NoDeviceNodes(edits)
    assert nodes.common() == edits and nodes.for_device(_gpu(0)) == ()


def test_each_device_gets_its_own_environment_keys_and_mounts() -> None:
    pipe = Mount("/run/mps/GPU-0", "/run/nvidia-mps", ("rw", "bind"))
    shared = HandedOut(
        cdi_name="uid-gpu-0-shared",
        device_name="gpu-0-shared",
        device_type="shared",
        uuid="GPU-0",
        parent_minor=0,
        sharing="MPS",
        extra_env=("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25",),
        mounts=(pipe,),
    )
    mig = HandedOut(
        cdi_name="uid-mig",
        device_name="gpu-1-mig-1g.10gb-0",
        device_type="mig",
        uuid="MIG-1",
        parent_minor=1,
        mig_ids=(3, 0),
    )
    spec = claim_spec(KIND, [shared, mig], NoDeviceNodes())
    assert spec.kind == KIND
    assert [(d.name, d.edits.env, d.edits.mounts) for d in spec.devices] == [
        (
            "uid-gpu-0-shared",
            (
                "DRA_DEVICE_GPU_0_SHARED=GPU-0",
                "DRA_DEVICE_GPU_0_SHARED_TYPE=shared",
                "DRA_DEVICE_GPU_0_SHARED_SHARING=MPS",
                "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25",
            ),
            (pipe,),
        ),
        (
            "uid-mig",
            ("DRA_DEVICE_GPU_1_MIG_1G_10GB_0=MIG-1", "DRA_DEVICE_GPU_1_MIG_1G_10GB_0_TYPE=mig"),
            (),
        ),
    ]
    assert spec.edits == ContainerEdits()
    assert cdi_id(KIND, "uid-mig") == f"{KIND}=uid-mig"
    # Any character a name may hold that an environment key may not becomes an underscore.
    assert env_key("gpu-0.ts/1:a") == "DRA_DEVICE_GPU_0_TS_1_A"
    assert env_key("Gpu9") == "DRA_DEVICE_GPU9"


def test_real_gpu_nodes_come_from_the_host_dev_by_default() -> None:
    with pytest.raises(CdiError, match="device node /dev/nvidia4242 does not exist"):
        HostDeviceNodes().for_device(_gpu(4242))


def test_a_claim_spec_gives_each_real_gpu_its_own_node(tmp_path: Path) -> None:
    fake = fake_driver_root.build(tmp_path, gpus=2)
    spec = claim_spec(KIND, [_gpu(1), _gpu(0)], HostDeviceNodes(fake.dev, tmp_path))
    assert [[n.path for n in d.edits.device_nodes] for d in spec.devices] == [
        ["/dev/nvidia1"],
        ["/dev/nvidia0"],
    ]
