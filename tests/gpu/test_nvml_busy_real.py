"""NvmlBackend.usage() while a known load runs on the first GPU: busy is seen busy, by GPU and
by process, and the process is gone from the figures once it ends.

The idle detection (the `Idle` condition, idle reclaim) rests on these readings, and the stand-in
cannot show that real NVML gives them: a GPU at work must not read idle, and a finished process
must not keep a device busy. The load is a matrix-multiply loop through PyTorch's CUDA build (run
where one is installed, skipped elsewhere); it changes no GPU setting, so the module stays as
safe as the rest of tests/gpu on a node that serves workloads, which it only shares the GPU with
for a few seconds.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import pytest

from dra_driver.backends.nvml import NvmlBackend
from dra_driver.backends.usage import ProcessUsage, UsageSample
from tests.gpu.conftest import nvml_gpu_count

_COUNT, _WHY_NOT = nvml_gpu_count()
if _COUNT == 0:
    pytest.skip(_WHY_NOT, allow_module_level=True)
if importlib.util.find_spec("torch") is None:
    pytest.skip("no PyTorch here to put a load on the GPU", allow_module_level=True)

pytestmark = pytest.mark.gpu

#: What the load keeps allocated beside its matrices, so that its memory cannot be mistaken.
HELD_BYTES = 2 * 1024**3
#: Samples are taken about a second apart (NVML's utilisation covers the last sample period).
SAMPLES = 15

LOAD = f"""
import sys, torch
if not torch.cuda.is_available():
    print("no-cuda", flush=True)
    sys.exit(0)
a = torch.randn(8192, 8192, device="cuda:0")
b = torch.randn(8192, 8192, device="cuda:0")
held = torch.empty({HELD_BYTES}, dtype=torch.uint8, device="cuda:0")
torch.cuda.synchronize()
print("ready", flush=True)
while True:
    for _ in range(20):
        c = a @ b
    torch.cuda.synchronize()
"""


@pytest.fixture
def load() -> Iterator[subprocess.Popen[str]]:
    process = subprocess.Popen(
        [sys.executable, "-c", LOAD],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": "0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"},
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline().strip()
        if first == "no-cuda":
            pytest.skip("PyTorch here has no CUDA")
        assert first == "ready", f"the load did not start: {first!r}"
        yield process
    finally:
        process.kill()
        process.wait()


def _sample_until(
    backend: NvmlBackend, done: Callable[[UsageSample], bool]
) -> tuple[UsageSample, list[UsageSample]]:
    seen: list[UsageSample] = []
    for _ in range(SAMPLES):
        sample = backend.usage()
        seen.append(sample)
        if done(sample):
            return sample, seen
        time.sleep(1.0)  # the next sampling period, as the plugin's telemetry loop waits
    raise AssertionError(f"not seen in {SAMPLES} samples: {seen[-3:]}")


def _ours(sample: UsageSample, pid: int) -> ProcessUsage | None:
    return next((p for p in sample.processes if p.pid == pid), None)


def test_a_busy_gpu_and_its_process_read_busy(
    nvml_backend: NvmlBackend, load: subprocess.Popen[str]
) -> None:
    gpus = {g.uuid for g in nvml_backend.inventory().gpus}

    def busy(sample: UsageSample) -> bool:
        mine = _ours(sample, load.pid)
        if mine is None or mine.sm_percent is None or mine.sm_percent < 50:
            return False
        gpu = next(g for g in sample.gpus if g.uuid == mine.uuid)
        return gpu.sm_percent is not None and gpu.sm_percent >= 50

    sample, _ = _sample_until(nvml_backend, busy)
    mine = _ours(sample, load.pid)
    assert mine is not None
    assert mine.uuid in gpus  # a whole GPU (no MIG device is asked for)
    assert mine.memory_used_bytes is not None and mine.memory_used_bytes >= HELD_BYTES
    gpu = next(g for g in sample.gpus if g.uuid == mine.uuid)
    assert gpu.memory_used_bytes is not None and gpu.memory_used_bytes >= mine.memory_used_bytes

    load.kill()
    load.wait()
    _sample_until(nvml_backend, lambda s: _ours(s, load.pid) is None)
