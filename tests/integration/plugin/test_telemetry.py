"""The plugin's telemetry end to end: a real plugin against the embedded API server, claims
prepared over its real socket, the usage of its fake GPUs set by the test. A whole GPU left
unused gets `Idle=True` in its claim's status after the window and `Idle=False` once used; a
time-slice share is credited with its own pod's process, found through that process's cgroup
under the plugin's proc root; the metrics carry the pods' names.

The fake backend reports no usage yet, so the plugin runs on a FakeBackend wrapped with a
`usage()` whose figures the test sets.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any, cast

import pytest
from kubernetes import client

from dra_driver.backends import GpuBackend
from dra_driver.backends.fake import FakeBackend
from dra_driver.backends.usage import GpuUsage, ProcessUsage, UsageSample
from dra_driver.device_status import idleness
from dra_driver.kubeletapi import DRA_V1
from dra_driver.kubeletapi.client import DraClient
from dra_driver.kubeletapi.types import ClaimRef
from kubeletplugin.prepare.claims import KubernetesClaimSource
from localcluster.apiserver import ApiServer
from tests.integration.plugin.harness import (
    DRIVER,
    MERGE,
    create_claim,
    create_node,
    result,
    running_plugin,
    short_dir,
)
from tests.support import polling

NODE = "node-telemetry"
GIB = 1 << 30


@pytest.fixture(scope="module", autouse=True)
def nodes(api: client.ApiClient) -> None:
    create_node(api, NODE)


class UsageBackend:
    """A FakeBackend whose `usage()` reports what the test sets: SM percent per GPU minor and
    compute processes."""

    def __init__(self, fake: FakeBackend) -> None:
        self.fake = fake
        self.sm: dict[int, float | None] = {}
        self.processes: tuple[ProcessUsage, ...] = ()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.fake, name)

    def usage(self) -> UsageSample:
        gpus = tuple(
            GpuUsage(g.minor, g.uuid, self.sm.get(g.minor, 0.0), 2 * GIB, 80 * GIB)
            for g in self.fake.inventory().gpus
        )
        return UsageSample(gpus=gpus, processes=self.processes)


def _reserve(api: client.ApiClient, name: str, pod: str, pod_uid: str) -> None:
    client.CustomObjectsApi(api).patch_namespaced_custom_object_status(
        "resource.k8s.io",
        "v1",
        "default",
        "resourceclaims",
        name,
        {"status": {"reservedFor": [{"resource": "pods", "name": pod, "uid": pod_uid}]}},
        _content_type=MERGE,
    )


def _idle(api: client.ApiClient, name: str, device: str) -> bool | None:
    claim = KubernetesClaimSource(api).get("default", name)
    assert claim is not None
    state = idleness(claim).get((DRIVER, NODE, device))
    return None if state is None else state.idle


def _pod_process(proc_root: Path, pid: int, pod_uid: str) -> None:
    """A process of the pod as the host's /proc shows it (cgroup v2, systemd driver)."""
    (proc_root / str(pid)).mkdir(parents=True)
    (proc_root / str(pid) / "cgroup").write_text(
        "0::/kubepods.slice/kubepods-besteffort.slice/"
        f"kubepods-besteffort-pod{pod_uid.replace('-', '_')}.slice/cri-containerd-abc.scope\n"
    )


async def test_an_unused_gpu_goes_idle_in_its_claims_status_and_back_when_used(
    server: ApiServer, api: client.ApiClient
) -> None:
    with short_dir() as root:
        proc_root = root / "proc"
        fake = FakeBackend.from_spec("H100-SXM5-80GB:2", NODE, state_dir=root / "fake")
        backend = UsageBackend(fake)
        gpu1 = fake.inventory().gpus[1].uuid
        trainer, infer = str(uuid.uuid4()), str(uuid.uuid4())
        _pod_process(proc_root, 4242, infer)
        _pod_process(proc_root, 4343, str(uuid.uuid4()))  # another pod's, on the same GPU
        backend.sm = {0: 0.0, 1: 75.0}
        backend.processes = (
            ProcessUsage(4242, gpu1, 30.0, 3 * GIB),
            ProcessUsage(4343, gpu1, 45.0, 5 * GIB),
        )
        async with running_plugin(
            server,
            root,
            NODE,
            backend=cast(GpuBackend, backend),
            proc_root=proc_root,
            telemetry_interval_s=0.05,
            idle_threshold_percent=5.0,
            idle_after_s=0.5,
        ) as plugin:
            whole, whole_uid = create_claim(api, [result("gpu", "gpu-0", NODE)])
            _reserve(api, whole, "trainer-0", trainer)
            share, share_uid = create_claim(api, [result("gpu", "gpu-1-ts-0", NODE)])
            _reserve(api, share, "infer-0", infer)
            async with DraClient(plugin.dra_socket, DRA_V1) as dra:
                answer = await dra.prepare(
                    [ClaimRef("default", whole_uid, whole), ClaimRef("default", share_uid, share)]
                )
            assert [answer[u].error for u in (whole_uid, share_uid)] == ["", ""]
            registry = plugin.daemon.metrics.registry
            gpu0 = fake.inventory().gpus[0].uuid
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
            assert registry.get_sample_value("dra_device_memory_used_bytes", labels) == 2 * GIB
            # The share counts its own pod's process only, and is never idle at 30%.
            assert registry.get_sample_value("dra_device_utilization_percent", share_labels) == 30.0
            assert (
                registry.get_sample_value("dra_device_memory_used_bytes", share_labels) == 3 * GIB
            )
            assert _idle(api, share, "gpu-1-ts-0") is None

            backend.sm[0] = 80.0
            await polling.eventually(
                lambda: _idle(api, whole, "gpu-0") is False,
                "the used GPU's claim to say Idle=False",
                in_thread=True,
            )
            assert registry.get_sample_value("dra_device_utilization_percent", labels) == 80.0
            assert registry.get_sample_value("dra_device_idle_seconds", labels) == 0.0

            async with DraClient(plugin.dra_socket, DRA_V1) as dra:
                await dra.unprepare([ClaimRef("default", whole_uid, whole)])
            await polling.eventually(
                lambda: registry.get_sample_value("dra_device_idle_seconds", labels) is None,
                "the unprepared claim's series to go",
            )
            assert registry.get_sample_value("dra_device_idle_seconds", share_labels) == 0.0
