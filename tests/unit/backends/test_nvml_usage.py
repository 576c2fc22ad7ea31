"""Usage sampling through NvmlBackend against the pynvml stand-in."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dra_driver.backends.nvml import NvmlBackend
from dra_driver.backends.usage import GpuUsage, MigUsage, ProcessUsage
from dra_driver.inventory.model import MigPlacement
from tests.unit.backends.nvml_standin import (
    GPU_IS_LOST,
    H100_A,
    H100_B,
    L40S,
    NOT_SUPPORTED,
    Process,
    StandInNvml,
    a100,
    build_backend,
    small_machine,
)

MIB = 1024 * 1024
A100 = "GPU-dddddddd-0000-4000-8000-000000000004"


def _mig_device(backend: NvmlBackend, minor: int, profile: str, start: int) -> tuple[int, str]:
    """Create a MIG device; (GI id, MIG UUID)."""
    gi_id = backend.create_gpu_instance(minor, profile, MigPlacement(start, 1))
    backend.create_compute_instance(minor, gi_id)
    (device,) = [d for d in backend.mig_devices(minor) if d.gi_id == gi_id]
    return gi_id, device.uuid


def _args_on(machine: StandInNvml, minor: int, prefix: str) -> list[tuple[str, tuple[Any, ...]]]:
    """The calls starting with `prefix` whose first argument is the GPU's handle."""
    gpu = machine.gpu(minor)

    def on_gpu(args: tuple[Any, ...]) -> bool:
        return bool(args) and machine.device_of(args[0]) is gpu

    return [
        (name, args) for name, args in machine.calls if name.startswith(prefix) and on_gpu(args)
    ]


def _calls_on(machine: StandInNvml, minor: int, prefix: str) -> list[str]:
    return [name for name, _ in _args_on(machine, minor, prefix)]


def _last_seen_asked(machine: StandInNvml, minor: int) -> int:
    (_, args) = _args_on(machine, minor, "nvmlDeviceGetProcessUtilization")[-1]
    return int(args[1])


def test_whole_gpu_figures_and_processes(tmp_path: Path) -> None:
    machine, backend = build_backend(tmp_path)
    l40s = machine.gpu(1)
    l40s.sm_percent = 73
    l40s.processes = [Process(4242, 3 * 1024 * MIB), Process(4343, 1024 * MIB)]
    l40s.process_samples = [(4242, 1_000, 40), (4242, 2_000, 65), (9999, 2_500, 5)]

    sample = backend.usage()

    assert sample.failures == ()
    by_uuid = {gpu.uuid: gpu for gpu in sample.gpus}
    assert by_uuid[L40S] == GpuUsage(1, L40S, 73.0, 4 * 1024 * MIB, 46068 * MIB)
    # MIG capable but disabled: a whole GPU like any other.
    assert by_uuid[H100_B].sm_percent == 0.0
    # MIG enabled: no whole-GPU utilisation, memory still known.
    assert by_uuid[H100_A].sm_percent is None
    assert by_uuid[H100_A].memory_total_bytes == 81559 * MIB
    # The highest sample per process since the last call; a process without a sample while
    # others have samples did not use the SMs.
    assert sorted(sample.processes, key=lambda p: p.pid) == [
        ProcessUsage(4242, L40S, 65.0, 3 * 1024 * MIB),
        ProcessUsage(4343, L40S, 0.0, 1024 * MIB),
    ]


def test_process_utilisation_asks_only_for_samples_newer_than_the_last_seen(
    tmp_path: Path,
) -> None:
    machine, backend = build_backend(tmp_path)
    l40s = machine.gpu(1)
    l40s.processes = [Process(4242, MIB)]
    l40s.process_samples = [(4242, 1_000, 40)]
    backend.usage()
    assert _last_seen_asked(machine, 1) == 0  # first: everything the driver kept

    # Nothing new since: NVML answers NOT_FOUND, which is "unknown", not 0 and not a failure.
    second = backend.usage()
    assert _last_seen_asked(machine, 1) == 1_000
    assert second.failures == ()
    assert second.processes == (ProcessUsage(4242, L40S, None, MIB),)

    l40s.process_samples.append((4242, 3_000, 90))
    third = backend.usage()
    assert third.processes == (ProcessUsage(4242, L40S, 90.0, MIB),)


