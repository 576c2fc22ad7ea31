"""Each prepared device's figures from a sample, the checkpoint and the claims' pods."""

from __future__ import annotations

from api.device_type import DeviceType
from dra_driver.backends.usage import (
    GpuUsage,
    MigUsage,
    ProcessUsage,
    UsageFailure,
    UsageSample,
)
from dra_driver.checkpoint.model import ClaimRecord, ClaimState, DeviceRecord, MigInstanceRecord
from kubeletplugin.telemetry.attribution import ClaimPods, PodOf, attribute
from kubeletplugin.telemetry.cgroups import NoPod

GPU0, GPU1 = "GPU-0000", "GPU-1111"
MIG = "MIG-aaaa"
GIB = 1 << 30


def _device(name: str, kind: DeviceType, minor: int = 0, **extra: object) -> DeviceRecord:
    return DeviceRecord(
        request_names=("gpu",),
        pool_name="node-a",
        device_name=name,
        cdi_device_ids=(),
        device_type=kind,
        minor=minor,
        **extra,  # type: ignore[arg-type]
    )


def _claim(uid: str, *devices: DeviceRecord, **extra: object) -> ClaimRecord:
    return ClaimRecord(
        uid=uid,
        namespace="team",
        name=f"claim-{uid}",
        state=ClaimState.PREPARE_COMPLETED,
        devices=devices,
        **extra,  # type: ignore[arg-type]
    )


def _gpus(sm0: float | None = 40.0, sm1: float | None = 0.0) -> tuple[GpuUsage, ...]:
    return (
        GpuUsage(0, GPU0, sm0, 3 * GIB, 80 * GIB),
        GpuUsage(1, GPU1, sm1, 0, 80 * GIB),
    )


def _pods(uids: dict[int, str | NoPod]) -> PodOf:
    return lambda pid: uids.get(pid, NoPod.EXITED)


def test_a_whole_gpu_takes_the_gpus_figures() -> None:
    claim = _claim("c1", _device("gpu-0", DeviceType.GPU))
    result = attribute(UsageSample(gpus=_gpus()), [claim], {}, _pods({}))
    [device] = result.devices
    assert (device.uuid, device.sm_percent, device.memory_used_bytes) == (GPU0, 40.0, 3 * GIB)
    assert (device.claim_uid, device.namespace, device.name, device.device) == (
        "c1",
        "team",
        "claim-c1",
        "gpu-0",
    )


def test_an_unknown_gpu_figure_stays_unknown_while_a_process_runs_there() -> None:
    claim = _claim("c1", _device("gpu-0", DeviceType.GPU))
    sample = UsageSample(gpus=_gpus(sm0=None), processes=(ProcessUsage(10, GPU0, None, GIB),))
    [device] = attribute(sample, [claim], {}, _pods({10: "pod-a"})).devices
    assert device.sm_percent is None


def test_a_gpu_in_mig_mode_with_nothing_on_it_is_at_zero() -> None:
    # NVML gives a GPU in MIG mode no SM figure, but without a MIG device or a process nothing
    # can compute there: the held GPU is unused, not unknown.
    claim = _claim("c1", _device("gpu-0", DeviceType.GPU))
    [device] = attribute(UsageSample(gpus=_gpus(sm0=None)), [claim], {}, _pods({})).devices
    assert (device.sm_percent, device.memory_used_bytes) == (0.0, 3 * GIB)
    with_mig = UsageSample(
        gpus=_gpus(sm0=None), mig_devices=(MigUsage(0, MIG, 9, None, GIB, 10 * GIB),)
    )
    [device] = attribute(with_mig, [claim], {}, _pods({})).devices
    assert device.sm_percent is None
    on_the_other_gpu = UsageSample(
        gpus=_gpus(sm0=None), mig_devices=(MigUsage(1, MIG, 9, None, GIB, 10 * GIB),)
    )
    [device] = attribute(on_the_other_gpu, [claim], {}, _pods({})).devices
    assert device.sm_percent == 0.0


def test_an_on_demand_mig_device_takes_its_mig_devices_figures() -> None:
    instance = MigInstanceRecord(0, "1g.10gb", 9, 0, MIG, 3, 1)
    other = MigInstanceRecord(0, "1g.10gb", 10, 0, "MIG-other", 4, 1)
    claim = _claim(
        "c1", _device("gpu-0-mig-1g10gb-3", DeviceType.MIG), mig_instances=(other, instance)
    )
    sample = UsageSample(
        gpus=_gpus(sm0=None),
        mig_devices=(
            MigUsage(0, "MIG-other", 10, 90.0, GIB, 10 * GIB),
            MigUsage(0, MIG, 9, 12.5, 2 * GIB, 10 * GIB),
        ),
    )
    [device] = attribute(sample, [claim], {}, _pods({})).devices
    assert (device.uuid, device.sm_percent, device.memory_used_bytes) == (MIG, 12.5, 2 * GIB)


