"""Real-hardware fixtures: present only when NVML answers and reports at least one GPU.

Everything under tests/gpu is read-only towards the GPUs: nothing here changes MIG mode, creates
or destroys instances, sets a time-slice or resets a device, so the tests are safe to run on a
node that is serving workloads.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from dra_driver.backends.nvml import NvmlBackend


def nvml_gpu_count() -> tuple[int, str]:
    """(number of GPUs, why there are none) straight from pynvml, without the backend."""
    try:
        import pynvml
    except ImportError as exc:
        return 0, f"pynvml is not installed: {exc}"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return 0, f"NVML is not usable here: {exc}"
    try:
        count = int(pynvml.nvmlDeviceGetCount())
    except pynvml.NVMLError as exc:
        return 0, f"NVML cannot count GPUs: {exc}"
    finally:
        pynvml.nvmlShutdown()
    return count, "" if count else "NVML reports no GPUs"


@pytest.fixture(scope="session")
def nvml_backend() -> Iterator[NvmlBackend]:
    backend = NvmlBackend(socket.gethostname() or "gpu-test-node")
    try:
        yield backend
    finally:
        backend.close()
