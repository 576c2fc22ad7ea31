"""`nvidia-smi compute-policy --set-timeslice` through NvmlBackend.set_timeslice."""

from __future__ import annotations

import json
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from dra_driver.backends import timeslice
from dra_driver.backends.base import TimeSliceInterval, timeslice_from_setting
from dra_driver.backends.errors import NotFoundError, TimeSliceCommandError
from tests.unit.backends.nvml_standin import H100_A, L40S, build_backend


def fake_nvidia_smi(tmp_path: Path, body: str) -> Path:
    """An executable that records its argv in argv.json and then runs `body` (Python)."""
    script = tmp_path / "nvidia-smi"
    record = tmp_path / "argv.json"
    script.write_text(
        "#!/usr/bin/env python3\n"
        "import json, sys, time\n"
        f"json.dump(sys.argv, open({str(record)!r}, 'w'))\n"
        f"{body}\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def test_runs_the_exact_command(tmp_path: Path) -> None:
    script = fake_nvidia_smi(tmp_path, "print('Set timeslice'); sys.exit(0)")
    _, backend = build_backend(tmp_path, nvidia_smi=str(script))
    backend.set_timeslice(1, TimeSliceInterval.LONG)
    argv = json.loads((tmp_path / "argv.json").read_text())
    assert argv == [str(script), "compute-policy", "-i", L40S, "--set-timeslice", "3"]


def test_passes_an_argument_list_without_shell_and_with_a_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, Any] = {}

    def run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        seen.update(kwargs, argv=argv)
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(subprocess, "run", run)
    _, backend = build_backend(tmp_path, nvidia_smi="/opt/bin/nvidia-smi", command_timeout=7.5)
    backend.set_timeslice(0, TimeSliceInterval.DEFAULT)
    assert seen["argv"] == [
        "/opt/bin/nvidia-smi",
        "compute-policy",
        "-i",
        H100_A,
        "--set-timeslice",
        "0",
    ]
    assert seen["shell"] is False
    assert seen["timeout"] == 7.5
    assert seen["capture_output"] is True


@pytest.mark.parametrize(
    ("interval", "value"),
    [
        (TimeSliceInterval.DEFAULT, "0"),
        (TimeSliceInterval.SHORT, "1"),
        (TimeSliceInterval.MEDIUM, "2"),
        (TimeSliceInterval.LONG, "3"),
    ],
)
def test_interval_values(interval: TimeSliceInterval, value: str) -> None:
    assert timeslice.timeslice_command("smi", "GPU-1", interval)[-1] == value
    assert timeslice_from_setting(int(value)) is interval


def test_a_setting_nvidia_smi_does_not_know_is_refused() -> None:
    with pytest.raises(ValueError, match="4 is not a time-slice setting"):
        timeslice_from_setting(4)


def test_non_zero_exit_reports_stderr(tmp_path: Path) -> None:
    script = fake_nvidia_smi(
        tmp_path, "sys.stderr.write('Insufficient permissions\\n'); sys.exit(4)"
    )
    _, backend = build_backend(tmp_path, nvidia_smi=str(script))
    with pytest.raises(TimeSliceCommandError) as caught:
        backend.set_timeslice(0, TimeSliceInterval.SHORT)
    message = str(caught.value)
    assert "minor 0" in message and H100_A in message
    assert "status 4" in message and "Insufficient permissions" in message
    assert caught.value.operation == "set time-slice short (1)"


def test_non_zero_exit_falls_back_to_stdout(tmp_path: Path) -> None:
    script = fake_nvidia_smi(
        tmp_path, "print('Failed to set timeslice: Not Supported'); sys.exit(3)"
    )
    _, backend = build_backend(tmp_path, nvidia_smi=str(script))
    with pytest.raises(TimeSliceCommandError, match="Not Supported"):
        backend.set_timeslice(1, TimeSliceInterval.MEDIUM)


def test_long_output_is_cut(tmp_path: Path) -> None:
    script = fake_nvidia_smi(tmp_path, "sys.stderr.write('x' * 5000 + 'END'); sys.exit(1)")
    _, backend = build_backend(tmp_path, nvidia_smi=str(script))
    with pytest.raises(TimeSliceCommandError) as caught:
        backend.set_timeslice(1, TimeSliceInterval.MEDIUM)
    assert caught.value.detail.endswith("END")
    assert len(caught.value.detail) < 600


def test_timeout(tmp_path: Path) -> None:
    script = fake_nvidia_smi(tmp_path, "time.sleep(10)")
    _, backend = build_backend(tmp_path, nvidia_smi=str(script), command_timeout=0.3)
    with pytest.raises(TimeSliceCommandError, match=r"did not finish within 0\.3s") as caught:
        backend.set_timeslice(0, TimeSliceInterval.LONG)
    assert H100_A in str(caught.value)


def test_missing_binary(tmp_path: Path) -> None:
    _, backend = build_backend(tmp_path, nvidia_smi=str(tmp_path / "no-such-nvidia-smi"))
    with pytest.raises(TimeSliceCommandError, match="cannot run") as caught:
        backend.set_timeslice(0, TimeSliceInterval.LONG)
    assert "minor 0" in str(caught.value)


def test_unknown_minor(tmp_path: Path) -> None:
    _, backend = build_backend(tmp_path, nvidia_smi="/bin/false")
    with pytest.raises(NotFoundError):
        backend.set_timeslice(7, TimeSliceInterval.LONG)
