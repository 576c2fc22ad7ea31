"""Talking to the MPS control tool: the fake `nvidia-cuda-mps-control` for daemons that behave,
small scripts in its place for a tool that fails, hangs or leaves a daemon that will not go."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog.testing

from dra_driver.backends.fake import mps_control as fake_mps_control
from dra_driver.processes import process_alive
from kubeletplugin.mps import daemon as daemon_module
from kubeletplugin.mps.daemon import CONTROL_PIPE, PID_FILE, DaemonDirs, MpsControl, MpsError
from tests.support.polling import eventually

UUID = "GPU-00000000-0000-0000-0000-00000000000a"


def _script(directory: Path, body: str, name: str = "mps-tool") -> Path:
    tool = directory / name
    tool.write_text("#!/bin/sh\n" + body)
    tool.chmod(0o755)
    return tool


def _dirs(tmp_path: Path) -> DaemonDirs:
    return DaemonDirs(tmp_path / "state/mps/pipe", tmp_path / "state/mps/log")


def _fake(**options: float) -> MpsControl:
    return MpsControl((sys.executable, "-S", fake_mps_control.__file__), **options)


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Stand-ins for daemons; whatever a test leaves running is killed after it."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


async def _stand_in(
    processes: list[subprocess.Popen[bytes]], tmp_path: Path, word: str, *, ignore_term: bool
) -> int:
    """A process whose command line holds `word` (and nothing else of the test's), that ignores
    SIGTERM when told to; returns its pid once it is ready (its handler set)."""
    ready = tmp_path / f"ready-{len(processes)}"
    code = (
        "import os, signal, time\n"
        + ("signal.signal(signal.SIGTERM, signal.SIG_IGN)\n" if ignore_term else "")
        + "open(os.environ['READY'], 'w').close()\n"
        + "time.sleep(60)\n"
    )
    env = {**os.environ, "READY": str(ready)}
    processes.append(subprocess.Popen([sys.executable, "-c", code, word], env=env))
    await eventually(ready.exists, "the stand-in to start")
    return processes[-1].pid


def _pid_file(dirs: DaemonDirs, pid: int, *, pipe: bool = True) -> None:
    dirs.pipe.mkdir(parents=True, exist_ok=True)
    (dirs.pipe / PID_FILE).write_text(f"{pid}\n")
    if pipe:
        os.mkfifo(dirs.pipe / CONTROL_PIPE)


# --- asking the tool -------------------------------------------------------------------------


async def test_the_tool_runs_in_the_daemons_environment_and_reads_the_commands(
    tmp_path: Path,
) -> None:
    tool = _script(
        tmp_path,
        "cat\n"
        'echo "visible=$CUDA_VISIBLE_DEVICES pipe=$CUDA_MPS_PIPE_DIRECTORY"\n'
        'echo "log=$CUDA_MPS_LOG_DIRECTORY extra=$EXTRA home=${HOME-unset}"\n',
    )
    control = MpsControl([str(tool)], environment={"EXTRA": "yes", "PATH": os.environ["PATH"]})
    dirs = _dirs(tmp_path)
    out = await control.ask(UUID, dirs, "get_server_list", "quit")
    assert out == (
        "get_server_list\nquit\n"
        f"visible={UUID} pipe={dirs.pipe}\n"
        f"log={dirs.log} extra=yes home=unset"
    )


async def test_the_tools_environment_defaults_to_the_plugins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DRA_TEST_MARK", "inherited")
    tool = _script(tmp_path, 'echo "$DRA_TEST_MARK"\n')
    control = MpsControl([str(tool)])
    monkeypatch.delenv("DRA_TEST_MARK")  # read when the control is made
    assert await control.ask(UUID, _dirs(tmp_path)) == "inherited"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("echo 'no daemon' >&2; echo 'out'; exit 3\n", "no daemon"),
        ("echo 'only out'; exit 3\n", "only out"),
        ("exit 3\n", "exit code 3"),
        ("printf 'bad \\377 byte' >&2; exit 1\n", "bad \ufffd byte"),
    ],
)
async def test_a_failing_ask_says_what_the_tool_said(
    tmp_path: Path, body: str, message: str
) -> None:
    control = MpsControl([str(_script(tmp_path, body))])
    with pytest.raises(MpsError) as caught:
        await control.ask(UUID, _dirs(tmp_path), "get_server_list")
    assert str(caught.value) == f"MPS control for {UUID}: {message}"


async def test_a_tool_that_cannot_be_run_is_an_error_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-tool"
    with pytest.raises(MpsError, match=f"^cannot run {missing}: "):
        await MpsControl([str(missing)]).ask(UUID, _dirs(tmp_path))


async def test_a_hung_tool_is_killed_at_the_timeout(tmp_path: Path) -> None:
    pid_file = tmp_path / "tool.pid"
    tool = _script(tmp_path, f'echo $$ > "{pid_file}"\nexec sleep 60\n')
    control = MpsControl([str(tool)], timeout_s=0.3)
    with pytest.raises(MpsError) as caught:
        await control.start(UUID, _dirs(tmp_path))
    assert str(caught.value) == f"{tool} -d did not finish in 0.3 s"
    assert not process_alive(int(pid_file.read_text()))


# --- starting --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("echo 'already running' >&2; echo 'out'; exit 2\n", "already running"),
        ("echo 'only out'; exit 2\n", "only out"),
        ("exit 2\n", "no message"),
    ],
)
async def test_a_failed_start_says_what_the_tool_said(
    tmp_path: Path, body: str, message: str
) -> None:
    tool = _script(tmp_path, body)
    control = MpsControl([str(tool)])
    dirs = _dirs(tmp_path)
    for _ in range(2):  # the directories are made, and made again without complaint
        with pytest.raises(MpsError) as caught:
            await control.start(UUID, dirs)
        assert str(caught.value) == f"{tool} -d for {UUID} failed with exit code 2: {message}"
        assert dirs.pipe.is_dir() and dirs.log.is_dir()


async def test_a_daemon_that_never_shows_up_is_an_error_pointing_at_its_log(
    tmp_path: Path,
) -> None:
    control = MpsControl([str(_script(tmp_path, "exit 0\n"))], timeout_s=0.2)
    dirs = _dirs(tmp_path)
    with pytest.raises(MpsError) as caught:
        await control.start(UUID, dirs)
    assert str(caught.value) == (
        f"the MPS control daemon for {UUID} did not create its pipe and pid file in "
        f"{dirs.pipe} within 0.2 s (see {dirs.log / 'control.log'})"
    )


async def test_a_started_daemon_is_found_by_its_pid_file_and_quits(tmp_path: Path) -> None:
    control = _fake()
    dirs = _dirs(tmp_path)
    pid = await control.start(UUID, dirs)
    try:
        assert control.running_pid(dirs) == pid
        assert f"CUDA_VISIBLE_DEVICES={UUID}".encode() in Path(f"/proc/{pid}/environ").read_bytes()
        assert await control.ask(UUID, dirs, "get_default_active_thread_percentage") == "100.0"
    finally:
        await control.quit(UUID, dirs, None)
    assert not process_alive(pid)
    assert control.running_pid(dirs) is None


# --- which pid is a daemon -------------------------------------------------------------------


async def test_running_pid_needs_a_pid_file_a_control_pipe_and_an_mps_process(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    control = MpsControl(["unused"])
    dirs = _dirs(tmp_path)
    assert control.running_pid(dirs) is None  # nothing there
    daemon = await _stand_in(processes, tmp_path, "nvidia-cuda-MPS-control", ignore_term=False)
    other = await _stand_in(processes, tmp_path, "something-else", ignore_term=False)
    _pid_file(dirs, daemon, pipe=False)
    assert control.running_pid(dirs) is None  # no control pipe
    os.mkfifo(dirs.pipe / CONTROL_PIPE)
    assert control.running_pid(dirs) == daemon
    (dirs.pipe / PID_FILE).write_text(f"{other}\n")
    assert control.running_pid(dirs) is None  # the pid is not an MPS process
    (dirs.pipe / PID_FILE).write_text("garbage\n")
    assert control.running_pid(dirs) is None
    processes[0].kill()
    processes[0].wait()
    (dirs.pipe / PID_FILE).write_text(f"{daemon}\n")
    assert control.running_pid(dirs) is None  # gone


# --- quitting --------------------------------------------------------------------------------


def _recording_tool(tmp_path: Path, body: str = "exit 0\n") -> tuple[MpsControl, Path]:
    calls = tmp_path / "calls"
    tool = _script(tmp_path, f'echo "$@" >> "{calls}"\ncat >> "{calls}"\n' + body)
    return MpsControl([str(tool)], timeout_s=0.3), calls


async def test_nothing_to_quit_without_a_daemon_or_a_pid(tmp_path: Path) -> None:
    control, calls = _recording_tool(tmp_path)
    await control.quit(UUID, _dirs(tmp_path), None)
    assert not calls.exists()


async def test_a_recorded_pid_that_is_no_mps_process_is_left_alone(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    control, calls = _recording_tool(tmp_path)
    other = await _stand_in(processes, tmp_path, "something-else", ignore_term=False)
    await control.quit(UUID, _dirs(tmp_path), other)
    assert not calls.exists()
    assert process_alive(other)


async def test_a_daemon_that_ignores_quit_is_terminated(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    control, calls = _recording_tool(tmp_path)
    daemon = await _stand_in(processes, tmp_path, "mps-daemon", ignore_term=False)
    with structlog.testing.capture_logs() as logs:
        await control.quit(UUID, _dirs(tmp_path), daemon)  # only the recorded pid finds it
    assert calls.read_text() == "\nquit\n"
    assert not process_alive(daemon)
    assert [e["event"] for e in logs] == ["MPS control daemon ignored quit; terminating it"]


async def test_the_pid_file_wins_over_the_recorded_pid(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    control, _ = _recording_tool(tmp_path)
    daemon = await _stand_in(processes, tmp_path, "mps-daemon", ignore_term=False)
    recorded = await _stand_in(processes, tmp_path, "mps-daemon", ignore_term=False)
    dirs = _dirs(tmp_path)
    _pid_file(dirs, daemon)
    await control.quit(UUID, dirs, recorded)
    assert not process_alive(daemon)
    assert process_alive(recorded)


async def test_a_failed_quit_and_an_ignored_sigterm_end_in_sigkill(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    control, _ = _recording_tool(tmp_path, "echo 'cannot reach the daemon' >&2; exit 1\n")
    daemon = await _stand_in(processes, tmp_path, "mps-daemon", ignore_term=True)
    dirs = _dirs(tmp_path)
    _pid_file(dirs, daemon)
    with structlog.testing.capture_logs() as logs:
        await control.quit(UUID, dirs, None)
    assert not process_alive(daemon)  # it ignores SIGTERM: SIGKILL ended it
    assert [(e["event"], e.get("error")) for e in logs] == [
        (
            "MPS quit failed; terminating the daemon",
            f"MPS control for {UUID}: cannot reach the daemon",
        ),
        ("MPS control daemon ignored quit; terminating it", None),
    ]


async def test_a_daemon_that_survives_every_signal_is_an_error(
    tmp_path: Path,
    processes: list[subprocess.Popen[bytes]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    control, _ = _recording_tool(tmp_path)
    daemon = await _stand_in(processes, tmp_path, "mps-daemon", ignore_term=True)
    kill = os.kill
    sent: list[int] = []

    def swallowed(pid: int, sig: int) -> None:
        if sig == 0:
            kill(pid, sig)
        else:
            sent.append(sig)

    monkeypatch.setattr(os, "kill", swallowed)
    with pytest.raises(MpsError) as caught:
        await control.quit(UUID, _dirs(tmp_path), daemon)
    assert str(caught.value) == f"the MPS control daemon for {UUID} (pid {daemon}) does not exit"
    assert sent == [signal.SIGTERM, signal.SIGKILL]


async def test_a_daemon_gone_before_its_signal_is_not_an_error(
    tmp_path: Path,
    processes: list[subprocess.Popen[bytes]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    control, _ = _recording_tool(tmp_path)
    daemon = await _stand_in(processes, tmp_path, "mps-daemon", ignore_term=True)
    kill = os.kill

    def too_late(pid: int, sig: int) -> None:
        if sig == signal.SIGTERM:
            kill(pid, signal.SIGKILL)  # it exits on its own just before the signal
            processes[0].wait()
            raise ProcessLookupError(pid)
        kill(pid, sig)

    monkeypatch.setattr(os, "kill", too_late)
    await control.quit(UUID, _dirs(tmp_path), daemon)
    assert not process_alive(daemon)


async def test_a_daemon_that_quits_is_waited_for(tmp_path: Path) -> None:
    control = _fake(timeout_s=20)
    dirs = _dirs(tmp_path)
    pid = await control.start(UUID, dirs)
    await eventually(lambda: control.running_pid(dirs) == pid, "the daemon")
    with structlog.testing.capture_logs() as logs:
        await control.quit(UUID, dirs, pid)
    assert not process_alive(pid) and logs == []


async def test_a_daemon_that_comes_up_after_the_tool_returns_is_waited_for(
    tmp_path: Path,
) -> None:
    """The real tool may return before its daemon listens; the start waits for the pid file and
    the pipe."""
    fake = f'"{sys.executable}" -S "{fake_mps_control.__file__}"'
    tool = _script(tmp_path, f"(sleep 0.5; exec {fake} -d) >/dev/null 2>&1 &\nexit 0\n")
    control = MpsControl([str(tool)], timeout_s=20)
    dirs = _dirs(tmp_path)
    pid = await control.start(UUID, dirs)
    try:
        assert control.running_pid(dirs) == pid
    finally:
        await _fake().quit(UUID, dirs, pid)
    assert not process_alive(pid)


async def test_without_proc_a_live_pid_in_the_pid_file_is_the_daemon(
    tmp_path: Path,
    processes: list[subprocess.Popen[bytes]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where no /proc tells what a process is, the pid file and a live pid are all there is."""
    other = await _stand_in(processes, tmp_path, "something-else", ignore_term=False)
    dirs = _dirs(tmp_path)
    _pid_file(dirs, other)
    control = MpsControl(["unused"])
    assert control.running_pid(dirs) is None

    class NoProc:
        def __init__(self, path: str) -> None:
            self.path = path

        def read_bytes(self) -> bytes:
            raise FileNotFoundError(2, "No such file or directory", self.path)

    monkeypatch.setattr(daemon_module, "Path", NoProc)
    assert control.running_pid(dirs) == other


async def test_a_daemon_slow_to_exit_after_quit_is_waited_for_not_signalled(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    """The real daemon takes a moment to shut its servers down after `quit`."""
    daemon = await _stand_in(processes, tmp_path, "mps-daemon", ignore_term=True)
    tool = _script(tmp_path, f"cat >/dev/null\n(sleep 0.5; kill -9 {daemon}) >/dev/null 2>&1 &\n")
    control = MpsControl([str(tool)], timeout_s=20)
    with structlog.testing.capture_logs() as logs:
        await control.quit(UUID, _dirs(tmp_path), daemon)
    assert not process_alive(daemon)
    assert logs == []


# --- edges of running the tool ---------------------------------------------------------------


def test_the_tool_is_given_ten_seconds_by_default() -> None:
    assert MpsControl(["unused"]).timeout_s == 10.0


async def test_undecodable_output_of_the_tool_is_replaced(tmp_path: Path) -> None:
    control = MpsControl([str(_script(tmp_path, "cat >/dev/null; printf 'bad \\377 byte'\n"))])
    assert await control.ask(UUID, _dirs(tmp_path), "get_server_list") == "bad \ufffd byte"


async def test_a_start_reads_nothing_but_an_empty_standard_input(tmp_path: Path) -> None:
    seen = tmp_path / "stdin"
    tool = _script(tmp_path, f'readlink /proc/self/fd/0 > "{seen}"\nexit 2\n')
    with pytest.raises(MpsError):
        await MpsControl([str(tool)]).start(UUID, _dirs(tmp_path))
    assert seen.read_text().strip() == os.devnull


async def test_a_start_makes_a_log_directory_whose_parent_is_missing(tmp_path: Path) -> None:
    dirs = DaemonDirs(tmp_path / "pipes/gpu", tmp_path / "logs/gpu")
    with pytest.raises(MpsError):
        await MpsControl([str(_script(tmp_path, "exit 2\n"))]).start(UUID, dirs)
    assert dirs.pipe.is_dir() and dirs.log.is_dir()


async def test_a_tool_gone_just_as_its_timeout_is_killed_is_still_a_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Gone:
        returncode = None

        async def communicate(self, stdin: bytes | None) -> tuple[bytes, bytes]:
            await asyncio.sleep(60)
            return b"", b""

        def kill(self) -> None:
            raise ProcessLookupError

        async def wait(self) -> int:
            return 0

    async def create(*args: object, **kwargs: object) -> Gone:
        return Gone()

    monkeypatch.setattr(asyncio, "create_subprocess_exec", create)
    with pytest.raises(MpsError) as caught:
        await MpsControl(["tool"], timeout_s=0.1).ask(UUID, _dirs(tmp_path))
    assert str(caught.value) == "tool  did not finish in 0.1 s"


# --- reaping ---------------------------------------------------------------------------------


def _reaped(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


async def test_a_dead_daemon_that_was_our_child_is_reaped_when_looked_for(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    """The plugin is PID 1 of its container, so detached daemons end up as its children: one
    that died is reaped by the look that finds it gone, not left a zombie."""
    daemon = await _stand_in(processes, tmp_path, "mps-daemon", ignore_term=False)
    os.kill(daemon, signal.SIGKILL)
    await eventually(lambda: not process_alive(daemon), "the stand-in to exit")
    dirs = _dirs(tmp_path)
    _pid_file(dirs, daemon)
    assert MpsControl(["unused"]).running_pid(dirs) is None
    assert _reaped(daemon)


async def test_a_daemon_that_quits_is_reaped_when_it_was_our_child(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    daemon = await _stand_in(processes, tmp_path, "mps-daemon", ignore_term=False)
    tool = _script(tmp_path, f"cat >/dev/null\nkill -9 {daemon}\n")
    with structlog.testing.capture_logs() as logs:
        await MpsControl([str(tool)], timeout_s=20).quit(UUID, _dirs(tmp_path), daemon)
    assert logs == []
    assert _reaped(daemon)
