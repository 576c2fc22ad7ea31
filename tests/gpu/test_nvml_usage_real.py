"""NvmlBackend.usage() against the GPUs of this machine: the shapes of the figures.

Read-only: it samples whatever runs on the GPUs and starts nothing on them.
"""

from __future__ import annotations

import pytest

from dra_driver.backends.nvml import NvmlBackend
from dra_driver.backends.usage import UsageSample
from dra_driver.inventory.model import Inventory
from tests.gpu.conftest import nvml_gpu_count

_COUNT, _WHY_NOT = nvml_gpu_count()
if _COUNT == 0:
    pytest.skip(_WHY_NOT, allow_module_level=True)

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def samples(nvml_backend: NvmlBackend) -> tuple[UsageSample, UsageSample]:
    # Two cycles: GPM activity of a MIG device needs the previous cycle's sample.
    return nvml_backend.usage(), nvml_backend.usage()


@pytest.fixture(scope="module")
def inventory(nvml_backend: NvmlBackend) -> Inventory:
    return nvml_backend.inventory()


def _percent_ok(value: float | None) -> bool:
    return value is None or 0.0 <= value <= 100.0


def test_every_gpu_is_reported_or_failed(
    samples: tuple[UsageSample, UsageSample], inventory: Inventory
) -> None:
    for sample in samples:
        reported = {g.minor for g in sample.gpus} | {f.minor for f in sample.failures}
        assert reported == {g.minor for g in inventory.gpus}
        assert sample.failures == (), sample.failures


def test_gpu_figures_are_in_range(
    samples: tuple[UsageSample, UsageSample], inventory: Inventory
) -> None:
    for gpu in samples[1].gpus:
        info = inventory.gpu(gpu.minor)
        assert gpu.uuid == info.uuid
        assert _percent_ok(gpu.sm_percent), gpu
        if info.mig_enabled:
            assert gpu.sm_percent is None
        assert gpu.memory_total_bytes is not None and gpu.memory_total_bytes > 0
        assert gpu.memory_used_bytes is not None
        assert 0 <= gpu.memory_used_bytes <= gpu.memory_total_bytes


def test_mig_figures_match_the_live_mig_devices(
    samples: tuple[UsageSample, UsageSample], inventory: Inventory
) -> None:
    sample = samples[1]
    assert {m.uuid for m in sample.mig_devices} == {d.uuid for d in inventory.mig_devices}
    for mig in sample.mig_devices:
        assert _percent_ok(mig.sm_percent), mig
        if mig.memory_total_bytes is not None and mig.memory_used_bytes is not None:
            assert 0 <= mig.memory_used_bytes <= mig.memory_total_bytes
        architecture = inventory.gpu(mig.minor).cuda_compute_capability
        if int(architecture.split(".")[0]) < 9:
            assert mig.sm_percent is None


def test_processes_name_known_devices(samples: tuple[UsageSample, UsageSample]) -> None:
    sample = samples[1]
    devices = {g.uuid for g in sample.gpus} | {m.uuid for m in sample.mig_devices}
    mig_uuids = {m.uuid for m in sample.mig_devices}
    for process in sample.processes:
        assert process.pid > 0
        assert process.uuid in devices
        assert _percent_ok(process.sm_percent)
        if process.uuid in mig_uuids:
            assert process.sm_percent is None
        assert process.memory_used_bytes is None or process.memory_used_bytes >= 0