def test_a_pre_created_mig_device_is_found_by_its_gpu_instance() -> None:
    claim = _claim("c1", _device("gpu-1-mig-5-0", DeviceType.MIG, minor=1, pre_created=True))
    sample = UsageSample(
        gpus=_gpus(),
        mig_devices=(
            MigUsage(0, "MIG-wrong-gpu", 5, 70.0, GIB, 10 * GIB),
            MigUsage(1, MIG, 5, None, GIB, 10 * GIB),
        ),
    )
    result = attribute(sample, [claim], {}, _pods({}))
    [device] = result.devices
    assert (device.uuid, device.sm_percent, device.memory_used_bytes) == (MIG, None, GIB)


def test_a_gpu_instance_with_several_compute_instances_is_told_apart_only_by_mps() -> None:
    sample = UsageSample(
        gpus=_gpus(),
        mig_devices=(
            MigUsage(1, "MIG-ci0", 5, 10.0, GIB, 10 * GIB),
            MigUsage(1, "MIG-ci1", 5, 20.0, GIB, 10 * GIB),
        ),
    )
    plain = _claim("c1", _device("gpu-1-mig-5-1", DeviceType.MIG, minor=1, pre_created=True))
    result = attribute(sample, [plain], {}, _pods({}))
    assert not result.devices
    assert [s.subject for s in result.skipped] == ["team/claim-c1 gpu-1-mig-5-1"]
    with_mps = _claim(
        "c2",
        _device("gpu-1-mig-5-1", DeviceType.MIG, minor=1, pre_created=True, mps_uuid="MIG-ci1"),
    )
    [device] = attribute(sample, [with_mps], {}, _pods({})).devices
    assert (device.uuid, device.sm_percent) == ("MIG-ci1", 20.0)


def test_a_share_sums_only_its_own_pods_processes() -> None:
    mine = _claim("c1", _device("gpu-0-ts-0", DeviceType.TIMESLICE))
    theirs = _claim("c2", _device("gpu-0-ts-1", DeviceType.TIMESLICE))
    pods = {
        "c1": ClaimPods(("a",), frozenset({"pod-a"})),
        "c2": ClaimPods(("b",), frozenset({"pod-b"})),
    }
    sample = UsageSample(
        gpus=_gpus(),
        processes=(
            ProcessUsage(10, GPU0, 20.0, GIB),
            ProcessUsage(11, GPU0, 5.0, GIB),
            ProcessUsage(12, GPU0, 30.0, 4 * GIB),
            ProcessUsage(13, GPU1, 50.0, GIB),  # the pod's, but on another GPU
        ),
    )
    owners: dict[int, str | NoPod] = {10: "pod-a", 11: "pod-a", 12: "pod-b", 13: "pod-a"}
    result = attribute(sample, [mine, theirs], pods, _pods(owners))
    by_claim = {d.claim_uid: d for d in result.devices}
    assert (by_claim["c1"].sm_percent, by_claim["c1"].memory_used_bytes) == (25.0, 2 * GIB)
    assert (by_claim["c2"].sm_percent, by_claim["c2"].memory_used_bytes) == (30.0, 4 * GIB)
    assert not result.stale_pods


def test_a_held_share_without_processes_is_unused_not_unknown() -> None:
    claim = _claim("c1", _device("gpu-0-shared", DeviceType.SHARED, mps_uuid=GPU0))
    pods = {"c1": ClaimPods(("a",), frozenset({"pod-a"}))}
    [device] = attribute(
        UsageSample(gpus=_gpus()),
        [claim],
        pods,
        _pods({}),
    ).devices
    assert (device.uuid, device.sm_percent, device.memory_used_bytes) == (GPU0, 0.0, 0)


def test_a_process_without_an_sm_figure_makes_the_share_unknown() -> None:
    claim = _claim("c1", _device("gpu-0-ts-0", DeviceType.TIMESLICE))
    pods = {"c1": ClaimPods(("a",), frozenset({"pod-a"}))}
    sample = UsageSample(
        gpus=_gpus(sm0=None),
        processes=(ProcessUsage(10, GPU0, 20.0, GIB), ProcessUsage(11, GPU0, None, GIB)),
    )
    owners: dict[int, str | NoPod] = {10: "pod-a", 11: "pod-a"}
    [device] = attribute(sample, [claim], pods, _pods(owners)).devices
    assert device.sm_percent is None
    assert device.memory_used_bytes == 2 * GIB