def test_hopper_mig_devices_get_memory_and_gpm_activity(tmp_path: Path) -> None:
    machine, backend = build_backend(tmp_path)
    gi_a, uuid_a = _mig_device(backend, 0, "1g.10gb", 0)
    gi_b, uuid_b = _mig_device(backend, 0, "1g.10gb", 1)
    h100 = machine.gpu(0)
    h100.processes = [Process(5000, 2 * 1024 * MIB, gi_a)]
    h100.gpm_sm_percent = {gi_a: 42.5, gi_b: 0.0}

    first = backend.usage()
    # No previous sample yet: unknown, not idle.
    assert {m.uuid: m.sm_percent for m in first.mig_devices} == {uuid_a: None, uuid_b: None}

    second = backend.usage()
    assert second.failures == ()
    migs = {m.uuid: m for m in second.mig_devices}
    profile_bytes = h100.profiles[0].memory_mib * MIB
    assert migs[uuid_a] == MigUsage(0, uuid_a, gi_a, 42.5, 2 * 1024 * MIB, profile_bytes)
    assert migs[uuid_b] == MigUsage(0, uuid_b, gi_b, 0.0, 0, profile_bytes)
    # Processes inside MIG devices have memory but never SM utilisation.
    assert [p for p in second.processes if p.uuid == uuid_a] == [
        ProcessUsage(5000, uuid_a, None, 2 * 1024 * MIB)
    ]
    assert _calls_on(machine, 0, "nvmlDeviceGetProcessUtilization") == []
    assert _calls_on(machine, 0, "nvmlDeviceGetUtilizationRates") == []
    # One sample per MIG device per cycle, never a second one in the same cycle (no sleep):
    # the previous cycle's sample is the other end of the interval and is freed after use.
    assert len(machine.called("nvmlGpmMigSampleGet")) == 4
    assert machine.gpm_samples_held == 2

    backend.destroy_compute_instance(0, gi_b, 0)
    backend.usage()
    assert machine.gpm_samples_held == 1  # the gone device's sample is freed
    backend.close()
    assert machine.gpm_samples_held == 0


def test_ampere_mig_devices_get_memory_only_and_no_gpm_call(tmp_path: Path) -> None:
    gpus = small_machine()
    gpus.append(a100(3, A100, "00000000:4C:00.0", mig_enabled=True))
    machine, backend = build_backend(tmp_path, StandInNvml(gpus))
    gi_id, uuid = _mig_device(backend, 3, "1g.5gb", 0)
    machine.gpu(3).processes = [Process(6000, 512 * MIB, gi_id)]

    backend.usage()
    sample = backend.usage()

    assert sample.failures == ()
    (mig,) = [m for m in sample.mig_devices if m.minor == 3]
    assert (mig.uuid, mig.sm_percent, mig.memory_used_bytes) == (uuid, None, 512 * MIB)
    assert ProcessUsage(6000, uuid, None, 512 * MIB) in sample.processes
    assert _calls_on(machine, 3, "nvmlGpm") == []


def test_unsupported_features_are_none_and_not_asked_again(tmp_path: Path) -> None:
    machine, backend = build_backend(tmp_path)
    l40s = machine.gpu(1)
    l40s.utilization_supported = False
    l40s.process_utilization_supported = False
    l40s.processes = [Process(4242, MIB)]

    for _ in range(3):
        sample = backend.usage()
        assert sample.failures == ()
        (gpu,) = [g for g in sample.gpus if g.minor == 1]
        assert gpu.sm_percent is None and gpu.memory_used_bytes == MIB
        assert ProcessUsage(4242, L40S, None, MIB) in sample.processes

    assert len(_calls_on(machine, 1, "nvmlDeviceGetUtilizationRates")) == 1
    assert len(_calls_on(machine, 1, "nvmlDeviceGetProcessUtilization")) == 1


def test_gpm_sample_not_supported_is_remembered(tmp_path: Path) -> None:
    machine, backend = build_backend(tmp_path)
    _mig_device(backend, 0, "1g.10gb", 0)
    machine.fail("nvmlGpmMigSampleGet", NOT_SUPPORTED)

    for _ in range(3):
        sample = backend.usage()
        assert sample.failures == ()
        assert [m.sm_percent for m in sample.mig_devices] == [None]
    assert len(machine.called("nvmlGpmMigSampleGet")) == 1
    assert machine.gpm_samples_held == 0


def test_one_gpu_failing_leaves_the_others_reported(tmp_path: Path) -> None:
    machine, backend = build_backend(tmp_path)
    backend.usage()  # handles known
    machine.gpu(1).lost = True

    sample = backend.usage()

    assert [f.minor for f in sample.failures] == [1]
    assert "nvmlDeviceGetMemoryInfo" in sample.failures[0].message
    assert f"code {GPU_IS_LOST}" in sample.failures[0].message
    assert sorted(g.uuid for g in sample.gpus) == sorted([H100_A, H100_B])

    machine.gpu(1).lost = False
    assert backend.usage().failures == ()


def test_an_unexpected_error_in_one_call_names_the_call(tmp_path: Path) -> None:
    machine, backend = build_backend(tmp_path)
    backend.usage()
    machine.fail("nvmlDeviceGetComputeRunningProcesses", 999)

    sample = backend.usage()

    assert len(sample.failures) == 1
    assert "nvmlDeviceGetComputeRunningProcesses" in sample.failures[0].message
    assert len(sample.gpus) == 2
