"""Sharing settings: the time-slice a GPU gets from its users and the MPS limits of a device."""

from __future__ import annotations

from typing import Any

import pytest

from api import decode_config
from api.v1alpha1 import DeviceConfig
from dra_driver.backends.base import TimeSliceInterval
from dra_driver.checkpoint import ClaimRecord, ClaimState, DeviceRecord
from kubeletplugin.prepare.sharing import (
    MpsLimits,
    ShareError,
    config_limits,
    granted_limits,
    requested_interval,
    strictest,
    timeslice_users,
    uses_mps,
)

API = "resource.dra-driver.dev/v1alpha1"
GIB = 1 << 30
MIB = 1 << 20


def _gpu(sharing: dict[str, Any] | None = None) -> DeviceConfig:
    document: dict[str, Any] = {"apiVersion": API, "kind": "GpuConfig"}
    if sharing is not None:
        document["sharing"] = sharing
    return decode_config(document)


def _mig(sharing: dict[str, Any] | None = None) -> DeviceConfig:
    document: dict[str, Any] = {"apiVersion": API, "kind": "MigDeviceConfig"}
    if sharing is not None:
        document["sharing"] = sharing
    return decode_config(document)


def _sliced(interval: str | None) -> DeviceConfig:
    sharing: dict[str, Any] = {"strategy": "TimeSlicing"}
    if interval is not None:
        sharing["timeSlicingConfig"] = {"interval": interval}
    return _gpu(sharing)


def test_mps_limits_become_client_variables_with_memory_in_whole_mib_rounded_down() -> None:
    limits = MpsLimits(thread_percentage=30, pinned_memory_bytes=4 * GIB + MIB - 1)
    assert limits.environment() == (
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=4096M",
    )
    # Less than a MiB still limits the client (to the least MPS can express), never to nothing.
    assert MpsLimits(pinned_memory_bytes=MIB - 1).environment() == (
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=1M",
    )
    assert MpsLimits(thread_percentage=0).environment() == ("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=0",)
    assert MpsLimits().environment() == ()


def test_only_a_time_slicing_gpu_config_asks_for_an_interval() -> None:
    assert requested_interval(_sliced("Long")) is TimeSliceInterval.LONG
    assert requested_interval(_sliced("Short")) is TimeSliceInterval.SHORT
    assert requested_interval(_gpu()) is None
    assert requested_interval(_gpu({"strategy": "MPS"})) is None
    assert requested_interval(_mig({"strategy": "MPS"})) is None


def test_the_strictest_interval_anyone_asked_for_wins() -> None:
    long, medium, short = TimeSliceInterval.LONG, TimeSliceInterval.MEDIUM, TimeSliceInterval.SHORT
    assert strictest([long, short, medium]) is short
    assert strictest([long, medium]) is medium
    assert strictest([TimeSliceInterval.DEFAULT, long]) is long
    assert strictest([]) is TimeSliceInterval.DEFAULT


def _record(uid: str, *devices: tuple[int | None, str | None]) -> ClaimRecord:
    return ClaimRecord(
        uid=uid,
        namespace="ns",
        name=uid,
        state=ClaimState.PREPARE_COMPLETED,
        devices=tuple(
            DeviceRecord(("r",), "pool", f"gpu-{minor}", (), minor=minor, timeslice_interval=ts)
            for minor, ts in devices
        ),
    )


def test_timeslice_users_are_the_claims_on_that_gpu_that_asked_for_one() -> None:
    claims = {
        "a": _record("a", (0, "Long"), (1, "Short")),
        "b": _record("b", (0, "Medium")),
        "c": _record("c", (0, None), (None, "Short")),
    }
    assert timeslice_users(claims, 0) == [TimeSliceInterval.LONG, TimeSliceInterval.MEDIUM]
    assert timeslice_users(claims, 1) == [TimeSliceInterval.SHORT]
    assert timeslice_users(claims, 0, exclude="a") == [TimeSliceInterval.MEDIUM]
    assert timeslice_users(claims, 2) == []


def test_mps_is_used_only_by_an_mps_strategy() -> None:
    assert uses_mps(_gpu({"strategy": "MPS"}))
    assert uses_mps(_mig({"strategy": "MPS"}))
    assert not uses_mps(_sliced("Long"))
    assert not uses_mps(_gpu())
    assert not uses_mps(_mig())


def _mps(**mps_config: Any) -> dict[str, Any]:
    return {"strategy": "MPS", "mpsConfig": mps_config}


def test_config_limits_take_the_device_entry_by_uuid_then_index_then_the_default() -> None:
    config = _gpu(
        _mps(
            defaultActiveThreadPercentage=40,
            defaultPinnedDeviceMemoryLimit="8Gi",
            defaultPerDevicePinnedMemoryLimit={"GPU-a": "2Gi", "1": "3Gi", "GPU-b": "5Gi"},
        )
    )
    assert config_limits(config, 1, "GPU-a") == MpsLimits(40, 2 * GIB)
    assert config_limits(config, 1, "GPU-c") == MpsLimits(40, 3 * GIB)
    assert config_limits(config, 0, "GPU-c") == MpsLimits(40, 8 * GIB)
    mig = _mig(_mps(defaultPerDevicePinnedMemoryLimit={"0": "1Gi"}))
    assert config_limits(mig, 0, "GPU-x") == MpsLimits(None, GIB)
    assert config_limits(mig, 1, "GPU-x") == MpsLimits()


def test_config_limits_are_none_without_an_mps_config() -> None:
    assert config_limits(_gpu({"strategy": "MPS"}), 0, "GPU-a") == MpsLimits()
    assert config_limits(_sliced("Long"), 0, "GPU-a") == MpsLimits()
    assert config_limits(_gpu(), 0, "GPU-a") == MpsLimits()


def test_granted_limits_come_from_consumed_capacity() -> None:
    assert granted_limits(None, "r") == MpsLimits()
    assert granted_limits({}, "r") == MpsLimits()
    assert granted_limits({"compute": "25", "memory": "4Gi"}, "r") == MpsLimits(25, 4 * GIB)
    assert granted_limits({"compute": 100, "memory": 1024}, "r") == MpsLimits(100, 1024)
    assert granted_limits({"compute": "1"}, "r") == MpsLimits(1, None)
    assert granted_limits({"memory": "1Mi"}, "r") == MpsLimits(None, MIB)
    # A fraction of a byte is rounded down: never more than was accounted.
    assert granted_limits({"memory": "1500m"}, "r") == MpsLimits(None, 1)


@pytest.mark.parametrize(
    ("consumed", "message"),
    [
        ({"compute": "0"}, "results[0].consumedCapacity.compute: 0 is not a percentage 1..100"),
        ({"compute": 101}, "results[0].consumedCapacity.compute: 101 is not a percentage 1..100"),
        ({"compute": True}, "results[0].consumedCapacity.compute: expected a quantity, got True"),
        ({"memory": 1.5}, "results[0].consumedCapacity.memory: expected a quantity, got 1.5"),
        ({"memory": "lots"}, "results[0].consumedCapacity.memory"),
    ],
)
def test_bad_consumed_capacity_is_refused_naming_the_field(
    consumed: dict[str, object], message: str
) -> None:
    with pytest.raises(ShareError) as caught:
        granted_limits(consumed, "results[0]")
    assert str(caught.value).startswith(message)
