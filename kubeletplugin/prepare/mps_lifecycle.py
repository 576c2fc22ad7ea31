"""Which MPS control daemons the claims need, and keeping the node in line with that.

A device whose clients use MPS (a fractional share, an MPS config) needs the MPS control daemon
of its device: the first such claim starts it, the last one to leave stops it. Who needs a
daemon is always derived from the claims in the checkpoint, like the time-slice setting, so
recovery and the periodic check can put the node right from the checkpoint alone. Starting or
stopping a daemon for a claim changes the checkpoint in memory only, for the claim's next save to
write (a restarted plugin finds its daemons through their pid files); a daemon the periodic
check starts again is saved at once. Running a daemon is `MpsManager`'s business; this module
decides when.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import replace

from dra_driver.cdi import Mount
from dra_driver.checkpoint import ClaimRecord, DeviceRecord
from kubeletplugin.mps.manager import CONTAINER_PIPE_DIR, MpsManager
from kubeletplugin.prepare import faults
from kubeletplugin.prepare.journal import CheckpointJournal
from kubeletplugin.prepare.locks import GpuLocks
from kubeletplugin.prepare.sharing import MpsLimits


class MpsLifecycle:
    def __init__(
        self,
        mps: MpsManager | None,
        journal: CheckpointJournal,
        gpu_locks: GpuLocks,
        crash: faults.CrashPoints,
    ) -> None:
        """Without `mps`, MPS limits only travel in the environment and no daemon is run."""
        self._mps = mps
        self._journal = journal
        self._gpu_locks = gpu_locks
        self._crash = crash
        self._health_seen = 0

    @property
    def runs_daemons(self) -> bool:
        return self._mps is not None

    def users(self, *, exclude: str | None = None) -> dict[str, int]:
        """UUID -> GPU minor of every MPS daemon that a recorded claim needs."""
        return {
            device.mps_uuid: device.minor
            for uid, record in self._journal.checkpoint.claims.items()
            if uid != exclude
            for device in record.devices
            if device.mps_uuid is not None and device.minor is not None
        }

    async def start(
        self, record: ClaimRecord, uses_mps: Sequence[bool], uuids: Mapping[int, str]
    ) -> ClaimRecord:
        """Make sure the MPS control daemon of every device whose clients use MPS runs: the
        first share of a GPU starts it, the others find it running. `uses_mps` and `uuids`
        are by the position of the device in the record (the UUID of an on-demand MIG device
        is known only once it exists)."""
        if self._mps is None or not any(uses_mps):
            return record
        devices = list(record.devices)
        for position, uses in enumerate(uses_mps):
            if uses and devices[position].mps_uuid is None:
                devices[position] = replace(devices[position], mps_uuid=uuids[position])
        record = replace(record, devices=tuple(devices))
        # In the checkpoint before the daemon starts, so a failure's rollback stops it again.
        self._journal.keep(self._journal.checkpoint.with_claim(record))
        wanted = {d.mps_uuid: d.minor for d in devices if d.mps_uuid and d.minor is not None}
        for uuid, minor in sorted(wanted.items()):
            await self._ensure_one(uuid, minor)
        return record

    async def _ensure_one(self, uuid: str, minor: int) -> None:
        assert self._mps is not None
        daemon, started = await self._mps.ensure(uuid, minor)
        if self._journal.checkpoint.mps_daemons.get(uuid) != daemon:
            self._journal.keep(self._journal.checkpoint.with_mps_daemon(daemon))
        self._mps.report_running(len(self._journal.checkpoint.mps_daemons))
        if started:
            self._crash.reached(faults.PREPARE_MPS_STARTED)

    def environment(self, device: DeviceRecord, limits: MpsLimits) -> tuple[str, ...]:
        """What a container's clients of the device need in their environment."""
        if device.mps_uuid is None:
            return limits.environment()
        return (f"CUDA_MPS_PIPE_DIRECTORY={CONTAINER_PIPE_DIR}", *limits.environment())

    def mounts(self, device: DeviceRecord) -> tuple[Mount, ...]:
        """The daemon's pipe directory, where a client container expects it."""
        if device.mps_uuid is None or self._mps is None:
            return ()
        return (
            Mount(
                host_path=str(self._mps.host_pipe_dir(device.mps_uuid)),
                container_path=CONTAINER_PIPE_DIR,
                options=("rw", "nosuid", "nodev", "bind"),
            ),
        )

    async def release(self, record: ClaimRecord) -> None:
        """Stop the daemons only this claim still needs (the last share of a GPU leaving)."""
        mine = {d.mps_uuid: d.minor for d in record.devices if d.mps_uuid and d.minor is not None}
        if self._mps is None or not mine:
            return  # most claims use no daemon: no walk over every record for them
        others = self.users(exclude=record.uid)
        for uuid, minor in sorted(mine.items()):
            if uuid in others:
                continue
            recorded = self._journal.checkpoint.mps_daemons.get(uuid)
            await self._mps.stop(uuid, minor, recorded.pid if recorded else None)
            self._journal.keep(self._journal.checkpoint.without_mps_daemon(uuid))
            self._mps.report_running(len(self._journal.checkpoint.mps_daemons))
            self._crash.reached(faults.UNPREPARE_MPS_STOPPED)

    async def stop_unclaimed(self, *, referenced_only: bool) -> None:
        """Stop every daemon of ours (recorded, or found through its pid file) that no claim
        needs. With `referenced_only`, "needs" means any record naming it at all, prepared or
        not: recovery runs this before rolling claims back, so a MIG device is never destroyed
        under a daemon that nothing would stop."""
        if self._mps is None:
            return
        if referenced_only:
            needed = {
                device.mps_uuid
                for record in self._journal.checkpoint.claims.values()
                for device in record.devices
                if device.mps_uuid is not None
            }
        else:
            needed = set(self.users())
        found = await asyncio.to_thread(self._mps.running)
        for uuid in sorted((set(found) | set(self._journal.checkpoint.mps_daemons)) - needed):
            recorded = self._journal.checkpoint.mps_daemons.get(uuid)
            minor = recorded.minor if recorded else -1
            pid = found.get(uuid) or (recorded.pid if recorded else None)
            await self._mps.stop(uuid, minor, pid)
            self._journal.keep(self._journal.checkpoint.without_mps_daemon(uuid))
        self._mps.forget_unneeded(needed)
        self._mps.report_running(len(self._journal.checkpoint.mps_daemons))

    async def ensure(self) -> None:
        """Every daemon a claim needs runs: adopted when it survived, started when not."""
        if self._mps is None:
            return
        for uuid, minor in sorted(self.users().items()):
            async with self._gpu_locks.held([minor]):
                await self._ensure_one(uuid, minor)

    async def check(self) -> bool:
        """Start again every needed daemon that died; True when some GPU's MPS health
        changed."""
        if self._mps is None:
            return False
        for uuid, minor in sorted(self.users().items()):
            async with self._gpu_locks.held([minor]):
                if uuid not in self.users():
                    continue  # its last claim left while we waited for the lock
                recorded = self._journal.checkpoint.mps_daemons.get(uuid)
                if recorded is None:
                    await self._ensure_one(uuid, minor)
                    continue
                current = await self._mps.revive(recorded)
                if current != recorded:
                    await self._journal.commit(self._journal.checkpoint.with_mps_daemon(current))
        # Also changes made by unprepare (a failing daemon no claim needs any more).
        changed = self._mps.health_version != self._health_seen
        self._health_seen = self._mps.health_version
        return changed
