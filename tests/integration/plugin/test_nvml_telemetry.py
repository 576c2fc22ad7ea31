"""The plugin's telemetry on the NVML backend, without a GPU: the real `NvmlBackend` over the
`pynvml` stand-in, answering the usage calls as the binding does.

Two MPS shares of one GPU are held by two pods; NVML names the processes on the GPU by pid
only, and the plugin tells the shares apart by reading each pid's cgroup under its proc root.
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import pytest
from kubernetes import client

from dra_driver.backends.fake import mps_control as fake_mps_control
from dra_driver.kubeletapi.client import DraClient
from dra_driver.kubeletapi.types import ClaimRef
from localcluster.control_planes import Server
from tests.integration.plugin.harness import (
    create_claim,
    create_node,
    reserve_for,
    result,
    short_dir,
)
from tests.integration.plugin.test_nvml_plugin import nvml_node
from tests.support import polling
from tests.unit.backends.nvml_standin import Process

NODE = "nvml-telemetry"
PLAIN_GPU = 1  # the stand-in's L40S: no MIG, per-process utilisation supported
GIB = 1 << 30


@pytest.fixture(scope="module", autouse=True)
def nodes(api: client.ApiClient) -> None:
    create_node(api, NODE)


def _mps_tool(root: Path) -> Path:
    """The fake control tool behind a path, as the driver's own binary would be."""
    tool = root / "nvidia-cuda-mps-control"
    tool.write_text(f'#!/bin/sh\nexec {sys.executable} -S {fake_mps_control.__file__} "$@"\n')
    tool.chmod(0o755)
    return tool


def _share_for(api: client.ApiClient, label: str, pod: str, pod_uid: str) -> ClaimRef:
    consumed = {"compute": "50", "memory": "8Gi"}
    entry = result("s", f"gpu-{PLAIN_GPU}-shared", NODE, share_id=label, consumed=consumed)
    name, uid = create_claim(api, [entry])
    reserve_for(api, name, pod, pod_uid)
    return ClaimRef("default", uid, name)


def _in_pod(proc_root: Path, pid: int, pod_uid: str) -> None:
    """A container process's cgroup as a cgroupfs-driven kubelet lays it out."""
    (proc_root / str(pid)).mkdir(parents=True)
    (proc_root / str(pid) / "cgroup").write_text(
        f"12:memory:/kubepods/burstable/pod{pod_uid}/{'c' * 64}\n"
        f"0::/kubepods/burstable/pod{pod_uid}/{'c' * 64}\n"
    )


async def test_two_mps_shares_of_one_gpu_are_told_apart_by_their_pods(
    server: Server, api: client.ApiClient
) -> None:
    with short_dir() as tools:
        async with nvml_node(
            server, NODE, mps_control=_mps_tool(tools), telemetry_interval_s=0.05
        ) as node:
            plugin, machine = node.plugin, node.machine
            trainer, server_pod = str(uuid.uuid4()), str(uuid.uuid4())
            first = _share_for(api, "first", "trainer-0", trainer)
            second = _share_for(api, "second", "server-0", server_pod)
            async with DraClient(plugin.dra_socket) as dra:
                answer = await dra.prepare([first, second])
            assert [answer[r.uid].error for r in (first, second)] == ["", ""]

            gpu = machine.gpu(PLAIN_GPU)
            _in_pod(machine.proc_root, 4101, trainer)
            _in_pod(machine.proc_root, 4102, server_pod)
            gpu.processes = [Process(4101, 2 * GIB), Process(4102, 6 * GIB)]
            gpu.busy_processes = {4101: 20, 4102: 55}
            gpu.sm_percent = 75

            registry = plugin.daemon.metrics.registry

            def figures(ref: ClaimRef, pod: str) -> tuple[float | None, float | None]:
                labels = {
                    "node": NODE,
                    "gpu_uuid": gpu.uuid,
                    "device": f"gpu-{PLAIN_GPU}-shared",
                    "claim_namespace": "default",
                    "claim_name": ref.name,
                    "pods": pod,
                }
                return (
                    registry.get_sample_value("dra_device_utilization_percent", labels),
                    registry.get_sample_value("dra_device_memory_used_bytes", labels),
                )

            await polling.eventually(
                lambda: (
                    figures(first, "trainer-0") == (20.0, 2 * GIB)
                    and figures(second, "server-0") == (55.0, 6 * GIB)
                ),
                "each share credited with its own pod's process",
            )
            assert machine.called("nvmlDeviceGetProcessUtilization")