def test_a_share_is_never_above_its_gpu() -> None:
    # NVML keeps no samples for a process that ran no kernel; the GPU's own figure still
    # bounds every share of it, so an idle GPU's shares are idle too.
    claim = _claim("c1", _device("gpu-1-ts-0", DeviceType.TIMESLICE, minor=1))
    pods = {"c1": ClaimPods(("a",), frozenset({"pod-a"}))}
    owners: dict[int, str | NoPod] = {10: "pod-a", 11: "pod-a"}
    no_samples = UsageSample(gpus=_gpus(sm1=0.0), processes=(ProcessUsage(10, GPU1, None, GIB),))
    [device] = attribute(no_samples, [claim], pods, _pods(owners)).devices
    assert device.sm_percent == 0.0
    over = UsageSample(
        gpus=_gpus(sm1=30.0),
        processes=(ProcessUsage(10, GPU1, 25.0, GIB), ProcessUsage(11, GPU1, 20.0, GIB)),
    )
    [device] = attribute(over, [claim], pods, _pods(owners)).devices
    assert device.sm_percent == 30.0


def test_an_mps_share_on_a_mig_device_counts_the_mig_devices_processes() -> None:
    claim = _claim("c1", _device("gpu-0-shared", DeviceType.SHARED, mps_uuid=MIG))
    pods = {"c1": ClaimPods(("a",), frozenset({"pod-a"}))}
    sample = UsageSample(
        gpus=_gpus(),
        processes=(ProcessUsage(10, MIG, 15.0, GIB), ProcessUsage(11, GPU0, 60.0, GIB)),
    )
    owners: dict[int, str | NoPod] = {10: "pod-a", 11: "pod-a"}
    [device] = attribute(sample, [claim], pods, _pods(owners)).devices
    assert (device.uuid, device.sm_percent) == (MIG, 15.0)


def test_exited_and_podless_processes_are_skipped_and_reported() -> None:
    claim = _claim("c1", _device("gpu-0-ts-0", DeviceType.TIMESLICE))
    pods = {"c1": ClaimPods(("a",), frozenset({"pod-a"}))}
    sample = UsageSample(
        gpus=_gpus(),
        processes=(
            ProcessUsage(10, GPU0, 20.0, GIB),
            ProcessUsage(11, GPU0, 50.0, GIB),
            ProcessUsage(12, GPU0, 50.0, GIB),
        ),
    )
    owners: dict[int, str | NoPod] = {10: "pod-a", 11: NoPod.EXITED, 12: NoPod.NOT_IN_POD}
    result = attribute(sample, [claim], pods, _pods(owners))
    [device] = result.devices
    assert device.sm_percent == 20.0
    assert {s.cause for s in result.skipped} == {NoPod.EXITED.value, NoPod.NOT_IN_POD.value}


def test_a_process_of_a_pod_no_claim_lists_marks_the_claims_pods_stale() -> None:
    share = _claim("c1", _device("gpu-0-ts-0", DeviceType.TIMESLICE))
    whole = _claim("c2", _device("gpu-1", DeviceType.GPU, minor=1))
    pods = {
        "c1": ClaimPods(("a",), frozenset({"pod-a"})),
        "c2": ClaimPods(("b",), frozenset({"pod-b"})),
    }
    sample = UsageSample(
        gpus=_gpus(),
        processes=(ProcessUsage(10, GPU0, 20.0, GIB), ProcessUsage(11, GPU1, 5.0, GIB)),
    )
    owners: dict[int, str | NoPod] = {10: "pod-new", 11: "pod-b"}
    result = attribute(sample, [share, whole], pods, _pods(owners))
    assert result.stale_pods == {"c1"}


def test_a_failed_gpu_leaves_its_devices_out_and_the_rest_stands() -> None:
    claims = [
        _claim("c1", _device("gpu-0", DeviceType.GPU)),
        _claim("c2", _device("gpu-1", DeviceType.GPU, minor=1)),
    ]
    sample = UsageSample(
        gpus=(GpuUsage(1, GPU1, 0.0, 0, 80 * GIB),), failures=(UsageFailure(0, "GPU lost"),)
    )
    result = attribute(sample, claims, {}, _pods({}))
    assert [d.claim_uid for d in result.devices] == ["c2"]
    assert [s.subject for s in result.skipped] == ["GPU 0"]


def test_a_claim_still_being_prepared_is_not_attributed() -> None:
    claim = ClaimRecord(
        "c1", "team", "c", ClaimState.PREPARE_STARTED, (_device("gpu-0", DeviceType.GPU),)
    )
    assert not attribute(UsageSample(gpus=_gpus()), [claim], {}, _pods({})).devices


def test_claim_pods_come_from_reserved_for() -> None:
    claim = {
        "status": {
            "reservedFor": [
                {"resource": "pods", "name": "web-2", "uid": "u2"},
                {"resource": "pods", "name": "web-1", "uid": "u1"},
                {"apiGroup": "example.com", "resource": "jobs", "name": "j", "uid": "u3"},
            ]
        }
    }
    assert ClaimPods.from_claim(claim) == ClaimPods(("web-1", "web-2"), frozenset({"u1", "u2"}))
    assert ClaimPods.from_claim({}) == ClaimPods()
