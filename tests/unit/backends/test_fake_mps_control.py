"""The fake `nvidia-cuda-mps-control` as a process: daemon, client, refusals, quit."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dra_driver.backends.fake import mps_control
from dra_driver.backends.fake.mps_control import (
    ALREADY_RUNNING,
    NOT_RUNNING,
    read_pid,
    terminate_daemons,
)
from dra_driver.processes import process_alive
from tests.support.polling import wait_until


@pytest.fixture
def dirs(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    yield tmp_path / "pipe", tmp_path / "log"
    terminate_daemons(tmp_path)


def tool(dirs: tuple[Path, Path], *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "CUDA_MPS_PIPE_DIRECTORY": str(dirs[0]),
        "CUDA_MPS_LOG_DIRECTORY": str(dirs[1]),
    }
    return subprocess.run(
        [sys.executable, "-m", "dra_driver.backends.fake.mps_control", *args],
        input=stdin,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_daemon_client_and_quit(dirs: tuple[Path, Path]) -> None:
    pipe, log = dirs
    assert tool(dirs, "-d").returncode == 0
    # Listening as soon as -d returns: the pipe, the pid file, the log.
    assert stat.S_ISFIFO((pipe / "control").stat().st_mode)
    pid = read_pid(pipe)
    assert pid is not None and process_alive(pid)
    assert "Startup" in (log / "control.log").read_text()

    second = tool(dirs, "-d")
    assert second.returncode == 1 and ALREADY_RUNNING in second.stderr
    assert read_pid(pipe) == pid

    answer = tool(
        dirs,
        stdin="get_server_list\nset_default_active_thread_percentage 30\n"
        "get_default_active_thread_percentage\n",
    )
    assert answer.returncode == 0 and answer.stdout.split() == ["30.0", "30.0"]
    assert "CMD set_default_active_thread_percentage 30" in (log / "control.log").read_text()

    assert tool(dirs, stdin="quit\n").returncode == 0
    wait_until(lambda: not process_alive(pid), f"daemon {pid} to end")
    assert not (pipe / "control").exists() and read_pid(pipe) is None
    after = tool(dirs, stdin="get_server_list\n")
    assert after.returncode == 1 and NOT_RUNNING in after.stderr


def test_a_killed_daemon_can_be_replaced(dirs: tuple[Path, Path]) -> None:
    assert tool(dirs, "-d").returncode == 0
    pid = read_pid(dirs[0])
    assert pid is not None
    os.kill(pid, 9)
    wait_until(lambda: not process_alive(pid), f"daemon {pid} to end")
    # Its pipe and pid file are left behind, as after any SIGKILL; a new daemon takes over.
    assert (dirs[0] / "control").exists()
    assert tool(dirs, "-d").returncode == 0
    assert read_pid(dirs[0]) not in (None, pid)
    assert tool(dirs, stdin="get_server_list\n").returncode == 0


def test_client_without_daemon_and_bad_arguments(dirs: tuple[Path, Path]) -> None:
    missing = tool(dirs, stdin="get_server_list\n")
    assert missing.returncode == 1 and NOT_RUNNING in missing.stderr
    assert tool(dirs, "-x").returncode == 1


def test_runs_by_file_with_the_standard_library_alone(dirs: tuple[Path, Path]) -> None:
    """The plugin runs the fake tool by file without `site`, where the driver's packages cannot
    be imported: an import of them at module level would only fail there, not under `-m`."""
    isolated = subprocess.run(
        [sys.executable, "-S", "-I", mps_control.__file__, "-x"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert isolated.returncode == 1
    assert "usage: nvidia-cuda-mps-control" in isolated.stderr
