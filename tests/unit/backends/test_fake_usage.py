"""Fake load and the usage figures the fake backend reports from it."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from dra_driver.backends.errors import InUseError, NotFoundError
from dra_driver.backends.fake import FakeBackend
from dra_driver.backends.fake.load import apply_pod_load, clear_pod_load
from dra_driver.backends.fake.state import FIRST_FAKE_PID, state_file_name
from dra_driver.backends.mig import create_mig_device
from dra_driver.backends.usage import GpuUsage, MigUsage, ProcessUsage
from dra_driver.inventory.model import MigDevice, MigPlacement
from dra_driver.inventory.products import product
from tests.unit.backends.conftest import NODE

MakeBackend = Callable[..., FakeBackend]
MIB = 1024 * 1024
H100 = product("H100-SXM5-80GB")
A100 = product("A100-SXM4-40GB")
POD_A = "11111111-2222-3333-4444-555555555555"
POD_B = "66666666-7777-8888-9999-000000000000"
CGROUP = re.compile(
    r"^0::/kubepods\.slice/kubepods-besteffort\.slice/kubepods-besteffort-pod(?P<pod>[0-9a-f_]+)"
    r"\.slice/cri-containerd-(?P<container>[0-9a-f]{64})\.scope\n$"
)


@pytest.fixture
def spec(tmp_path: Path) -> str:
    """minor 0: H100 without MIG; minor 1: H100 in MIG mode; minor 2: A100 in MIG mode."""
    path = tmp_path / "node.yaml"
    path.write_text(
        "gpus:\n"
        "  - profile: H100-SXM5-80GB\n"
        "    migEnabled: false\n"
        "  - profile: H100-SXM5-80GB\n"
        "  - profile: A100-SXM4-40GB\n"
    )
    return str(path)


@pytest.fixture
def proc_root(tmp_path: Path) -> Path:
    return tmp_path / "proc"


def _mig(backend: FakeBackend, minor: int, profile: str) -> MigDevice:
    return create_mig_device(backend, minor, profile, MigPlacement(0, 1))


def test_whole_gpu_mig_and_process_figures(
    make_backend: MakeBackend, spec: str, state_dir: Path, proc_root: Path
) -> None:
    backend = make_backend(spec, state_dir=state_dir)
    whole, hopper_mig, ampere_mig = (g.uuid for g in backend.gpus)
    h100_mig = _mig(backend, 1, "1g.10gb")
    a100_mig = _mig(backend, 2, "1g.5gb")

    (pid_whole,) = apply_pod_load(state_dir, NODE, proc_root, POD_A, [whole], 30)
    pid_h, pid_a = apply_pod_load(
        state_dir, NODE, proc_root, POD_B, [h100_mig.uuid, a100_mig.uuid], 50
    )
    sample = backend.usage()

    h100_bytes = H100.memory_mib * MIB
    h100_profile = H100.mig_profiles[0].memory_mib * MIB
    a100_profile = next(p for p in A100.mig_profiles if p.name == "1g.5gb").memory_mib * MIB
    assert sample.failures == ()
    assert sample.gpus == (
        GpuUsage(0, whole, 30.0, int(h100_bytes * 0.3), h100_bytes),
        # MIG mode: no SM figure, memory of every process on the GPU.
        GpuUsage(1, hopper_mig, None, h100_profile // 2, h100_bytes),
        GpuUsage(2, ampere_mig, None, a100_profile // 2, A100.memory_mib * MIB),
    )
    assert sample.mig_devices == (
        MigUsage(1, h100_mig.uuid, h100_mig.gi_id, 50.0, h100_profile // 2, h100_profile),
        # Before Hopper there is no GPU performance monitoring: memory only.
        MigUsage(2, a100_mig.uuid, a100_mig.gi_id, None, a100_profile // 2, a100_profile),
    )
    assert sample.processes == (
        ProcessUsage(pid_whole, whole, 30.0, int(h100_bytes * 0.3)),
        ProcessUsage(pid_h, h100_mig.uuid, None, h100_profile // 2),
        ProcessUsage(pid_a, a100_mig.uuid, None, a100_profile // 2),
    )


def test_idle_gpus_report_zero_not_unknown(make_backend: MakeBackend, spec: str) -> None:
    backend = make_backend(spec)
    (gpu, _, _) = backend.usage().gpus
    assert (gpu.sm_percent, gpu.memory_used_bytes) == (0.0, 0)


def test_two_pods_on_one_gpu_add_up_to_at_most_100(
    make_backend: MakeBackend, spec: str, state_dir: Path, proc_root: Path
) -> None:
    backend = make_backend(spec, state_dir=state_dir)
    whole = backend.gpus[0].uuid
    apply_pod_load(state_dir, NODE, proc_root, POD_A, [whole], 25)
    apply_pod_load(state_dir, NODE, proc_root, POD_B, [whole], 35)
    assert backend.usage().gpus[0].sm_percent == 60.0

    apply_pod_load(state_dir, NODE, proc_root, POD_B, [whole], 90)  # replaces B's process
    first = backend.usage()
    assert first.gpus[0].sm_percent == 100.0
    assert sorted(p.sm_percent or 0.0 for p in first.processes) == [25.0, 90.0]

    clear_pod_load(state_dir, NODE, proc_root, POD_A)
    assert backend.usage().gpus[0].sm_percent == 90.0


def test_a_process_makes_its_mig_device_in_use(
    make_backend: MakeBackend, spec: str, state_dir: Path, proc_root: Path
) -> None:
    backend = make_backend(spec, state_dir=state_dir)
    device = _mig(backend, 1, "1g.10gb")
    apply_pod_load(state_dir, NODE, proc_root, POD_A, [device.uuid], 10)

    with pytest.raises(InUseError, match="processes are running") as caught:
        backend.destroy_compute_instance(1, device.gi_id, device.ci_id)
    assert caught.value.code == 19

    clear_pod_load(state_dir, NODE, proc_root, POD_A)
    backend.destroy_compute_instance(1, device.gi_id, device.ci_id)
    backend.destroy_gpu_instance(1, device.gi_id)


def test_mark_busy_still_blocks_on_its_own(make_backend: MakeBackend, spec: str) -> None:
    backend = make_backend(spec)
    device = _mig(backend, 1, "1g.10gb")
    backend.mark_busy(1, device.gi_id)
    with pytest.raises(InUseError):
        backend.destroy_compute_instance(1, device.gi_id, device.ci_id)
    backend.clear_busy(1, device.gi_id)
    backend.destroy_compute_instance(1, device.gi_id, device.ci_id)


def test_a_reboot_ends_every_process(
    make_backend: MakeBackend, spec: str, state_dir: Path, proc_root: Path
) -> None:
    before = make_backend(spec, state_dir=state_dir)
    apply_pod_load(state_dir, NODE, proc_root, POD_A, [before.gpus[0].uuid], 40)
    assert len(before.usage().processes) == 1

    after = make_backend(spec, state_dir=state_dir, boot_id="boot-2")
    sample = after.usage()
    assert sample.processes == ()
    assert sample.gpus[0].sm_percent == 0.0


def test_cgroup_files_name_the_pod_and_follow_the_processes(
    make_backend: MakeBackend, spec: str, state_dir: Path, proc_root: Path
) -> None:
    backend = make_backend(spec, state_dir=state_dir)
    whole = backend.gpus[0].uuid
    device = _mig(backend, 1, "1g.10gb")

    first = apply_pod_load(state_dir, NODE, proc_root, POD_A, [whole, device.uuid], 5)
    assert first == (FIRST_FAKE_PID, FIRST_FAKE_PID + 1)
    containers = set()
    for pid in first:
        match = CGROUP.match((proc_root / str(pid) / "cgroup").read_text())
        assert match is not None
        assert match["pod"] == POD_A.replace("-", "_")
        containers.add(match["container"])
    assert len(containers) == 2

    second = apply_pod_load(state_dir, NODE, proc_root, POD_A, [whole], 5)
    assert second == (FIRST_FAKE_PID + 2,)  # never a reused pid
    assert sorted(p.name for p in proc_root.iterdir()) == [str(FIRST_FAKE_PID + 2)]

    clear_pod_load(state_dir, NODE, proc_root, POD_A)
    clear_pod_load(state_dir, NODE, proc_root, POD_A)  # idempotent
    assert list(proc_root.iterdir()) == []
    assert backend.usage().processes == ()
    third = apply_pod_load(state_dir, NODE, proc_root, POD_B, [whole], 5)
    assert third == (FIRST_FAKE_PID + 3,)


def test_unknown_uuid_is_refused_and_changes_nothing(
    make_backend: MakeBackend, spec: str, state_dir: Path, proc_root: Path
) -> None:
    backend = make_backend(spec, state_dir=state_dir)
    whole = backend.gpus[0].uuid
    apply_pod_load(state_dir, NODE, proc_root, POD_A, [whole], 20)

    with pytest.raises(NotFoundError, match="MIG-nope") as caught:
        apply_pod_load(state_dir, NODE, proc_root, POD_A, [whole, "MIG-nope"], 50)
    assert caught.value.code == 6

    assert [p.sm_percent for p in backend.usage().processes] == [20.0]
    assert [p.name for p in proc_root.iterdir()] == [str(FIRST_FAKE_PID)]


@pytest.mark.parametrize("percent", [-0.5, 100.5, math.nan, math.inf])
def test_percent_must_be_from_0_to_100(
    make_backend: MakeBackend, spec: str, state_dir: Path, proc_root: Path, percent: float
) -> None:
    backend = make_backend(spec, state_dir=state_dir)
    with pytest.raises(ValueError, match=re.escape(repr(percent))):
        apply_pod_load(state_dir, NODE, proc_root, POD_A, [backend.gpus[0].uuid], percent)


def test_unhealthy_gpu_is_a_failure_and_the_rest_stand(
    make_backend: MakeBackend, spec: str
) -> None:
    backend = make_backend(spec)
    backend.inject_unhealthy(1)
    sample = backend.usage()
    assert [f.minor for f in sample.failures] == [1]
    assert "GPU is lost" in sample.failures[0].message
    assert [g.minor for g in sample.gpus] == [0, 2]


def test_state_file_without_processes_loads(
    make_backend: MakeBackend, spec: str, state_dir: Path, proc_root: Path
) -> None:
    """A file written before fake processes (version 1) still loads, with none running."""
    first = make_backend(spec, state_dir=state_dir)
    device = _mig(first, 1, "1g.10gb")
    first.close()
    path = state_dir / state_file_name(NODE)
    document = json.loads(path.read_text())
    document["version"] = 1
    del document["processes"], document["nextPid"]
    for gpu in document["gpus"].values():
        del gpu["memoryBytes"]
        for instance in gpu["instances"]:
            del instance["memoryBytes"]
    path.write_text(json.dumps(document))

    backend = make_backend(spec, state_dir=state_dir)
    assert backend.mig_devices(1) == (device,)
    assert backend.usage().processes == ()
    # Memory of an instance made before it was kept comes from the packaged facts.
    (pid,) = apply_pod_load(state_dir, NODE, proc_root, POD_A, [device.uuid], 100)
    assert pid == FIRST_FAKE_PID
    (mig,) = [m for m in backend.usage().mig_devices if m.uuid == device.uuid]
    assert mig.memory_used_bytes == H100.mig_profiles[0].memory_mib * MIB


def test_a_pod_at_zero_percent_runs_nothing(
    make_backend: MakeBackend, spec: str, state_dir: Path, proc_root: Path
) -> None:
    backend = make_backend(spec, state_dir=state_dir)
    whole = backend.gpus[0].uuid
    apply_pod_load(state_dir, NODE, proc_root, POD_A, [whole], 20)

    assert apply_pod_load(state_dir, NODE, proc_root, POD_A, [whole], 0) == ()

    assert backend.usage().processes == ()
    assert list(proc_root.iterdir()) == []  # the earlier process is gone with its /proc entry
    with pytest.raises(NotFoundError, match="MIG-nope"):  # still checked at 0 %
        apply_pod_load(state_dir, NODE, proc_root, POD_A, ["MIG-nope"], 0)
