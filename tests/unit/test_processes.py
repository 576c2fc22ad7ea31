"""Whether a pid is a live process: running, exited and not yet reaped, reaped."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dra_driver.processes import process_alive


def _child() -> subprocess.Popen[bytes]:
    """A child that runs until its standard input closes."""
    return subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )


def _until_zombie(pid: int) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
        if state == "Z":
            return
        time.sleep(0.01)  # polling another process, with a deadline
    raise AssertionError(f"process {pid} did not exit")


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="needs /proc")
def test_a_running_child_is_alive_and_an_exited_one_is_not() -> None:
    child = _child()
    try:
        assert process_alive(child.pid)
        assert process_alive(child.pid, reap=True)  # running: nothing to reap
    finally:
        assert child.stdin is not None
        child.stdin.close()
    _until_zombie(child.pid)
    # Exited but not reaped: the pid still answers signal 0, yet the process is gone.
    assert not process_alive(child.pid)
    # ... and it is left for its parent to reap.
    assert os.waitpid(child.pid, os.WNOHANG)[0] == child.pid
    child.returncode = 0  # reaped above: Popen must not wait for it again


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="needs /proc")
def test_reap_collects_an_exited_child() -> None:
    child = _child()
    assert child.stdin is not None
    child.stdin.close()
    _until_zombie(child.pid)
    assert not process_alive(child.pid, reap=True)
    with pytest.raises(ChildProcessError):  # already reaped: nothing left to wait for
        os.waitpid(child.pid, os.WNOHANG)
    child.returncode = 0  # reaped above: Popen must not wait for it again


def test_pid_1_is_alive_whether_or_not_it_may_be_signalled() -> None:
    # An unprivileged caller may not signal PID 1 (PermissionError), which still means alive.
    assert process_alive(1)
