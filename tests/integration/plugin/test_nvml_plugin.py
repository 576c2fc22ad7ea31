"""The kubelet plugin on the NVML backend, end to end, without a GPU.

The backend is the real `NvmlBackend` over the `pynvml` stand-in (tests/unit/backends/
nvml_standin.py), which answers like the binding and, like the kernel driver, publishes a MIG
instance's capability files under /proc and nodes under /dev when the instance is created. The
plugin publishes what NVML reports, prepares a whole GPU and an on-demand MIG device over real
gRPC, writes CDI specs with the driver root's files and the device nodes a container needs, and
destroys the MIG device on unprepare: the path a real GPU node takes, call for call.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from dra_driver.backends.nvml import NvmlBackend
from dra_driver.cdi import CdiSpec, CdiSpecDir
from dra_driver.kubeletapi.client import DraClient
from dra_driver.kubeletapi.types import ClaimRef
from localcluster.control_planes import Server
from tests.integration.plugin.harness import (
    DRIVER,
    RunningPlugin,
    create_claim,
    create_node,
    result,
    running_plugin,
    short_dir,
)
from tests.support import fake_driver_root
from tests.unit.backends.nvml_standin import H100_A, L40S, StandInNvml, make_sysfs

NODE = "nvml-node"
MIG_GPU = 0  # the stand-in's H100 with MIG enabled
PLAIN_GPU = 1  # the stand-in's L40S


@dataclass
class NvmlNode:
    plugin: RunningPlugin
    machine: StandInNvml
    driver: fake_driver_root.FakeDriverRoot
    cdi: CdiSpecDir
    proc: Path


@pytest.fixture(scope="module", autouse=True)
def nodes(api: client.ApiClient) -> None:
    create_node(api, NODE)


@contextlib.asynccontextmanager
async def nvml_node(server: Server, name: str, **extra: Any) -> AsyncIterator[NvmlNode]:
    """A plugin of node `name` on the NVML backend over a fresh stand-in machine, with a driver
    root; `extra` goes to the plugin's configuration."""
    with short_dir() as root:
        machine = StandInNvml()
        driver = fake_driver_root.build(root / "driver", version=machine.driver_version, gpus=3)
        machine.proc_root = root / "proc"
        machine.dev_root = driver.dev
        backend = NvmlBackend(name, nvml=machine, sysfs_root=make_sysfs(root / "sys", machine, {}))
        async with running_plugin(
            server,
            root,
            name,
            fake_gpus=None,
            nvml=True,
            driver_root=driver.root,
            dev_root=driver.dev,
            proc_root=machine.proc_root,
            backend=backend,
            **extra,
        ) as plugin:
            yield NvmlNode(plugin, machine, driver, CdiSpecDir(root / "cdi" / name), root / "proc")


@pytest.fixture
async def node(server: Server) -> AsyncIterator[NvmlNode]:
    async with nvml_node(server, NODE) as made:
        yield made


def published(api: client.ApiClient) -> set[str]:
    objects = client.CustomObjectsApi(api)
    slices: Any = objects.list_cluster_custom_object(
        "resource.k8s.io", "v1", "resourceslices", field_selector=f"spec.nodeName={NODE}"
    )
    return {d["name"] for s in slices["items"] for d in s["spec"].get("devices", [])}


def spec_of(node: NvmlNode, uid: str) -> CdiSpec:
    return node.cdi.read(node.cdi.claim_specs(f"{DRIVER}/gpu")[uid])


async def prepare(node: NvmlNode, api: client.ApiClient, device: str) -> ClaimRef:
    name, uid = create_claim(api, [result("gpu", device, NODE)], reserved=True)
    ref = ClaimRef("default", uid, name)
    async with DraClient(node.plugin.dra_socket) as dra:
        answer = (await dra.prepare([ref]))[uid]
    assert answer.error == "", answer.error
    return ref


async def test_whole_gpu_from_nvml_gets_its_node_and_the_driver_files(
    node: NvmlNode, api: client.ApiClient
) -> None:
    devices = published(api)
    assert {f"gpu-{m}" for m in (0, 1, 2)} <= devices  # every GPU NVML enumerates, by minor
    ref = await prepare(node, api, f"gpu-{PLAIN_GPU}")

    spec = spec_of(node, ref.uid)
    (device,) = spec.devices
    assert {(n.path, n.host_path) for n in device.edits.device_nodes} == {
        (f"/dev/nvidia{PLAIN_GPU}", str(node.driver.dev / f"nvidia{PLAIN_GPU}"))
    }
    assert f"DRA_DEVICE_GPU_{PLAIN_GPU}={L40S}" in device.edits.env  # the UUID NVML reported
    mounts = {m.container_path for m in spec.edits.mounts}
    assert str(node.driver.library_file("libcuda.so")) in mounts
    assert {n.path for n in spec.edits.device_nodes} >= {"/dev/nvidiactl", "/dev/nvidia-uvm"}


async def test_mig_device_is_created_through_nvml_and_destroyed_on_unprepare(
    node: NvmlNode, api: client.ApiClient
) -> None:
    placements = sorted(d for d in published(api) if d.startswith(f"gpu-{MIG_GPU}-mig-1g10gb-"))
    assert placements, "the MIG-enabled H100 publishes its 1g.10gb placements"
    gpu = node.machine.gpu(MIG_GPU)
    assert not gpu.gpu_instances

    ref = await prepare(node, api, placements[0])

    (gi,) = gpu.gpu_instances.values()
    assert gi.profile.name == "1g.10gb"
    assert gi.start == int(placements[0].rsplit("-", 1)[1])
    (ci,) = gi.compute_instances.values()
    (device,) = spec_of(node, ref.uid).devices
    nodes = {n.path for n in device.edits.device_nodes}
    caps = {p for p in nodes if p.startswith("/dev/nvidia-caps/")}
    assert f"/dev/nvidia{MIG_GPU}" in nodes
    assert len(caps) == 2  # the GPU instance's and the compute instance's capability
    for cap in caps:  # the nodes the "driver" made for exactly this instance
        assert (node.driver.dev / cap.removeprefix("/dev/")).exists()
    uuid = device.edits.env[0].partition("=")[2]
    assert re.fullmatch(r"MIG-[0-9a-f-]+", uuid)  # the MIG device's UUID, not its parent's
    assert uuid != H100_A

    async with DraClient(node.plugin.dra_socket) as dra:
        assert (await dra.unprepare([ref]))[ref.uid] == ""
    assert not gpu.gpu_instances
    assert ci.id not in gi.compute_instances
    assert not any(node.proc.rglob("access"))
    assert ref.uid not in node.cdi.claim_specs(f"{DRIVER}/gpu")
