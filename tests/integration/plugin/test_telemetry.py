"""The plugin's telemetry end to end: a real plugin on fake GPUs against the embedded API
server, claims prepared over its real socket, load put on the fake GPUs by pod
(`apply_pod_load`, which writes each fake process's cgroup under the plugin's proc root). A
whole GPU left unused gets `Idle=True` in its claim's status after the window and `Idle=False`
once its pod uses it; a time-slice share is credited with its own pod's process only, found
through the process's cgroup; the metrics carry the pods' names.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from kubernetes import client

from dra_driver.backends.fake.load import apply_pod_load, clear_pod_load
from dra_driver.device_status import idleness
from dra_driver.kubeletapi import DRA_V1
from dra_driver.kubeletapi.client import DraClient
from dra_driver.kubeletapi.types import ClaimRef
from kubeletplugin.prepare.claims import KubernetesClaimSource
from localcluster.control_planes import Server
from tests.integration.plugin.harness import (
    DRIVER,
    create_claim,
    create_node,
    reserve_for,
    result,
    running_plugin,
    short_dir,
)
from tests.support import polling

NODE = "node-telemetry"


@pytest.fixture(scope="module", autouse=True)
def nodes(api: client.ApiClient) -> None:
    create_node(api, NODE)


def _idle(api: client.ApiClient, name: str, device: str) -> bool | None:
    claim = KubernetesClaimSource(api).get("default", name)
    assert claim is not None
    state = idleness(claim).get((DRIVER, NODE, device))
    return None if state is None else state.idle


async def test_an_unused_gpu_goes_idle_in_its_claims_status_and_back_when_used(
    server: Server, api: client.ApiClient
) -> None:
    with short_dir() as root:
        proc_root, state_dir = root / "proc", root / "fake"
        trainer, infer, neighbour = str(uuid.uuid4()), str(uuid.uuid4()), str(uuid.uuid4())
        # MIG mode off: NVML has no SM figure for a GPU in MIG mode, so it could never be idle.
        spec = root / "gpus.yaml"
        spec.write_text("gpus:\n  - profile: H100-SXM5-80GB\n    count: 2\n    migEnabled: false\n")
        async with running_plugin(
            server,
            root,
            NODE,
            str(spec),
            fake_state_dir=state_dir,
            proc_root=proc_root,
            telemetry_interval_s=0.05,
            idle_threshold_percent=5.0,
            idle_after_s=0.5,
        ) as plugin:
            gpu0, gpu1 = (g.uuid for g in plugin.backend.inventory().gpus[:2])
            memory = plugin.backend.inventory().gpus[1].memory_bytes
            apply_pod_load(state_dir, NODE, proc_root, infer, [gpu1], 30)
            apply_pod_load(state_dir, NODE, proc_root, neighbour, [gpu1], 45)
            whole, whole_uid = create_claim(api, [result("gpu", "gpu-0", NODE)])
            reserve_for(api, whole, "trainer-0", trainer)
            share, share_uid = create_claim(api, [result("gpu", "gpu-1-ts-0", NODE)])
            reserve_for(api, share, "infer-0", infer)
            async with DraClient(plugin.dra_socket, DRA_V1) as dra:
                answer = await dra.prepare(
                    [ClaimRef("default", whole_uid, whole), ClaimRef("default", share_uid, share)]
                )
            assert [answer[u].error for u in (whole_uid, share_uid)] == ["", ""]
            registry = plugin.daemon.metrics.registry
            labels = {
                "node": NODE,
                "gpu_uuid": gpu0,
                "device": "gpu-0",
                "claim_namespace": "default",
                "claim_name": whole,
                "pods": "trainer-0",
            }
            share_labels = labels | {
                "gpu_uuid": gpu1,
                "device": "gpu-1-ts-0",
                "claim_name": share,
                "pods": "infer-0",
            }

            await polling.eventually(
                lambda: _idle(api, whole, "gpu-0") is True,
                "the unused GPU's claim to say Idle=True",
                in_thread=True,
            )
            idle_for = registry.get_sample_value("dra_device_idle_seconds", labels)
            assert idle_for is not None and idle_for >= 0.5
            assert registry.get_sample_value("dra_device_utilization_percent", labels) == 0.0
            assert registry.get_sample_value("dra_device_memory_used_bytes", labels) == 0
            # The share counts its own pod's process only, and is never idle at 30%.
            assert registry.get_sample_value("dra_device_utilization_percent", share_labels) == 30.0
            assert registry.get_sample_value("dra_device_memory_used_bytes", share_labels) == int(
                memory * 30 / 100
            )
            assert _idle(api, share, "gpu-1-ts-0") is None

            apply_pod_load(state_dir, NODE, proc_root, trainer, [gpu0], 80)
            await polling.eventually(
                lambda: _idle(api, whole, "gpu-0") is False,
                "the used GPU's claim to say Idle=False",
                in_thread=True,
            )
            assert registry.get_sample_value("dra_device_utilization_percent", labels) == 80.0
            assert registry.get_sample_value("dra_device_idle_seconds", labels) == 0.0
            clear_pod_load(state_dir, NODE, proc_root, trainer)

            async with DraClient(plugin.dra_socket, DRA_V1) as dra:
                await dra.unprepare([ClaimRef("default", whole_uid, whole)])
            await polling.eventually(
                lambda: registry.get_sample_value("dra_device_idle_seconds", labels) is None,
                "the unprepared claim's series to go",
            )
            assert registry.get_sample_value("dra_device_idle_seconds", share_labels) == 0.0


async def test_an_interval_of_zero_turns_telemetry_off(server: Server) -> None:
    with short_dir() as root:
        async with running_plugin(server, root, NODE, telemetry_interval_s=0) as plugin:
            assert plugin.daemon.telemetry is None
            assert "telemetry" not in {t.get_name() for t in asyncio.all_tasks()}
