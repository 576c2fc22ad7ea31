"""Which MPS control daemons run, where their directories are, and keeping them running.

A daemon serves one device (a GPU, or a MIG device) and lives under the plugin's state directory,
`<state-dir>/mps/<uuid>/{pipe,log}`, so its pipe directory can be mounted into every container
with a client on that device. The container runtime reads the mount's host path from the CDI
spec, and the plugin may see its state directory under another path than the host does, hence
the two roots.

A daemon that dies under its clients is started again at the next check. Every such death, and
every failed start, counts as a failure; when a device collects `max_failures` of them within
`failure_window_s` its GPU's shares are reported unhealthy (tainted for the scheduler, unhealthy
in kubelet's health stream) until the failures age out with the daemon running, or until no claim
needs the daemon any more.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import structlog

from dra_driver.checkpoint import MpsDaemonRecord
from kubeletplugin.mps.daemon import DaemonDirs, MpsControl, MpsError

log = structlog.get_logger(__name__)

# Where a client container finds the pipe directory: MPS's own default, so a client whose
# launcher drops CUDA_MPS_PIPE_DIRECTORY still finds its daemon.
CONTAINER_PIPE_DIR = "/tmp/nvidia-mps"


@dataclass(frozen=True, slots=True)
class MpsHealth:
    minor: int
    reason: str


class MpsManager:
    def __init__(
        self,
        control: MpsControl,
        root: Path,
        host_root: Path | None = None,
        *,
        max_failures: int = 3,
        failure_window_s: float = 300.0,
        on_running: Callable[[int], None] | None = None,
        on_restart: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`root` is `<state-dir>/mps` as the plugin sees it, `host_root` the same directory
        as the host (the container runtime) sees it."""
        self.control = control
        self.root = root
        self.host_root = host_root or root
        self._max_failures = max_failures
        self._window = failure_window_s
        self._on_running = on_running
        self._on_restart = on_restart
        self._clock = clock
        self._failures: dict[str, deque[float]] = {}
        self._unhealthy: dict[str, MpsHealth] = {}
        self.health_version = 0

    def dirs(self, uuid: str) -> DaemonDirs:
        return DaemonDirs(self.root / uuid / "pipe", self.root / uuid / "log")

    def host_pipe_dir(self, uuid: str) -> Path:
        return self.host_root / uuid / "pipe"

    def record(self, uuid: str, minor: int, pid: int) -> MpsDaemonRecord:
        dirs = self.dirs(uuid)
        return MpsDaemonRecord(uuid, minor, pid, str(dirs.pipe), str(dirs.log))

    def running(self) -> dict[str, int]:
        """Every daemon that runs from a directory of ours, recorded or not: a crash between a
        start and the save that records it leaves one that only its pid file names."""
        found: dict[str, int] = {}
        if not self.root.is_dir():
            return found
        for entry in sorted(self.root.iterdir()):
            pid = self.control.running_pid(self.dirs(entry.name))
            if pid is not None:
                found[entry.name] = pid
        return found

    def report_running(self, count: int) -> None:
        if self._on_running is not None:
            self._on_running(count)

    async def ensure(self, uuid: str, minor: int) -> tuple[MpsDaemonRecord, bool]:
        """The daemon for `uuid`, adopted when one already runs; True when it was started."""
        dirs = self.dirs(uuid)
        pid = self.control.running_pid(dirs)
        if pid is not None:
            return self.record(uuid, minor, pid), False
        pid = await self.control.start(uuid, dirs)
        log.info("started an MPS control daemon", uuid=uuid, minor=minor, pid=pid)
        return self.record(uuid, minor, pid), True

    async def stop(self, uuid: str, minor: int, pid: int | None) -> None:
        await self.control.quit(uuid, self.dirs(uuid), pid)
        log.info("stopped an MPS control daemon", uuid=uuid, minor=minor)
        self._failures.pop(uuid, None)
        self._set_healthy(uuid)

    async def revive(self, record: MpsDaemonRecord) -> MpsDaemonRecord:
        """Check one daemon that claims need; start it again when it died. The record to keep:
        the same one while the daemon lives."""
        uuid = record.uuid
        pid = self.control.running_pid(self.dirs(uuid))
        if pid is not None:
            self._age(uuid, record.minor)
            return record if pid == record.pid else self.record(uuid, record.minor, pid)
        log.warning("MPS control daemon died; starting it again", uuid=uuid, pid=record.pid)
        self._fail(uuid, record.minor, "the MPS control daemon died")
        if self._on_restart is not None:
            self._on_restart()
        try:
            started, _ = await self.ensure(uuid, record.minor)
        except MpsError as err:
            log.error("cannot restart an MPS control daemon", uuid=uuid, error=str(err))
            self._fail(uuid, record.minor, str(err))
            return record
        return started

    def _fail(self, uuid: str, minor: int, reason: str) -> None:
        now = self._clock()
        failures = self._failures.setdefault(uuid, deque())
        failures.append(now)
        while failures and failures[0] < now - self._window:
            failures.popleft()
        if len(failures) >= self._max_failures:
            why = (
                f"MPS control daemon for {uuid} failed {len(failures)} times in "
                f"{self._window:g} s: {reason}"
            )
            if self._unhealthy.get(uuid) != MpsHealth(minor, why):
                if uuid not in self._unhealthy:
                    log.error("MPS shares unhealthy", uuid=uuid, minor=minor, reason=why)
                self._unhealthy[uuid] = MpsHealth(minor, why)
                self.health_version += 1

    def _age(self, uuid: str, minor: int) -> None:
        failures = self._failures.get(uuid)
        now = self._clock()
        while failures and failures[0] < now - self._window:
            failures.popleft()
        if not failures:
            self._failures.pop(uuid, None)
            self._set_healthy(uuid)

    def _set_healthy(self, uuid: str) -> None:
        if self._unhealthy.pop(uuid, None) is not None:
            log.info("MPS shares healthy again", uuid=uuid)
            self.health_version += 1

    def unhealthy(self) -> dict[int, str]:
        """GPU minor -> why its shares are unhealthy."""
        return {h.minor: h.reason for h in self._unhealthy.values()}

    def forget_unneeded(self, needed: set[str]) -> None:
        """Drop the health of daemons no claim needs any more (stopped by recovery, say)."""
        for uuid in [u for u in self._unhealthy if u not in needed]:
            self._set_healthy(uuid)
        for uuid in [u for u in self._failures if u not in needed]:
            del self._failures[uuid]
