"""Lending against the GPUs of this machine: what a borrower would be given, from real figures.

Read-only: it samples the GPUs through the NVML backend, lets the lender judge them as if the
node lent and nobody held them, and checks the MPS limits a borrower would get: never more
pinned memory than NVML says is free less the headroom, and the below-normal client priority.
It starts no MPS daemon and no process.
"""

from __future__ import annotations

import pytest

from dra_driver.backends.nvml import NvmlBackend
from kubeletplugin.lending.lender import Lender, LendingSettings, Phase
from kubeletplugin.prepare.sharing import (
    BORROWER_PRIORITY,
    MpsLimits,
    ShareError,
    borrower_limits,
)
from kubeletplugin.telemetry.attribution import Attribution
from tests.gpu.conftest import nvml_gpu_count

_COUNT, _WHY_NOT = nvml_gpu_count()
if _COUNT == 0:
    pytest.skip(_WHY_NOT, allow_module_level=True)

pytestmark = pytest.mark.gpu

HEADROOM = 4 << 30


def test_a_borrower_never_gets_more_than_a_real_gpu_has_free_less_the_headroom(
    nvml_backend: NvmlBackend,
) -> None:
    inventory = nvml_backend.inventory()
    whole = [g.minor for g in inventory.gpus if not g.mig_enabled]
    if not whole:
        pytest.skip("every GPU here is in MIG mode, and a GPU in MIG mode lends nothing")
    sample = nvml_backend.usage()
    lender = Lender(LendingSettings(0.0, 5.0, HEADROOM), "gpu.dra-driver.dev")
    lender.observe(sample, {}, Attribution(), {}, lambda _pid: "", whole)
    for gpu in sample.gpus:
        if gpu.minor not in whole:
            continue
        assert gpu.memory_total_bytes is not None and gpu.memory_used_bytes is not None
        assert lender.phase(gpu.minor) is Phase.OPEN  # nobody holds it here
        free = gpu.memory_total_bytes - gpu.memory_used_bytes
        lendable = lender.lendable(gpu.minor)
        assert lendable == max(0, free - HEADROOM), (gpu, lendable)
        if lendable < 1 << 20:  # a GPU this full lends nothing: a grant is refused
            with pytest.raises(ShareError, match="leaves only"):
                borrower_limits(MpsLimits(pinned_memory_bytes=1 << 30), lendable, "borrower")
            continue
        limits = borrower_limits(MpsLimits(thread_percentage=20), lendable, f"GPU {gpu.minor}")
        assert limits.pinned_memory_bytes is not None and limits.pinned_memory_bytes <= free
        env = dict(item.split("=", 1) for item in limits.environment())
        assert env["CUDA_MPS_CLIENT_PRIORITY"] == str(BORROWER_PRIORITY)
        mib = int(env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"].removeprefix("0=").removesuffix("M"))
        assert mib * (1 << 20) <= free - HEADROOM
