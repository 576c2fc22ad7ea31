"""Talking to `nvidia-cuda-mps-control`: start a control daemon for one device, ask it things,
tell it to quit.

The tool is the only interface the control daemon has, so every call is a subprocess; they run
as asyncio subprocesses with a timeout, because a hung tool must never stall kubelet's calls.
A daemon is identified by its pipe directory: the daemon writes its pid file there, and a live
pid whose command line names MPS plus the `control` pipe is what "running" means. That lets a
restarted plugin find a daemon it started before (or that it started and crashed before
recording) without trusting a pid that the kernel may since have given to another process.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import structlog

from dra_driver.processes import process_alive

log = structlog.get_logger(__name__)

DEFAULT_MPS_CONTROL = Path("/usr/bin/nvidia-cuda-mps-control")
PID_FILE = "nvidia-cuda-mps-control.pid"
CONTROL_PIPE = "control"
POLL_S = 0.02


class MpsError(RuntimeError):
    """The control tool failed or a daemon did not come up (or go away) in time."""


@dataclass(frozen=True, slots=True)
class DaemonDirs:
    """A daemon's directories as the plugin sees them."""

    pipe: Path
    log: Path


class MpsControl:
    def __init__(
        self,
        command: Sequence[str],
        *,
        timeout_s: float = 10.0,
        environment: Mapping[str, str] | None = None,
    ) -> None:
        """`command` is the tool (a path, or an interpreter and a script for the fake one)."""
        self.command = tuple(command)
        self.timeout_s = timeout_s
        self._environment = dict(os.environ if environment is None else environment)

    def _env(self, uuid: str, dirs: DaemonDirs) -> dict[str, str]:
        return {
            **self._environment,
            "CUDA_VISIBLE_DEVICES": uuid,
            "CUDA_MPS_PIPE_DIRECTORY": str(dirs.pipe),
            "CUDA_MPS_LOG_DIRECTORY": str(dirs.log),
        }

    async def _run(
        self, args: Sequence[str], env: Mapping[str, str], stdin: bytes | None
    ) -> tuple[int, str, str]:
        try:
            proc = await asyncio.create_subprocess_exec(
                *self.command,
                *args,
                env=dict(env),
                stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        except OSError as failure:
            raise MpsError(f"cannot run {self.command[0]}: {failure}") from None
        try:
            out, err = await asyncio.wait_for(proc.communicate(stdin), self.timeout_s)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            raise MpsError(
                f"{self.command[0]} {' '.join(args)} did not finish in {self.timeout_s:g} s"
            ) from None
        return (
            proc.returncode if proc.returncode is not None else -1,
            out.decode(errors="replace").strip(),
            err.decode(errors="replace").strip(),
        )

    def running_pid(self, dirs: DaemonDirs) -> int | None:
        """The pid of the daemon serving `dirs`, or None when none does."""
        try:
            pid = int((dirs.pipe / PID_FILE).read_text().strip())
        except (OSError, ValueError):
            return None
        if not (dirs.pipe / CONTROL_PIPE).exists():
            return None
        return pid if _is_mps_daemon(pid) else None

    async def start(self, uuid: str, dirs: DaemonDirs) -> int:
        """Start a daemon for `uuid` and wait until it is listening; its pid."""
        dirs.pipe.mkdir(parents=True, exist_ok=True)
        dirs.log.mkdir(parents=True, exist_ok=True)
        code, out, err = await self._run(["-d"], self._env(uuid, dirs), None)
        if code != 0:
            raise MpsError(
                f"{self.command[0]} -d for {uuid} failed with exit code {code}: "
                f"{err or out or 'no message'}"
            )
        deadline = asyncio.get_running_loop().time() + self.timeout_s
        while (pid := self.running_pid(dirs)) is None:
            if asyncio.get_running_loop().time() > deadline:
                raise MpsError(
                    f"the MPS control daemon for {uuid} did not create its pipe and pid file in "
                    f"{dirs.pipe} within {self.timeout_s:g} s (see {dirs.log / 'control.log'})"
                )
            await asyncio.sleep(POLL_S)  # polling another process, with a deadline
        return pid

    async def ask(self, uuid: str, dirs: DaemonDirs, *commands: str) -> str:
        """Send commands through the control client; its output."""
        stdin = "".join(f"{c}\n" for c in commands).encode()
        code, out, err = await self._run([], self._env(uuid, dirs), stdin)
        if code != 0:
            raise MpsError(f"MPS control for {uuid}: {err or out or f'exit code {code}'}")
        return out

    async def quit(self, uuid: str, dirs: DaemonDirs, pid: int | None) -> None:
        """Tell the daemon to quit and wait until it is gone; a daemon that ignores `quit` is
        terminated, since a daemon nobody accounts for must not keep serving a GPU. `pid`, the
        recorded one, is used only when the pid file finds no daemon, and only while it still
        names an MPS process: the kernel may have given it to another process since."""
        found = self.running_pid(dirs)
        if found is not None:
            pid = found
        elif pid is None or not _is_mps_daemon(pid):
            return
        try:
            await self.ask(uuid, dirs, "quit")
        except MpsError as err:
            log.warning("MPS quit failed; terminating the daemon", uuid=uuid, error=str(err))
        if await _gone(pid, self.timeout_s):
            return
        log.warning("MPS control daemon ignored quit; terminating it", uuid=uuid, pid=pid)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
            if await _gone(pid, self.timeout_s):
                return
        raise MpsError(f"the MPS control daemon for {uuid} (pid {pid}) does not exit")


def _is_mps_daemon(pid: int) -> bool:
    """Alive, and an MPS process as far as its command line tells."""
    if not process_alive(pid, reap=True):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True  # no /proc to check against: the pid is all there is
    return b"mps" in cmdline.lower()


async def _gone(pid: int, timeout_s: float) -> bool:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while process_alive(pid, reap=True):
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(POLL_S)  # polling another process, with a deadline
    return True
