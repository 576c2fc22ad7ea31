"""What an allocated device takes from a queue, from the counters of the real slices."""

from __future__ import annotations

from typing import Any

import pytest

from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.allocator import ClusterSnapshot
from dra_driver.backends.fake import FakeBackend
from dra_driver.queues import Amounts, allocation_amounts, capacity, device_amounts
from dra_driver.slices import SliceSettings, build_resource_slices

DRIVER = DEFAULT_DRIVER_NAME
NODE = "n1"


@pytest.fixture(scope="module")
def snapshot() -> ClusterSnapshot:
    backend = FakeBackend.from_spec("H100-SXM5-80GB:2", NODE)
    return ClusterSnapshot.build(build_resource_slices(backend.inventory(), SliceSettings()), [])


def result(device: str, **extra: Any) -> dict[str, Any]:
    return {"request": "r", "driver": DRIVER, "pool": NODE, "device": device, **extra}


def memory_of(snapshot: ClusterSnapshot, device: str) -> float:
    found = snapshot.device(DRIVER, NODE, device)
    assert found is not None
    return float(found.capacity[f"{DRIVER}/memory"].value)


def test_a_whole_gpu_is_one_with_its_memory(snapshot: ClusterSnapshot) -> None:
    amounts = device_amounts(snapshot, DRIVER, result("gpu-1"))
    assert amounts == Amounts(1.0, memory_of(snapshot, "gpu-1"))


@pytest.mark.parametrize(
    ("device", "eighths"),
    [("gpu-0-mig-1g10gb-6", 1), ("gpu-0-mig-3g40gb-4", 4), ("gpu-0-mig-7g80gb-0", 8)],
)
def test_a_mig_device_is_its_share_of_the_memory_slices(
    snapshot: ClusterSnapshot, device: str, eighths: int
) -> None:
    amounts = device_amounts(snapshot, DRIVER, result(device))
    assert amounts.gpu == pytest.approx(eighths / 8)
    assert amounts.memory == pytest.approx(memory_of(snapshot, device), rel=0.01)


def test_a_time_slice_share_is_one_over_the_shares_per_gpu() -> None:
    for shares in (2, 4):
        backend = FakeBackend.from_spec("H100-SXM5-80GB:1", NODE)
        slices = build_resource_slices(backend.inventory(), SliceSettings(timeslice_shares=shares))
        snap = ClusterSnapshot.build(slices, [])
        amounts = device_amounts(snap, DRIVER, result("gpu-0-ts-1"))
        assert amounts.gpu == pytest.approx(1 / shares)
        # Its memory is its share of the GPU's memory counter.
        whole = device_amounts(snap, DRIVER, result("gpu-0"))
        assert amounts.memory == pytest.approx(whole.memory / shares)


def test_a_fractional_share_is_the_compute_it_got_and_the_memory_it_consumed(
    snapshot: ClusterSnapshot,
) -> None:
    share = result(
        "gpu-0-shared", shareID="s1", consumedCapacity={"compute": "30", "memory": "3Gi"}
    )
    assert device_amounts(snapshot, DRIVER, share) == Amounts(0.3, 3 * 2**30)


def test_other_drivers_admin_access_and_gone_devices_count_nothing(
    snapshot: ClusterSnapshot,
) -> None:
    assert device_amounts(snapshot, DRIVER, {**result("gpu-0"), "driver": "x.example.com"}) == (
        Amounts()
    )
    assert device_amounts(snapshot, DRIVER, result("gpu-0", adminAccess=True)) == Amounts()
    assert device_amounts(snapshot, DRIVER, result("gpu-9")) == Amounts()


def test_an_allocation_is_the_sum_of_its_results(snapshot: ClusterSnapshot) -> None:
    allocation = {
        "devices": {
            "results": [result("gpu-1"), result("gpu-0-mig-1g10gb-6"), result("gpu-0-mig-1g10gb-5")]
        }
    }
    total = allocation_amounts(snapshot, DRIVER, allocation)
    assert total.gpu == pytest.approx(1.25)
    assert allocation_amounts(snapshot, DRIVER, None) == Amounts()


def test_capacity_counts_whole_gpus_per_node(snapshot: ClusterSnapshot) -> None:
    total = capacity(snapshot, DRIVER)
    assert total.gpu == 2.0
    assert total.memory == pytest.approx(2 * memory_of(snapshot, "gpu-0"))
    assert capacity(snapshot, DRIVER, {"elsewhere"}) == Amounts()
