"""When MPS control daemons start and stop, decided from the claims in the checkpoint, with the
fake `nvidia-cuda-mps-control` as the daemon."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from api.device_type import DeviceType
from dra_driver.backends.fake import mps_control as fake_mps_control
from dra_driver.cdi import Mount
from dra_driver.checkpoint import (
    Checkpoint,
    CheckpointStore,
    ClaimRecord,
)
from dra_driver.processes import process_alive
from kubeletplugin.mps.daemon import MpsControl
from kubeletplugin.mps.manager import MpsManager
from kubeletplugin.prepare import faults
from kubeletplugin.prepare.journal import CheckpointJournal
from kubeletplugin.prepare.locks import GpuLocks
from kubeletplugin.prepare.mps_lifecycle import MpsLifecycle
from kubeletplugin.prepare.sharing import MpsLimits
from tests.support import objects

BOOT = "boot-1"
UUID = "GPU-00000000-0000-0000-0000-000000000001"
OTHER = "GPU-00000000-0000-0000-0000-000000000002"


class Steps(faults.CrashPoints):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def reached(self, step: str) -> None:
        self.seen.append(step)


class Node:
    def __init__(self, root: Path, manager: MpsManager | None) -> None:
        self.store = CheckpointStore(root / "checkpoint.json")
        self.journal = CheckpointJournal(self.store, Checkpoint(boot_id=BOOT))
        self.steps = Steps()
        self.manager = manager
        self.lifecycle = MpsLifecycle(manager, self.journal, GpuLocks(), self.steps)

    async def prepare(self, uid: str, *, uses_mps: bool = True) -> ClaimRecord:
        """What the prepare flow does: the record first, then the daemons it needs."""
        record = _claim(uid)
        self.journal.keep(self.journal.checkpoint.with_claim(record))
        record = await self.lifecycle.start(record, [uses_mps], {0: UUID})
        self.journal.keep(self.journal.checkpoint.with_claim(record))
        return record

    async def unprepare(self, record: ClaimRecord) -> None:
        await self.lifecycle.release(record)
        await self.journal.commit(self.journal.checkpoint.without_claim(record.uid))


def _claim(uid: str) -> ClaimRecord:
    return objects.claim_record(uid, [("gpu-0-shared", DeviceType.SHARED, 0)])


def _manager(root: Path, **options: int) -> MpsManager:
    control = MpsControl((sys.executable, "-S", fake_mps_control.__file__))
    return MpsManager(control, root / "mps", root / "host-mps", **options)


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    made = Node(tmp_path, _manager(tmp_path, max_failures=1))
    yield made
    assert made.manager is not None
    for uuid, pid in made.manager.running().items():  # whatever a failed test left behind
        await made.manager.stop(uuid, 0, pid)


async def test_the_first_user_starts_the_daemon_and_the_last_one_stops_it(node: Node) -> None:
    assert node.manager is not None
    first = await node.prepare("a")
    assert first.devices[0].mps_uuid == UUID
    (pid,) = node.manager.running().values()
    assert node.journal.checkpoint.mps_daemons[UUID].pid == pid
    # Kept in memory only: the claim's next save writes it.
    assert CheckpointStore(node.store.path).load(BOOT).checkpoint.mps_daemons == {}
    second = await node.prepare("b")
    assert node.manager.running() == {UUID: pid}
    assert node.steps.seen == [faults.PREPARE_MPS_STARTED]

    await node.unprepare(first)
    assert node.manager.running() == {UUID: pid}
    await node.unprepare(second)
    assert node.manager.running() == {} and not process_alive(pid)
    assert node.journal.checkpoint.mps_daemons == {}
    assert node.steps.seen == [faults.PREPARE_MPS_STARTED, faults.UNPREPARE_MPS_STOPPED]


async def test_a_device_without_mps_clients_gets_no_daemon(node: Node) -> None:
    assert node.manager is not None
    record = await node.prepare("a", uses_mps=False)
    assert record.devices[0].mps_uuid is None
    assert node.manager.running() == {} and node.steps.seen == []
    assert node.lifecycle.environment(record.devices[0], MpsLimits(thread_percentage=20)) == (
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=20",
    )
    assert node.lifecycle.mounts(record.devices[0]) == ()


async def test_a_whole_gpu_beside_a_share_gets_no_daemon(node: Node) -> None:
    assert node.manager is not None
    record = objects.claim_record(
        "a", [("gpu-1", DeviceType.GPU, 1), ("gpu-0-shared", DeviceType.SHARED, 0)]
    )
    node.journal.keep(node.journal.checkpoint.with_claim(record))
    record = await node.lifecycle.start(record, [False, True], {0: OTHER, 1: UUID})
    assert [d.mps_uuid for d in record.devices] == [None, UUID]
    assert set(node.manager.running()) == {UUID}
    assert set(node.journal.checkpoint.mps_daemons) == {UUID}


async def test_clients_find_the_pipe_directory_where_the_host_sees_it(
    node: Node, tmp_path: Path
) -> None:
    device = replace(_claim("a").devices[0], mps_uuid=UUID)
    assert node.lifecycle.environment(device, MpsLimits(thread_percentage=20)) == (
        "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=20",
    )
    assert node.lifecycle.mounts(device) == (
        Mount(
            host_path=str(tmp_path / "host-mps" / UUID / "pipe"),
            container_path="/tmp/nvidia-mps",
            options=("rw", "nosuid", "nodev", "bind"),
        ),
    )


async def test_without_a_manager_limits_travel_alone(tmp_path: Path) -> None:
    bare = Node(tmp_path, None)
    record = await bare.prepare("a")
    assert record.devices[0].mps_uuid is None and not bare.lifecycle.runs_daemons
    device = replace(record.devices[0], mps_uuid=UUID)
    assert bare.lifecycle.mounts(device) == ()
    assert await bare.lifecycle.check() is False
    # A record from a plugin that ran daemons: nothing to stop here, and no error.
    await bare.lifecycle.release(replace(record, devices=(device,)))


async def test_daemons_no_claim_needs_are_stopped_even_when_only_a_pid_file_names_them(
    node: Node,
) -> None:
    assert node.manager is not None
    # A crash between the start and any save: no record names the daemon.
    stray, _ = await node.manager.ensure(UUID, 0)
    kept = await node.prepare("a")
    await node.lifecycle.stop_unclaimed(referenced_only=False)
    assert node.manager.running() == {UUID: stray.pid}  # adopted by the claim, so kept
    node.journal.keep(node.journal.checkpoint.without_claim(kept.uid))
    await node.lifecycle.stop_unclaimed(referenced_only=True)
    assert node.manager.running() == {} and node.journal.checkpoint.mps_daemons == {}


async def test_a_dead_daemon_is_started_again_saved_and_reported(node: Node) -> None:
    assert node.manager is not None
    await node.prepare("a")
    (pid,) = node.manager.running().values()
    os.kill(pid, signal.SIGKILL)
    deadline = asyncio.get_running_loop().time() + 20
    while process_alive(pid):
        assert asyncio.get_running_loop().time() < deadline, f"daemon {pid} did not die"
        await asyncio.sleep(0.02)  # polling another process, with a deadline
    assert await node.lifecycle.check() is True  # one failure is too many here
    (again,) = node.manager.running().values()
    assert again != pid
    saved = CheckpointStore(node.store.path).load(BOOT).checkpoint.mps_daemons
    assert saved[UUID].pid == again
    assert await node.lifecycle.check() is False
