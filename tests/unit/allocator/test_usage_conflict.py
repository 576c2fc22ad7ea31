"""The re-check before and after writing: `Usage.conflict` against what others took meanwhile."""

from __future__ import annotations

from typing import Any

from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.allocator import ClusterSnapshot, Usage
from dra_driver.backends.fake import FakeBackend
from dra_driver.slices import SliceSettings, build_resource_slices

NODE = "n1"


def _snapshot() -> ClusterSnapshot:
    backend = FakeBackend.from_spec("H100-SXM5-80GB:1", NODE)
    return ClusterSnapshot.build(build_resource_slices(backend.inventory(), SliceSettings()), [])


def _allocation(device: str, share: str | None = None) -> dict[str, Any]:
    result: dict[str, Any] = {
        "request": "r",
        "driver": DEFAULT_DRIVER_NAME,
        "pool": NODE,
        "device": device,
    }
    if share:
        result["shareID"] = share
        result["consumedCapacity"] = {"compute": "10", "memory": "2Gi"}
    return {"devices": {"results": [result]}}


def test_a_device_taken_meanwhile_is_a_conflict() -> None:
    snapshot = _snapshot()
    usage = Usage()
    usage.record(snapshot, _allocation("gpu-0-mig-1g10gb-6"))
    assert "already allocated" in (
        usage.conflict(snapshot, _allocation("gpu-0-mig-1g10gb-6")) or ""
    )
    assert "shared counters" in (usage.conflict(snapshot, _allocation("gpu-0")) or "")
    assert usage.conflict(snapshot, _allocation("gpu-0-mig-1g10gb-5")) is None


def test_shares_that_hold_each_other_in_use_still_see_an_over_commitment() -> None:
    """Two of our shares keep the fractional device in use for each other; a MIG slice another
    allocator took on the same GPU meanwhile over-commits its counters, and each share's check
    must say so rather than trust the device being in use."""
    snapshot = _snapshot()
    usage = Usage()
    first, second = _allocation("gpu-0-shared", "a"), _allocation("gpu-0-shared", "b")
    usage.record(snapshot, first)
    assert usage.conflict(snapshot, second) is None  # sharing alone is fine
    usage.record(snapshot, second)
    usage.record(snapshot, _allocation("gpu-0-mig-1g10gb-6"))  # the other allocator's write
    usage.release(snapshot, first)
    assert "over-commits" in (usage.conflict(snapshot, first) or "")
