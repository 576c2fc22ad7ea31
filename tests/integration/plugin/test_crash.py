"""SIGKILL the plugin at every step of prepare and unprepare, restart it, and check the node.

The plugin runs as a real process (`python -m kubeletplugin.cli`) with fake GPUs whose state
lives in files, so MIG instances outlive it exactly as real ones outlive a crashed driver. After
the restart the fake GPUs must hold exactly the MIG instances of completed claims, and kubelet's
retried call must get the same CDI device IDs.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from kubernetes import client

from dra_driver.backends.base import TimeSliceInterval
from dra_driver.backends.fake import FakeBackend
from dra_driver.backends.fake.mps_control import read_pid, terminate_daemons
from dra_driver.cdi import CdiSpecDir
from dra_driver.checkpoint import ClaimState, decode_checkpoint
from dra_driver.kubeletapi.client import DraClient
from dra_driver.kubeletapi.types import ClaimRef
from dra_driver.processes import process_alive
from kubeletplugin.prepare import faults
from localcluster.control_planes import Server
from tests.integration.plugin.harness import (
    DRIVER,
    allocated,
    create_node,
    delete_claim,
    opaque,
    registered,
    result,
    short_dir,
)

NODE = "crash-node"
GPUS = "H100-SXM5-80GB:2"


@pytest.fixture(scope="module", autouse=True)
def nodes(api: client.ApiClient) -> None:
    create_node(api, NODE)


class PluginProcess:
    def __init__(self, server: Server, root: Path) -> None:
        self.root = root
        self.kubeconfig = root / "kubeconfig"
        server.write_kubeconfig(self.kubeconfig)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def dra_socket(self) -> Path:
        return self.root / "plugin" / "dra.sock"

    @property
    def registration_socket(self) -> Path:
        return self.root / "registry" / f"{DRIVER}-reg.sock"

    @property
    def cdi_root(self) -> Path:
        return self.root / "cdi"

    def gpus(self) -> FakeBackend:
        """Another view of the same fake GPUs, as a second NVML client would see them."""
        return FakeBackend.from_spec(GPUS, NODE, state_dir=self.root / "fake")

    async def start(self, crash_at: str | None = None) -> None:
        env = dict(os.environ)
        env.pop(faults.ENV_VAR, None)
        if crash_at:
            env[faults.ENV_VAR] = crash_at
        argv = [
            sys.executable,
            "-m",
            "kubeletplugin.cli",
            f"--node-name={NODE}",
            f"--kubeconfig={self.kubeconfig}",
            f"--plugin-dir={self.root / 'plugin'}",
            f"--registry-dir={self.root / 'registry'}",
            f"--cdi-root={self.cdi_root}",
            f"--state-dir={self.root / 'state'}",
            f"--fake-state-dir={self.root / 'fake'}",
            f"--fake-gpus={GPUS}",
            "--log-format=json",
        ]
        log = (self.root / "plugin.log").open("ab")
        self.proc = subprocess.Popen(argv, env=env, stdout=log, stderr=log)
        await registered(self.proc, self.registration_socket, self.log)

    def log(self) -> str:
        return (self.root / "plugin.log").read_text(errors="replace")[-3000:]

    async def killed(self) -> None:
        assert self.proc is not None
        code = await asyncio.to_thread(self.proc.wait, 30)
        assert code == -signal.SIGKILL, f"expected a SIGKILL, got {code}: {self.log()}"

    async def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            code = await asyncio.to_thread(self.proc.wait, 30)
            assert code == 0, self.log()


@pytest.fixture
async def plugin(server: Server, api: client.ApiClient) -> AsyncIterator[PluginProcess]:
    with short_dir() as root:
        running = PluginProcess(server, root)
        try:
            yield running
        finally:
            if running.proc is not None and running.proc.poll() is None:
                running.proc.kill()
                running.proc.wait()
            terminate_daemons(root)


def mig_claim(api: client.ApiClient, device: str, other: str) -> ClaimRef:
    return allocated(api, result("mig", device, NODE), result("ts", other, NODE))


def expected_ids(ref: ClaimRef, *devices: str) -> list[str]:
    return [f"{DRIVER}/gpu={ref.uid}-{d}" for d in devices]


def instances(plugin: PluginProcess) -> set[tuple[int, str, int]]:
    gpus = plugin.gpus()
    return {
        (gi.parent_minor, gi.profile, gi.placement.start)
        for minor in (0, 1)
        for gi in gpus.gpu_instances(minor)
    }


async def prepare(plugin: PluginProcess, ref: ClaimRef) -> list[str]:
    async with DraClient(plugin.dra_socket) as dra:
        outcome = (await dra.prepare([ref]))[ref.uid]
    assert outcome.error == "", outcome.error
    return [i for d in outcome.devices for i in d.cdi_device_ids]


@pytest.mark.parametrize("step", faults.PREPARE_STEPS)
async def test_crash_during_prepare(
    plugin: PluginProcess, api: client.ApiClient, step: str
) -> None:
    claim = mig_claim(api, "gpu-0-mig-2g20gb-2", "gpu-1-ts-0")
    await plugin.start(crash_at=step)
    with pytest.raises(grpc.aio.AioRpcError):
        async with DraClient(plugin.dra_socket) as dra:
            await dra.prepare([claim])
    await plugin.killed()

    await plugin.start()
    if step == faults.PREPARE_COMPLETED:
        # The claim completed before the crash: it stays, instance and all.
        assert instances(plugin) == {(0, "2g.20gb", 2)}
    else:
        # Rolled back at start-up: nothing half-made survives.
        assert instances(plugin) == set()
    ids = await prepare(plugin, claim)
    assert ids == expected_ids(claim, "gpu-0-mig-2g20gb-2", "gpu-1-ts-0")
    assert await prepare(plugin, claim) == ids
    assert instances(plugin) == {(0, "2g.20gb", 2)}
    await plugin.stop()


def saved_claims(plugin: PluginProcess) -> dict[str, ClaimState]:
    """What the checkpoint file on disk says, read as a restarted plugin would."""
    path = plugin.root / "state" / "checkpoint.json"
    if not path.exists():
        return {}
    checkpoint = decode_checkpoint(path.read_bytes(), str(path))
    return {uid: record.state for uid, record in checkpoint.claims.items()}


def specs(plugin: PluginProcess) -> set[str]:
    return set(CdiSpecDir(plugin.cdi_root).claim_specs(f"{DRIVER}/gpu"))


async def test_only_claims_that_change_a_gpu_save_prepare_started(
    plugin: PluginProcess, api: client.ApiClient
) -> None:
    gpu = allocated(api, result("gpu", "gpu-1", NODE))
    consumed = {"compute": "10", "memory": "2Gi"}
    share = allocated(api, result("s", "gpu-0-shared", NODE, share_id="a", consumed=consumed))
    mig = mig_claim(api, "gpu-0-mig-1g10gb-6", "gpu-1-ts-3")
    await plugin.start(crash_at=faults.PREPARE_STARTED)
    # A CDI spec is all a whole GPU or a fractional share changes: no PrepareStarted save, so
    # the crash point is never reached.
    assert await prepare(plugin, gpu) == expected_ids(gpu, "gpu-1")
    assert await prepare(plugin, share) == expected_ids(share, "gpu-0-shared")
    with pytest.raises(grpc.aio.AioRpcError):
        async with DraClient(plugin.dra_socket) as dra:
            await dra.prepare([mig])
    await plugin.killed()
    assert saved_claims(plugin) == {
        gpu.uid: ClaimState.PREPARE_COMPLETED,
        share.uid: ClaimState.PREPARE_COMPLETED,
        mig.uid: ClaimState.PREPARE_STARTED,
    }
    await plugin.start()
    assert set(saved_claims(plugin)) == {gpu.uid, share.uid}
    assert specs(plugin) == {gpu.uid, share.uid}
    async with DraClient(plugin.dra_socket) as dra:
        assert await dra.unprepare([gpu, share]) == {gpu.uid: "", share.uid: ""}
    assert specs(plugin) == set()
    await plugin.stop()


async def test_a_claim_of_a_mig_device_alone_is_saved_before_its_gpu_instance_is_made(
    plugin: PluginProcess, api: client.ApiClient
) -> None:
    # No time-slice device beside it: the MIG device alone must make the claim save
    # PrepareStarted, or a crash right after the GPU instance is made leaves it to no one.
    claim = allocated(api, result("mig", "gpu-0-mig-2g20gb-2", NODE))
    await plugin.start(crash_at=faults.PREPARE_GPU_INSTANCE_UNRECORDED)
    with pytest.raises(grpc.aio.AioRpcError):
        async with DraClient(plugin.dra_socket) as dra:
            await dra.prepare([claim])
    await plugin.killed()
    assert saved_claims(plugin) == {claim.uid: ClaimState.PREPARE_STARTED}
    await plugin.start()
    assert instances(plugin) == set()
    assert saved_claims(plugin) == {}
    await plugin.stop()


@pytest.mark.parametrize("step", [faults.PREPARE_CDI_WRITTEN, faults.PREPARE_COMPLETED])
async def test_crash_while_preparing_a_whole_gpu(
    plugin: PluginProcess, api: client.ApiClient, step: str
) -> None:
    claim = allocated(api, result("gpu", "gpu-0", NODE))
    await plugin.start(crash_at=step)
    with pytest.raises(grpc.aio.AioRpcError):
        async with DraClient(plugin.dra_socket) as dra:
            await dra.prepare([claim])
    await plugin.killed()
    assert specs(plugin) == {claim.uid}
    completed = step == faults.PREPARE_COMPLETED
    # Before PrepareCompleted the checkpoint has never heard of the claim: only its spec exists.
    assert saved_claims(plugin) == ({claim.uid: ClaimState.PREPARE_COMPLETED} if completed else {})

    await plugin.start()
    # A spec no record owns is an orphan and goes at start-up; a completed claim keeps its own.
    assert specs(plugin) == ({claim.uid} if completed else set())
    assert await prepare(plugin, claim) == expected_ids(claim, "gpu-0")
    async with DraClient(plugin.dra_socket) as dra:
        assert await dra.unprepare([claim]) == {claim.uid: ""}
    assert specs(plugin) == set()
    await plugin.stop()
    assert saved_claims(plugin) == {}  # written at the latest on the way out


@pytest.mark.parametrize(
    "step", [faults.UNPREPARE_CDI_DELETED, faults.UNPREPARE_FORGOTTEN, "after-the-answer"]
)
async def test_crash_while_unpreparing_a_whole_gpu(
    plugin: PluginProcess, api: client.ApiClient, step: str
) -> None:
    claim = allocated(api, result("gpu", "gpu-1", NODE))
    await plugin.start()
    await prepare(plugin, claim)
    await plugin.stop()

    answered = step == "after-the-answer"
    await plugin.start(crash_at=None if answered else step)
    async with DraClient(plugin.dra_socket) as dra:
        if answered:
            assert await dra.unprepare([claim]) == {claim.uid: ""}
        else:
            with pytest.raises(grpc.aio.AioRpcError):
                await dra.unprepare([claim])
    assert plugin.proc is not None
    if answered:
        plugin.proc.kill()
    await plugin.killed()
    # The spec went first; the record's removal is written by the next save, which never came.
    assert specs(plugin) == set()
    assert saved_claims(plugin) == {claim.uid: ClaimState.PREPARE_COMPLETED}

    await plugin.start()
    # Recovery drops the record whose spec is gone: the GPU is free for the next claim.
    assert saved_claims(plugin) == {}
    async with DraClient(plugin.dra_socket) as dra:
        assert await dra.unprepare([claim]) == {claim.uid: ""}
    successor = allocated(api, result("gpu", "gpu-1", NODE))
    assert await prepare(plugin, successor) == expected_ids(successor, "gpu-1")
    assert specs(plugin) == {successor.uid}
    await plugin.stop()


async def test_preparing_again_before_the_removal_is_saved_is_careful(
    plugin: PluginProcess, api: client.ApiClient
) -> None:
    # Until its removal is on disk, the file still says the claim is prepared, with the devices
    # of back then; preparing it again therefore saves PrepareStarted before the new spec.
    claim = allocated(api, result("gpu", "gpu-0", NODE))
    await plugin.start(crash_at=faults.PREPARE_STARTED)
    ids = await prepare(plugin, claim)  # a whole GPU does not reach the crash point...
    async with DraClient(plugin.dra_socket) as dra:
        assert await dra.unprepare([claim]) == {claim.uid: ""}
        with pytest.raises(grpc.aio.AioRpcError):
            await dra.prepare([claim])  # ...but the second prepare does
    await plugin.killed()
    assert saved_claims(plugin) == {claim.uid: ClaimState.PREPARE_STARTED}

    await plugin.start()
    assert saved_claims(plugin) == {} and specs(plugin) == set()
    assert await prepare(plugin, claim) == ids
    await plugin.stop()


@pytest.mark.parametrize("step", faults.UNPREPARE_STEPS)
async def test_crash_during_unprepare(
    plugin: PluginProcess, api: client.ApiClient, step: str
) -> None:
    kept = mig_claim(api, "gpu-0-mig-3g40gb-4", "gpu-1-ts-1")
    going = mig_claim(api, "gpu-0-mig-1g10gb-0", "gpu-1-ts-2")
    await plugin.start()
    kept_ids = await prepare(plugin, kept)
    await prepare(plugin, going)
    assert instances(plugin) == {(0, "3g.40gb", 4), (0, "1g.10gb", 0)}
    await plugin.stop()

    await plugin.start(crash_at=step)
    with pytest.raises(grpc.aio.AioRpcError):
        async with DraClient(plugin.dra_socket) as dra:
            await dra.unprepare([going])
    await plugin.killed()

    await plugin.start()
    async with DraClient(plugin.dra_socket) as dra:
        assert (await dra.unprepare([going])) == {going.uid: ""}
    assert instances(plugin) == {(0, "3g.40gb", 4)}
    assert set(CdiSpecDir(plugin.cdi_root).claim_specs(f"{DRIVER}/gpu")) == {kept.uid}
    # The claim that was never touched answers exactly as before.
    assert await prepare(plugin, kept) == kept_ids
    await plugin.stop()


async def test_claims_deleted_while_down_are_unprepared_at_start(
    plugin: PluginProcess, api: client.ApiClient
) -> None:
    kept = mig_claim(api, "gpu-0-mig-3g40gb-4", "gpu-1-ts-1")
    going = mig_claim(api, "gpu-0-mig-1g10gb-0", "gpu-1-ts-2")
    await plugin.start()
    await prepare(plugin, kept)
    await prepare(plugin, going)
    assert plugin.proc is not None
    plugin.proc.kill()
    plugin.proc.wait()
    delete_claim(api, going.name)
    await plugin.start()
    assert instances(plugin) == {(0, "3g.40gb", 4)}
    assert set(CdiSpecDir(plugin.cdi_root).claim_specs(f"{DRIVER}/gpu")) == {kept.uid}
    await plugin.stop()


async def test_corrupt_checkpoint_is_reset_with_a_warning_event(
    plugin: PluginProcess, api: client.ApiClient
) -> None:
    await plugin.start()
    await plugin.stop()
    checkpoint = plugin.root / "state" / "checkpoint.json"
    checkpoint.parent.mkdir(parents=True, exist_ok=True)
    checkpoint.write_text('{"version": 1, "checksum": "nope", "data": {}}')
    await plugin.start()
    events: list[client.CoreV1Event] = list(
        client.CoreV1Api(api).list_namespaced_event("default").items or []
    )
    reasons = [(e.reason, e.involved_object.name) for e in events if e.involved_object is not None]
    assert ("CheckpointReset", NODE) in reasons
    await plugin.stop()


def mps_daemon(plugin: PluginProcess, gpu: int = 0) -> int | None:
    """The pid of the MPS control daemon of a GPU, when one runs (read as an administrator
    would: the pid file in its pipe directory)."""
    uuid = plugin.gpus().gpus[gpu].uuid
    pipe = plugin.root / "state" / "mps" / uuid / "pipe"
    pid = read_pid(pipe)
    if pid is None or not process_alive(pid) or not (pipe / "control").exists():
        return None
    return pid


def running_daemons(plugin: PluginProcess) -> int:
    return sum(1 for gpu in (0, 1) if mps_daemon(plugin, gpu) is not None)


def share_claim(api: client.ApiClient, share_id: str) -> ClaimRef:
    consumed = {"compute": "25", "memory": "4Gi"}
    return allocated(api, result("s", "gpu-0-shared", NODE, share_id=share_id, consumed=consumed))


@pytest.mark.parametrize(
    "step", [faults.PREPARE_MPS_STARTED, faults.PREPARE_CDI_WRITTEN, faults.PREPARE_COMPLETED]
)
async def test_crash_while_preparing_a_share_converges_on_one_daemon(
    plugin: PluginProcess, api: client.ApiClient, step: str
) -> None:
    claim = share_claim(api, "x")
    await plugin.start(crash_at=step)
    with pytest.raises(grpc.aio.AioRpcError):
        async with DraClient(plugin.dra_socket) as dra:
            await dra.prepare([claim])
    await plugin.killed()
    before = mps_daemon(plugin)
    assert before is not None  # started before every one of these steps

    await plugin.start()
    if step == faults.PREPARE_COMPLETED:
        # A prepared share keeps its daemon: adopted, not started a second time.
        assert mps_daemon(plugin) == before
    else:
        # Nothing on disk needed it: stopped at start-up, and started again by the retry.
        assert not process_alive(before) and mps_daemon(plugin) is None
    ids = await prepare(plugin, claim)
    assert ids == expected_ids(claim, "gpu-0-shared")
    after = mps_daemon(plugin)
    assert after is not None and running_daemons(plugin) == 1
    if step == faults.PREPARE_COMPLETED:
        assert after == before
    async with DraClient(plugin.dra_socket) as dra:
        assert await dra.unprepare([claim]) == {claim.uid: ""}
    assert mps_daemon(plugin) is None and not process_alive(after)
    await plugin.stop()


@pytest.mark.parametrize(
    "step",
    [faults.UNPREPARE_MPS_STOPPED, faults.UNPREPARE_CDI_DELETED, faults.UNPREPARE_FORGOTTEN],
)
async def test_crash_while_unpreparing_the_last_share_leaves_no_daemon(
    plugin: PluginProcess, api: client.ApiClient, step: str
) -> None:
    kept = share_claim(api, "k")
    going = share_claim(api, "g")
    await plugin.start()
    await prepare(plugin, kept)
    await prepare(plugin, going)
    daemon = mps_daemon(plugin)
    assert daemon is not None
    async with DraClient(plugin.dra_socket) as dra:
        # Not the last share: the daemon stays.
        assert await dra.unprepare([kept]) == {kept.uid: ""}
    assert mps_daemon(plugin) == daemon
    await plugin.stop()
    # The daemon outlives the plugin, and the restarted plugin adopts it.
    assert mps_daemon(plugin) == daemon

    await plugin.start(crash_at=step)
    assert mps_daemon(plugin) == daemon and running_daemons(plugin) == 1
    with pytest.raises(grpc.aio.AioRpcError):
        async with DraClient(plugin.dra_socket) as dra:
            await dra.unprepare([going])
    await plugin.killed()
    assert not process_alive(daemon)

    await plugin.start()
    async with DraClient(plugin.dra_socket) as dra:
        assert await dra.unprepare([going]) == {going.uid: ""}
    assert running_daemons(plugin) == 0


async def test_time_slice_settings_are_applied_again_at_start(
    plugin: PluginProcess, api: client.ApiClient
) -> None:
    sliced = {
        "apiVersion": "resource.dra-driver.dev/v1alpha1",
        "kind": "GpuConfig",
        "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}},
    }
    claim = allocated(api, result("ts", "gpu-1-ts-0", NODE), config=[opaque(sliced)])
    await plugin.start()
    await prepare(plugin, claim)
    assert plugin.gpus().timeslice(1) is TimeSliceInterval.LONG
    assert plugin.proc is not None
    plugin.proc.kill()
    plugin.proc.wait()
    # While the plugin is down the GPU loses its setting (a GPU reset, another NVML client).
    plugin.gpus().set_timeslice(1, TimeSliceInterval.DEFAULT)
    await plugin.start()
    # The claim is still prepared, so the restarted plugin puts its interval back.
    assert plugin.gpus().timeslice(1) is TimeSliceInterval.LONG
    async with DraClient(plugin.dra_socket) as dra:
        assert await dra.unprepare([claim]) == {claim.uid: ""}
    assert plugin.gpus().timeslice(1) is TimeSliceInterval.DEFAULT
    await plugin.stop()
