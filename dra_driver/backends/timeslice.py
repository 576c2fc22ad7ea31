"""Setting a GPU's time-slice through `nvidia-smi compute-policy`.

NVML has no public call for the time-slice, so the driver shells out. The command is an argument
list (never a shell string: the UUID comes from the driver, but nothing here should be able to
inject into a shell), has a deadline so a wedged driver cannot hang prepare, and any failure is a
TimeSliceCommandError that carries nvidia-smi's own words.
"""

from __future__ import annotations

import subprocess

from dra_driver.backends.base import TIMESLICE_SETTINGS, TimeSliceInterval
from dra_driver.backends.errors import TimeSliceCommandError

# How much of nvidia-smi's output goes into an error message (ResourceClaim messages are short).
MAX_EXCERPT = 400


def timeslice_command(nvidia_smi: str, gpu_uuid: str, interval: TimeSliceInterval) -> list[str]:
    return [
        nvidia_smi,
        "compute-policy",
        "-i",
        gpu_uuid,
        "--set-timeslice",
        str(TIMESLICE_SETTINGS[interval]),
    ]


def set_timeslice(
    nvidia_smi: str, gpu: str, gpu_uuid: str, interval: TimeSliceInterval, timeout: float
) -> None:
    """Run the command for one GPU; `gpu` is the identity used in error messages."""
    argv = timeslice_command(nvidia_smi, gpu_uuid, interval)
    operation = f"set time-slice {interval.name.lower()} ({TIMESLICE_SETTINGS[interval]})"
    try:
        result = subprocess.run(
            argv, shell=False, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as exc:
        detail = f"{nvidia_smi} did not finish within {timeout:g}s"
        output = _excerpt(_as_text(exc.stderr) or _as_text(exc.stdout))
        raise TimeSliceCommandError(gpu, operation, _join(detail, output)) from exc
    except OSError as exc:
        raise TimeSliceCommandError(gpu, operation, f"cannot run {nvidia_smi}: {exc}") from exc
    if result.returncode != 0:
        # nvidia-smi prints many of its errors on stdout, so fall back to it.
        output = _excerpt(result.stderr or result.stdout)
        detail = f"{nvidia_smi} exited with status {result.returncode}"
        raise TimeSliceCommandError(gpu, operation, _join(detail, output))


def _as_text(value: str | bytes | None) -> str:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value or ""


def _excerpt(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_EXCERPT else "..." + text[-MAX_EXCERPT:]


def _join(detail: str, output: str) -> str:
    return f"{detail}: {output}" if output else detail
