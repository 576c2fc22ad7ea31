#!/usr/bin/env python3
"""A stand-in for `nvidia-cuda-mps-control`, so the MPS lifecycle runs in CI and on a laptop.

It behaves like NVIDIA's tool where the kubelet plugin depends on it: `-d` starts a control
daemon in the background (it detaches and the command returns once the daemon is listening),
the daemon keeps its `control` pipe and its `nvidia-cuda-mps-control.pid` file in
`CUDA_MPS_PIPE_DIRECTORY` (default /tmp/nvidia-mps) and writes `control.log` in
`CUDA_MPS_LOG_DIRECTORY` (default /var/log/nvidia-mps); without `-d` it is the client, reading
commands from standard input, handing them to the daemon through the pipe and printing the
answers; `quit` makes the daemon remove its pipe and pid file and exit. A second daemon on a pipe
directory that already has a live one is refused, and a client that finds no daemon fails, as
with the real tool. There are no MPS servers (no CUDA clients ever connect), so the server and
client lists are empty.

Only the standard library is used, so the file also runs as a script with any Python 3.11+.
The wire format between client and daemon is this module's own: one line per request on the
`control` FIFO (`<reply fifo>\\t<command>`), the answer written to the client's reply FIFO.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import select
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

PIPE_ENV = "CUDA_MPS_PIPE_DIRECTORY"
LOG_ENV = "CUDA_MPS_LOG_DIRECTORY"
DEFAULT_PIPE_DIR = "/tmp/nvidia-mps"
DEFAULT_LOG_DIR = "/var/log/nvidia-mps"
CONTROL = "control"
PID_FILE = "nvidia-cuda-mps-control.pid"
LOCK_FILE = ".daemon.lock"
NOT_RUNNING = "Cannot find MPS control daemon process"
ALREADY_RUNNING = "An instance of this daemon is already running"
REPLY_TIMEOUT_S = 10.0


def _pipe_dir() -> Path:
    return Path(os.environ.get(PIPE_ENV) or DEFAULT_PIPE_DIR)


def _log_dir() -> Path:
    return Path(os.environ.get(LOG_ENV) or DEFAULT_LOG_DIR)


def read_pid(pipe_dir: Path) -> int | None:
    try:
        return int((pipe_dir / PID_FILE).read_text().strip())
    except (OSError, ValueError):
        return None


class _Daemon:
    def __init__(self, pipe_dir: Path, log_dir: Path) -> None:
        self.pipe_dir = pipe_dir
        self.log_dir = log_dir
        self.thread_percentage = 100.0
        self.pinned_limits: dict[str, str] = {}
        self.running = True

    def log(self, level: str, message: str) -> None:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        with contextlib.suppress(OSError), (self.log_dir / "control.log").open("a") as out:
            out.write(f"[{stamp}.{int(time.time() * 1000) % 1000:03d}] {level} {message}\n")

    def answer(self, command: str) -> str:
        words = command.split()
        if not words:
            return ""
        name, args = words[0], words[1:]
        self.log("CMD", command)
        if name == "quit":
            self.running = False
            return ""
        if name == "get_server_list":
            return ""
        if name in ("get_client_list", "get_server_status"):
            return f"Server {args[0] if args else '?'} not found" if args else "Missing PID"
        if name == "get_device_client_list":
            return ""
        if name == "get_default_active_thread_percentage":
            return f"{self.thread_percentage:.1f}"
        if name == "set_default_active_thread_percentage":
            try:
                value = float(args[0])
            except (IndexError, ValueError):
                return "Invalid percentage"
            if not 0 < value <= 100:
                return "Invalid percentage"
            self.thread_percentage = value
            return f"{value:.1f}"
        if name == "set_default_device_pinned_mem_limit" and len(args) == 2:
            self.pinned_limits[args[0]] = args[1]
            return ""
        if name == "get_default_device_pinned_mem_limit" and len(args) == 1:
            return self.pinned_limits.get(args[0], "0")
        return f"Unknown command: {command}"

    def serve(self, control: Path) -> None:
        # Opened for reading and writing, so the FIFO never reports end-of-file between clients.
        fd = os.open(control, os.O_RDWR)
        buffered = b""
        try:
            while self.running:
                chunk = os.read(fd, 4096)
                buffered += chunk
                while b"\n" in buffered and self.running:
                    line, buffered = buffered.split(b"\n", 1)
                    reply_path, _, command = line.decode(errors="replace").partition("\t")
                    self._reply(Path(reply_path), self.answer(command.strip()))
        finally:
            os.close(fd)

    def _reply(self, path: Path, text: str) -> None:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            return  # the client gave up waiting
        try:
            os.set_blocking(fd, True)
            os.write(fd, (text + "\n" if text else "").encode() + b"\0")
        except OSError:
            pass
        finally:
            os.close(fd)

    def cleanup(self) -> None:
        for name in (CONTROL, PID_FILE):
            with contextlib.suppress(FileNotFoundError):
                (self.pipe_dir / name).unlink()
        self.log("INFO", "Exit")


def start_daemon() -> int:
    pipe_dir, log_dir = _pipe_dir(), _log_dir()
    try:
        pipe_dir.mkdir(parents=True, exist_ok=True)
        log_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        print(f"cannot create the MPS directories: {err}", file=sys.stderr)
        return 1
    daemon = _Daemon(pipe_dir, log_dir)
    # The lock is held by the daemon for its whole life (the open file travels through both
    # forks), so two daemons can never serve one pipe directory, however close their starts.
    lock = os.open(pipe_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(lock)
        daemon.log("ERROR", ALREADY_RUNNING)
        print(ALREADY_RUNNING, file=sys.stderr)
        return 1
    ready_read, ready_write = os.pipe()
    if os.fork() > 0:  # the caller's process: return once the daemon listens
        os.close(lock)
        os.close(ready_write)
        with os.fdopen(ready_read, "rb") as ready:
            status = ready.read()
        if status != b"ok":
            print(status.decode(errors="replace") or "the MPS daemon failed", file=sys.stderr)
            return 1
        return 0
    os.close(ready_read)
    os.setsid()
    if os.fork() > 0:
        os._exit(0)
    try:
        _detach()
        control = pipe_dir / CONTROL
        with contextlib.suppress(FileNotFoundError):
            control.unlink()  # left by a daemon that was killed
        os.mkfifo(control, 0o666)
        (pipe_dir / PID_FILE).write_text(f"{os.getpid()}\n")
        signal.signal(signal.SIGTERM, lambda *_: _terminate(daemon))
        daemon.log("INFO", "Startup")
        os.write(ready_write, b"ok")
        os.close(ready_write)
    except OSError as err:
        with contextlib.suppress(OSError):
            os.write(ready_write, f"cannot start the MPS daemon: {err}".encode())
        os._exit(1)
    try:
        daemon.serve(control)
    finally:
        daemon.cleanup()
    os._exit(0)


def _terminate(daemon: _Daemon) -> None:
    daemon.cleanup()
    os._exit(0)


def _detach() -> None:
    os.chdir("/")
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)


def run_client(lines: Sequence[str]) -> int:
    pipe_dir = _pipe_dir()
    control = pipe_dir / CONTROL
    for raw in lines:
        command = raw.strip()
        if not command:
            continue
        reply = pipe_dir / f".reply-{os.getpid()}-{time.monotonic_ns()}"
        try:
            os.mkfifo(reply, 0o600)
        except OSError:
            print(NOT_RUNNING, file=sys.stderr)
            return 1
        try:
            answer = _ask(control, reply, command)
        finally:
            with contextlib.suppress(FileNotFoundError):
                reply.unlink()
        if answer is None:
            print(NOT_RUNNING, file=sys.stderr)
            return 1
        sys.stdout.write(answer)
        sys.stdout.flush()
    return 0


def _ask(control: Path, reply: Path, command: str) -> str | None:
    # Opened for reading and writing first, so the daemon's answer always finds a reader and the
    # wait below sees data rather than end-of-file.
    reply_fd = os.open(reply, os.O_RDWR)
    try:
        try:
            control_fd = os.open(control, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as err:  # no pipe, or nobody reading it: no daemon
            if err.errno in (errno.ENOENT, errno.ENXIO):
                return None
            raise
        try:
            os.write(control_fd, f"{reply}\t{command}\n".encode())
        finally:
            os.close(control_fd)
        received = b""
        deadline = time.monotonic() + REPLY_TIMEOUT_S
        while not received.endswith(b"\0"):
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([reply_fd], [], [], left)
            if ready:
                received += os.read(reply_fd, 4096)
        return received[:-1].decode(errors="replace")
    finally:
        os.close(reply_fd)


def terminate_daemons(root: Path, timeout_s: float = 10.0) -> list[int]:
    """SIGTERM every fake daemon with a pid file under `root` and wait until each is gone; for
    tests and the local cluster, which must not leave daemons behind. Returns their pids."""
    # Imported here: run as a script, by file and without `site`, this module has only the
    # standard library, and the daemon and the client never need this.
    from dra_driver.processes import process_alive  # noqa: PLC0415

    pids = [
        pid
        for pid_file in root.rglob(PID_FILE)
        if (pid := read_pid(pid_file.parent)) is not None and process_alive(pid)
    ]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    for pid in pids:
        while process_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.01)  # polling another process, with a deadline
        if process_alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    return pids


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args == ["-d"]:
        return start_daemon()
    if args:
        print("usage: nvidia-cuda-mps-control [-d]", file=sys.stderr)
        return 1
    return run_client(sys.stdin.read().splitlines())


if __name__ == "__main__":
    sys.exit(main())
